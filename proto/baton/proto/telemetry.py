"""Node telemetry, published by the node agent (``baton agent``), one per node.

Subjects: ``baton.<cluster>.telemetry.<kind>.<node>`` (``subject(cluster, kind, node)``),
TELEMETRY stream (limits, 1 day). Each agent publishes only on its own node's subjects.

| kind | payload (``type``) | published |
|---|---|---|
| ``gpu`` | ``telemetry.gpu.v1`` (``GpuReport``) | on change, and at least every refresh period |
| ``node`` | ``telemetry.node.v1`` (``NodeReport``) | on change, and at least every refresh period |
| ``xid`` | ``telemetry.xid.v1`` (``XidEvent``) | once per Xid, as it happens |
| ``heartbeat`` | ``telemetry.heartbeat.v1`` (``Heartbeat``) | every heartbeat period |

A report is the node's whole current state of its kind, so a consumer needs only the
latest message per subject (``last_per_subject``); the refresh keeps that message
within the stream's ``max_age``. What counts as a change (temperature moves by its
deadband, any counter moves, a flag flips) is the agent core's table, see
``docs/agent.md``. ``at`` is the time of the reading (report, Xid) or of the beat.

A field that is ``None`` (absent from the JSON) was not reported: the device or
the backend does not support it. ``failed`` names fields whose read failed for
another reason (the agent could not tell), which a health rule may treat as
suspect. A heartbeat that stops means the agent, or the node, is gone; ``seq``
restarts at 1 and ``started`` changes when the agent restarts.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from baton.proto import subjects

GPU: Final = "gpu"
NODE: Final = "node"
XID: Final = "xid"
HEARTBEAT: Final = "heartbeat"
EGRESS: Final = "egress"  # per-pod egress bytes (proto.bandwidth.NodeEgress)
KINDS: Final = (GPU, NODE, XID, HEARTBEAT, EGRESS)

# What the GPU driver asks for to recover a GPU (NVML's nvmlDeviceGpuRecoveryAction_t).
RecoveryAction = Literal[
    "",  # none
    "reset",  # GPU reset
    "reboot",  # node reboot
    "drain",  # drain peer-to-peer traffic (DRAIN_P2P)
    "drain-and-reset",
    "recover-imex-domain",
    "bus-reset",
    "system-reboot",
]


def subject(cluster: str, kind: str, node: str) -> str:
    """``baton.<cluster>.telemetry.<kind>.<node>``; raises InvalidName for a bad node name."""
    if kind not in KINDS:
        raise ValueError(f"telemetry kind {kind!r} is not one of {', '.join(KINDS)}")
    return subjects.subject(cluster, subjects.TELEMETRY, kind, node)


def wildcard(cluster: str, kind: str = "*", node: str = "*") -> str:
    """A filter such as ``baton.c1.telemetry.*.gpu-0001`` or ``baton.c1.telemetry.xid.*``."""
    token = node if node == "*" else subjects.encode_name(node)
    return subjects.wildcard(cluster, subjects.TELEMETRY, kind, token)


class Telemetry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type"):
    node: str
    at: float


class MigDevice(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A MIG instance that exists on a GPU (created by the DRA driver or mig-parted)."""

    uuid: str  # "MIG-..."
    profile: str = ""  # "1g.10gb", from the instance's name
    gpu_instance: int = -1  # the GPU instance id; -1 not known


