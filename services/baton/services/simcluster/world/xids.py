"""NVIDIA Xid errors: what each one logs and what it does to a GPU, as a table.

A simulated Xid writes the kernel log line the driver writes (R535+ form)::

    NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:3b:00): 13, pid=2113, name=python3, Graphics SM Warp Exception on ...

(application-attributed Xids name the process on that GPU, when there is one), and
changes the GPU the way NVML would then read it: 79 takes the GPU off the bus, 48/94/95
count an uncorrectable ECC error and mark a row for remapping, 64 is a failed
remapping, 74 counts NVLink errors, 92 single-bit errors; 13/31/43 only log. The
driver's recovery action (``nvmlDeviceGetRecoveryAction``) only escalates (reset <
drain < reboot), and a change is logged as Xid 154, as R550+ drivers do. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from baton.services.simcluster.world.hardware import Gpu, NodeHardware, log

# recovery action -> (NVML value, its name in the Xid 154 line), mildest first
RECOVERY: dict[str, tuple[int, str]] = {
    "": (0, "None"),
    "reset": (1, "GPU Reset Required"),
    "drain": (4, "Drain and Reset"),
    "reboot": (2, "Node Reboot Required"),
}
_SEVERITY = {action: rank for rank, action in enumerate(RECOVERY)}


@dataclass(frozen=True, slots=True)
class Xid:
    number: int
    name: str  # NVIDIA's Xid catalog name
    text: str  # the rest of the kernel line; {gpu} is the GPU index
    app: bool = False  # attributed to a process on the GPU (pid/name in the line)
    lost: bool = False  # the GPU falls off the bus
    sbe: int = 0  # single-bit ECC errors counted (volatile and aggregate)
    dbe: int = 0  # uncorrectable (double-bit) ECC errors counted
    remap_pending: bool = False  # a row marked for remapping (reset to activate)
    remap_failure: bool = False
    nvlink: int = 0  # NVLink errors counted
    recovery: str = ""  # the driver's recovery action afterwards (escalates only)


XIDS: dict[int, Xid] = {
    x.number: x
    for x in (
        Xid(13, "Graphics Engine Exception",
            "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address", app=True),
        Xid(31, "GPU memory page fault",
            "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
            "0x7f3a_1c000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ", app=True),
        Xid(43, "GPU stopped processing", "Ch 00000010", app=True),
        Xid(48, "Double Bit ECC Error",
            "An uncorrectable double bit error (DBE) has been detected on GPU in the "
            "framebuffer at partition 4, subpartition 1.",
            dbe=1, remap_pending=True, recovery="reset"),
        Xid(63, "ECC page retirement or row remapping recording event",
            "Row Remapper: New row (0x00000000000bff0c) marked for remapping, reset gpu to "
            "activate.", remap_pending=True, recovery="reset"),
        Xid(64, "ECC page retirement or row remapper recording failure",
            "Row Remapper: Failed to mark row (0x00000000000bff0c) for remapping",
            remap_failure=True, recovery="drain"),
        Xid(74, "NVLink Error",
            "NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
            nvlink=1, recovery="reset"),
        Xid(79, "GPU has fallen off the bus", "GPU has fallen off the bus.",
            lost=True, recovery="reboot"),
        Xid(92, "High single-bit ECC error rate", "High single-bit ECC error rate", sbe=64),
        Xid(94, "Contained ECC error", "Contained: SM (0x1). RST: No, D-RST: No",
            app=True, dbe=1, remap_pending=True, recovery="reset"),
        Xid(95, "Uncontained ECC error", "Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No",
            dbe=1, remap_pending=True, recovery="drain"),
        Xid(119, "GSP RPC timeout",
            "Timeout after 6s of waiting for RPC response from GPU{gpu} GSP! Expected function "
            "76 (GSP_RM_CONTROL) (0x20802a02 0x8).", app=True, recovery="reset"),
        Xid(120, "GSP Error", "GSP task exception: load access fault (cause:0x5)",
            app=True, recovery="reset"),
    )
}  # fmt: skip
RECOVERY_CHANGED = 154


def pci(gpu: Gpu) -> str:
    """The address as Xid lines write it: ``0000:3b:00`` (no function)."""
    return gpu.bus_id.rsplit(".", 1)[0]


def line(number: int, gpu: Gpu, text: str, *, pid: int | None = None, name: str = "") -> str:
    who = "pid='<unknown>', name=<unknown>" if pid is None else f"pid={pid}, name={name}"
    return f"NVRM: Xid (PCI:{pci(gpu)}): {number}, {who}, {text}"


def raise_xid(doc: NodeHardware, gpu: Gpu, number: int) -> None:
    """Xid ``number`` on ``gpu``: the kernel line(s), then what NVML reads afterwards."""
    xid = XIDS.get(number)
    if xid is None:
        known = ", ".join(map(str, sorted(XIDS)))
        raise ValueError(f"xid: unknown Xid {number}; known: {known}")
    owner = gpu.processes[0] if xid.app and gpu.processes else None
    text = xid.text.format(gpu=gpu.index)
    if owner is None:
        log(doc, line(number, gpu, text))
    else:
        log(doc, line(number, gpu, text, pid=owner.pid, name="python3"))
    if xid.lost:
        gpu.present = False
    count_ecc(gpu, sbe=xid.sbe, dbe=xid.dbe)
    gpu.row_remap_pending |= xid.remap_pending
    gpu.row_remap_failure |= xid.remap_failure
    gpu.nvlink_errors += xid.nvlink
    escalate(doc, gpu, xid.recovery)


def count_ecc(gpu: Gpu, *, sbe: int = 0, dbe: int = 0) -> None:
    gpu.ecc_volatile_sbe += sbe
    gpu.ecc_aggregate_sbe += sbe
    gpu.ecc_volatile_dbe += dbe
    gpu.ecc_aggregate_dbe += dbe


def escalate(doc: NodeHardware, gpu: Gpu, action: str) -> None:
    """Raise the GPU's recovery action to ``action`` unless it already asks for more."""
    if _SEVERITY[action] <= _SEVERITY[gpu.recovery_action]:
        return
    (old, old_name), (new, new_name) = RECOVERY[gpu.recovery_action], RECOVERY[action]
    gpu.recovery_action = action
    text = f"GPU recovery action changed from {old:#x} ({old_name}) to {new:#x} ({new_name})"
    log(doc, line(RECOVERY_CHANGED, gpu, text))
