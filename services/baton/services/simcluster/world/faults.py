"""Fault kinds: what each does to a node's hardware (and Node), and how it heals. A table.

A :class:`Fault` names a kind and its details (``xid``, ``gpu``, ``mount``...). Each
kind edits a :class:`~services.simcluster.hardware.NodeHardware` in place on inject
and on heal, and may set Node conditions as well (``node-notready``; ``gpu-fault``,
the older form of ``xid`` that also writes what a node problem detector would). The
simulation (:mod:`faulting`) then derives the rest of the Node from the hardware: GPUs
the device plugin would call unhealthy leave ``allocatable``, a full nodefs sets
DiskPressure. Pure.

Details in text (``baton sim fault --detail``, the trace's ``detail`` column) are
``key=value`` pairs separated by spaces or ``;``: ``xid=79 gpu=3``, ``mount=/raid``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from baton.services.simcluster.world import conditions, hardware, xids
from baton.services.simcluster.world.conditions import NodeFault
from baton.services.simcluster.world.hardware import Gpu, NodeHardware


class Fault(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    kind: str
    xid: int = 79  # xid, gpu-fault
    gpu: int | None = None  # GPU index; inject: None is GPU 0, heal: None is every GPU
    sbe: int = 0  # ecc: single-bit errors to count
    dbe: int = 1  # ecc: uncorrectable errors to count
    errors: int = 1  # nvlink: NVLink errors to count
    mount: str | None = None  # disk-full, disk-readonly; inject: None is "/", heal: every disk
    ratio: float = 1.0  # disk-full: used share
    nic: str | None = None  # nic-down; inject: None is ib0 (eth0 without IB), heal: every NIC
    mib: int = 40_960  # zombie-gpu: GPU memory the orphaned process holds


Edit = Callable[[NodeHardware, Fault], None]


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    doc: str
    inject: Edit
    heal: Edit
    on_inject: Callable[[Fault], NodeFault] | None = None  # Node conditions/annotations
    on_heal: Callable[[Fault], NodeFault] | None = None
    gpu: bool = False  # acts on GPUs (``gpu`` is checked against the node's GPUs)


def _gpus(doc: NodeHardware, fault: Fault, *, heal: bool) -> list[Gpu]:
    if heal and fault.gpu is None:
        return list(doc.gpus)
    return [hardware.find_gpu(doc, fault.gpu or 0)]


def reset_gpu(gpu: Gpu) -> None:
    """A GPU reset (or repair): back on the bus, volatile counters and pending work cleared;
    aggregate counters stay, and a pending row remap or page retirement takes effect."""
    gpu.present = True
    gpu.retired_pages += gpu.retired_pages_pending
    gpu.ecc_volatile_sbe = gpu.ecc_volatile_dbe = gpu.nvlink_errors = 0
    gpu.retired_pages_pending = gpu.row_remap_pending = gpu.row_remap_failure = False
    gpu.recovery_action = ""


def _xid(doc: NodeHardware, fault: Fault) -> None:
    xids.raise_xid(doc, hardware.find_gpu(doc, fault.gpu or 0), fault.xid)


def _lost(doc: NodeHardware, fault: Fault) -> None:
    xids.raise_xid(doc, hardware.find_gpu(doc, fault.gpu or 0), 79)


def _reset(doc: NodeHardware, fault: Fault) -> None:
    for gpu in _gpus(doc, fault, heal=True):
        reset_gpu(gpu)


def _ecc(doc: NodeHardware, fault: Fault) -> None:
    gpu = hardware.find_gpu(doc, fault.gpu or 0)
    xids.count_ecc(gpu, sbe=fault.sbe, dbe=fault.dbe)
    gpu.row_remap_pending |= fault.dbe > 0


def _nvlink(doc: NodeHardware, fault: Fault) -> None:
    hardware.find_gpu(doc, fault.gpu or 0).nvlink_errors += fault.errors


def _zombie(doc: NodeHardware, fault: Fault) -> None:
    gpu = hardware.find_gpu(doc, fault.gpu or 0)
    gpu.processes.append(hardware.GpuProcess(pid=hardware.next_pid(doc), used_mib=fault.mib))


def _bury(doc: NodeHardware, fault: Fault) -> None:
    for gpu in _gpus(doc, fault, heal=True):
        gpu.processes = [p for p in gpu.processes if p.pod]


def _disks(doc: NodeHardware, fault: Fault, *, heal: bool = False) -> list[hardware.Disk]:
    if heal and fault.mount is None:
        return list(doc.disks)
    mount = fault.mount or "/"
    for d in doc.disks:
        if d.mount == mount:
            return [d]
    raise ValueError(f"mount: node {doc.node} has no disk at {mount!r}")


def _fill(doc: NodeHardware, fault: Fault) -> None:
    for d in _disks(doc, fault):
        d.used_ratio = fault.ratio


def _empty(doc: NodeHardware, fault: Fault) -> None:
    for d in _disks(doc, fault, heal=True):
        d.used_ratio = hardware.DEFAULT_USED.get(d.mount, 0.1)


def _read_only(doc: NodeHardware, fault: Fault) -> None:
    for d in _disks(doc, fault):
        d.read_only = True
        device = hardware.device_of(d.mount)
        hardware.log(doc, f"EXT4-fs ({device}): Remounting filesystem read-only")


def _writable(doc: NodeHardware, fault: Fault) -> None:
    for d in _disks(doc, fault, heal=True):
        d.read_only = False


def _nic_name(doc: NodeHardware, fault: Fault) -> str:
    if fault.nic is not None:
        return fault.nic
    return "ib0" if any(n.name == "ib0" for n in doc.nics) else "eth0"


def _link(doc: NodeHardware, fault: Fault, *, up: bool) -> None:
    """Set the link of one NIC (heal without ``nic``: of every NIC that is down)."""
    wanted = None if up and fault.nic is None else _nic_name(doc, fault)
    if wanted is not None and all(n.name != wanted for n in doc.nics):
        raise ValueError(f"nic: node {doc.node} has no NIC {wanted!r}")
    for i, nic in enumerate(doc.nics):
        if wanted in (None, nic.name) and nic.up != up:
            nic.up = up
            state = "ACTIVE" if up else "DOWN"
            hardware.log(doc, f"mlx5_core {hardware.nic_bus(i)} mlx5_{i}: Port: 1 Link {state}")


def _power(up: bool) -> Edit:
    def edit(doc: NodeHardware, fault: Fault) -> None:
        doc.up = up

    return edit


def _nothing(doc: NodeHardware, fault: Fault) -> None:
    return None


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("xid", "Xid <xid> on GPU <gpu>: its kernel line and effect; heal: GPU reset",
             _xid, _reset, gpu=True),
        Kind("ecc", "count <sbe>/<dbe> ECC errors on GPU <gpu> (no kernel line); heal: GPU reset",
             _ecc, _reset, gpu=True),
        Kind("nvlink", "count <errors> NVLink errors on GPU <gpu>; heal: GPU reset",
             _nvlink, _reset, gpu=True),
        Kind("gpu-lost", "GPU <gpu> falls off the bus (Xid 79); heal: GPU reset",
             _lost, _reset, gpu=True),
        Kind("zombie-gpu", "a process of no pod holds <mib> MiB on GPU <gpu>; heal: it exits",
             _zombie, _bury, gpu=True),
        Kind("disk-full", "disk <mount> at <ratio> used; heal: back to its usual use",
             _fill, _empty),
        Kind("disk-readonly", "disk <mount> remounted read-only; heal: writable",
             _read_only, _writable),
        Kind("nic-down", "NIC <nic> loses its link; heal: link up",
             lambda d, f: _link(d, f, up=False), lambda d, f: _link(d, f, up=True)),
        Kind("node-notready", "the kubelet stops posting Ready (condition only); heal: Ready",
             _nothing, _nothing, on_inject=lambda f: conditions.not_ready(),
             on_heal=lambda f: conditions.ready()),
        Kind("agent-down", "the node is off or its agent cannot run (up: false); heal: up",
             _power(False), _power(True)),
        Kind("gpu-fault", "xid, plus GPUHealthy=False and annotation sim.baton.io/gpu-fault",
             _xid, _reset, gpu=True,
             on_inject=lambda f: conditions.gpu_fault(xid=f.xid, gpu=f.gpu or 0),
             on_heal=lambda f: conditions.gpu_heal()),
    )
}  # fmt: skip
ALIASES = {"node-ready": ("node-notready", True), "gpu-heal": ("gpu-fault", True)}


class FaultError(ValueError):
    """A fault that cannot be applied; the message names the field (or node) at fault."""


def fault(kind: str, **detail: object) -> Fault:
    """A checked Fault: ``fault("xid", xid=79, gpu=3)``; FaultError names what is wrong."""
    if kind not in KINDS:
        raise FaultError(f"kind: unknown fault {kind!r}; known: {', '.join(sorted(KINDS))}")
    try:
        made = msgspec.convert({"kind": kind, **detail}, Fault, strict=False)
    except msgspec.ValidationError as exc:
        raise FaultError(str(exc).replace(" - at `$.", ": ").rstrip("`")) from None
    if kind in ("xid", "gpu-fault") and made.xid not in xids.XIDS:
        known = ", ".join(map(str, sorted(xids.XIDS)))
        raise FaultError(f"xid: unknown Xid {made.xid}; known: {known}")
    if made.gpu is not None and made.gpu < 0:
        raise FaultError(f"gpu: expected >= 0, got {made.gpu}")
    return made


def pairs(text: str) -> dict[str, str]:
    """``"xid=79 gpu=3"`` -> ``{"xid": "79", "gpu": "3"}``; FaultError names a bad pair."""
    detail: dict[str, str] = {}
    for pair in (p for p in re.split(r"[\s;]+", text.strip()) if p):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise FaultError(f"detail: expected key=value, got {pair!r}")
        detail[key] = value
    return detail


def parse_detail(kind: str, text: str) -> Fault:
    """``parse_detail("xid", "xid=79 gpu=3")``; FaultError names what is wrong."""
    return fault(kind, **pairs(text))


def check(doc: NodeHardware, f: Fault) -> None:
    """Raise FaultError if ``f`` cannot apply to this node (no such GPU, disk or NIC)."""
    try:
        if KINDS[f.kind].gpu and f.gpu is not None:
            hardware.find_gpu(doc, f.gpu)
        elif KINDS[f.kind].gpu and not doc.gpus:
            raise ValueError(f"gpu: node {doc.node} has no GPUs")
        if f.kind in ("disk-full", "disk-readonly") and f.mount is not None:
            _disks(doc, f)
        if f.kind == "nic-down" and _nic_name(doc, f) not in {n.name for n in doc.nics}:
            raise ValueError(f"nic: node {doc.node} has no NIC {_nic_name(doc, f)!r}")
    except ValueError as exc:
        raise FaultError(str(exc)) from None