class GpuStatus(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One GPU as the driver reports it. Counters are totals since the driver loaded
    (volatile) or over the GPU's life (aggregate)."""

    index: int
    uuid: str = ""
    bus_id: str = ""  # PCI domain:bus:device, e.g. "0000:3b:00" (as in Xid lines)
    present: bool = True  # False: the GPU does not answer (fallen off the bus, lost)
    temperature_c: int | None = None
    ecc_volatile_sbe: int | None = None  # corrected (single-bit) ECC errors
    ecc_volatile_dbe: int | None = None  # uncorrected (double-bit) ECC errors
    ecc_aggregate_sbe: int | None = None
    ecc_aggregate_dbe: int | None = None
    retired_pages: int | None = None  # pages retired for SBE or DBE (pre-Ampere)
    retired_pages_pending: bool | None = None  # retirement waits for a reboot
    row_remap_pending: bool | None = None  # a remap waits for a GPU reset (Ampere+)
    row_remap_failure: bool | None = None  # a row could not be remapped
    row_remap_banks_full: int | None = None  # memory banks with no spare row left
    nvlink_errors: int | None = None  # CRC, replay and recovery errors over all links
    recovery_action: RecoveryAction = ""
    zombie_mib: int | None = None  # memory held by processes of no running pod
    failed: tuple[str, ...] = ()  # fields whose read failed (not merely unsupported)
    # Where the GPU sits, as DRA's standard attributes say it: ``pci<domain>:<bus>`` of
    # its PCIe root complex (``resource.kubernetes.io/pcieRoot``) and its NUMA node.
    pcie_root: str = ""
    numa_node: int | None = None
    mig_enabled: bool | None = None  # None: the GPU cannot do MIG, or it was not read
    mig: tuple[MigDevice, ...] = ()  # the MIG instances on it now


class GpuReport(Telemetry, frozen=True, tag="telemetry.gpu.v1"):
    gpus: tuple[GpuStatus, ...] = ()


class Disk(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    mount: str  # the mount point as the node sees it
    used_ratio: float = 0.0  # used / (used + available to non-root), like df's Use%
    read_only: bool = False
    error: str = ""  # the mount could not be read (missing, permission)


class Nic(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    name: str
    up: bool
    rdma: bool = False  # an RDMA device (InfiniBand or RoCE) sits on it
    pcie_root: str = ""  # as GpuStatus.pcie_root; "" for a virtual interface


class NodeReport(Telemetry, frozen=True, tag="telemetry.node.v1"):
    disks: tuple[Disk, ...] = ()
    nics: tuple[Nic, ...] = ()
    gpus_expected: int | None = None  # None: not configured
    gpus_found: int | None = None  # GPUs that answer; None: could not look (no NVML)


class XidEvent(Telemetry, frozen=True, tag="telemetry.xid.v1"):
    """One Xid error, published once. ``source`` says where the agent saw it; the same
    Xid seen by both within the agent's merge window is published once, by the first."""

    xid: int
    source: Literal["nvml", "kmsg"]
    gpu: int = -1  # GPU index on the node, -1 when the bus id matches no known GPU
    bus_id: str = ""
    text: str = ""  # the driver's message after the Xid number
    pid: int | None = None  # None: the driver did not say ('<unknown>')
    process: str = ""
    seq: int = 0  # the source's sequence number (kernel log record, NVML event)
    # The MIG instance the driver named (NVML's gpuInstanceId), -1 for none. A
    # partition's fault is its GPU's: ``gpu`` is the GPU it sits on.
    gpu_instance: int = -1


class Heartbeat(Telemetry, frozen=True, tag="telemetry.heartbeat.v1"):
    seq: int  # 1, 2, ... since ``started``
    started: float  # when this agent process started on the node
    version: str = ""
    backends: tuple[str, ...] = ()  # backends in use
    unavailable: dict[str, str] = {}  # backend -> why it is not in use
    every_s: float = 0.0  # the agent's keep-alive period (0: not said, an older agent)


AnyTelemetry = GpuReport | NodeReport | XidEvent | Heartbeat

KIND_OF: Final[dict[type[Telemetry], str]] = {
    GpuReport: GPU,
    NodeReport: NODE,
    XidEvent: XID,
    Heartbeat: HEARTBEAT,
}


def msg_id(event: AnyTelemetry, *, sent: float) -> str:
    """``Nats-Msg-Id`` for a publish made at ``sent``: a retried publish is stored once,
    a report republished later (refresh) is stored again, an Xid is stored once per
    source record and a beat once per agent start and ``seq``."""
    match event:
        case XidEvent():
            return f"{event.node}:xid:{event.source}:{event.seq}:{_micros(event.at)}"
        case Heartbeat():
            return f"{event.node}:heartbeat:{_micros(event.started)}:{event.seq}"
    return f"{event.node}:{KIND_OF[type(event)]}:{_micros(sent)}"


def _micros(t: float) -> int:
    return round(t * 1_000_000)
