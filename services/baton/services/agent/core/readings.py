"""What the agent's backends read, as the core consumes it: one typed value per reading.

Every reading carries ``at``, the time it was taken. The backends (NVML, kernel log,
disks, NICs, pods, or the simulated hardware) make them; ``core.step`` turns them into
telemetry. Tagged, so ``baton agent --once --json`` prints them self-described.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from baton.proto.telemetry import Disk, GpuStatus, Nic


class Reading(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="reading"):
    at: float


class GpuProcess(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    pid: int
    used_mib: int
    pod: str = ""  # "ns/name" when the backend knows it


class GpuSample(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One GPU as read: its status (``zombie_mib`` not yet known) and its processes."""

    status: GpuStatus
    processes: tuple[GpuProcess, ...] = ()


class Gpus(Reading, frozen=True, tag="gpus"):
    """Every GPU of the node. ``found`` None: the backend could not look (no NVML)."""

    gpus: tuple[GpuSample, ...] = ()
    expected: int | None = None
    found: int | None = None


class Host(Reading, frozen=True, tag="host"):
    disks: tuple[Disk, ...] = ()
    nics: tuple[Nic, ...] = ()


class Pods(Reading, frozen=True, tag="pods"):
    """Pods running on the node (``"ns/name"``) and which pod holds which GPU (by uuid)."""

    running: frozenset[str] = frozenset()
    gpu_owner: dict[str, str] = {}  # GPU uuid -> "ns/name"


class XidSeen(Reading, frozen=True, tag="xid"):
    """An Xid as a source saw it; ``seq`` increases per ``source`` (kernel log record
    number, NVML event count)."""

    source: Literal["nvml", "kmsg"]
    seq: int
    xid: int
    bus_id: str = ""
    gpu: int = -1
    text: str = ""
    pid: int | None = None
    process: str = ""
    gpu_instance: int = -1  # NVML's gpuInstanceId on a MIG GPU


class Backend(Reading, frozen=True, tag="backend"):
    """A backend became available (``reason`` empty) or unavailable (``reason`` says why)."""

    name: str
    reason: str = ""


class Power(Reading, frozen=True, tag="power"):
    """Simulated nodes only: ``up`` False is a powered-off node (no agent, no telemetry);
    back up is a fresh agent (heartbeat ``seq`` from 1)."""

    up: bool


class Tick(Reading, frozen=True, tag="tick"):
    """Time passes: heartbeats and report refreshes fall due."""


AnyReading = Gpus | Host | Pods | XidSeen | Backend | Power | Tick
