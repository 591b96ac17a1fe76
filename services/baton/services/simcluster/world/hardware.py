"""A simulated node's hardware, as its NVML and kernel would show it.

This is the document ``GET /sim/v1/hardware`` serves (one per node) and Baton's node
agent reads in simulation instead of NVML, ``/dev/kmsg``, ``statfs`` and netlink. It
is separate from the Kubernetes API: a node's hardware can be broken while its Node
object still says Ready, as on a real cluster. The shape is a contract with the agent;
add fields only at the end of a Struct, never rename.

The Structs are mutable: the simulation keeps one ``NodeHardware`` per node and edits
it in place (faults, pods starting and ending); the feed encodes it when it changes.
They hold no reference cycles, so the garbage collector does not track them
(``gc=False``): 7,500 nodes' documents cost collections nothing. The helpers are pure.
"""

from __future__ import annotations

import hashlib

import msgspec

KERNEL_LOG_LINES = 64  # lines a document keeps; kernel_log_seq keeps counting
NODEFS = ("/", "/var/lib/containerd")  # the kubelet's nodefs and imagefs
DISK_PRESSURE_RATIO = 0.9  # the kubelet's default hard eviction: nodefs.available < 10%
FULL_RATIO = 0.99
USED_MIB = 73_728  # GPU memory a training process holds (72 GiB of an 80 GB H100)
PER_SWITCH = 2  # GPUs (and RDMA NICs) under one PCIe switch, as on an HGX H100
PER_NUMA = 4  # GPUs per NUMA node
MIG_PROFILE = "1g.10gb"  # one memory slice of eight, one compute slice of seven
# PCI buses of the 8 GPUs of an HGX H100 baseboard, in NVML index order
_BUSES = (0x18, 0x3B, 0x4C, 0x5D, 0x9A, 0xBB, 0xCB, 0xDB)
_DISKS = (
    ("/", 0.32, "nvme0n1p2"),
    ("/var/lib/containerd", 0.18, "nvme0n1p3"),
    ("/raid", 0.05, "md0"),
)
DEFAULT_USED = {mount: used for mount, used, _ in _DISKS}
FIRST_PID = 4000
_BOOT = "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024"


class GpuProcess(msgspec.Struct, kw_only=True, gc=False):
    pid: int
    used_mib: int
    pod: str = ""  # "ns/name"; "" when no pod owns the process


class MigDevice(msgspec.Struct, kw_only=True, gc=False):
    uuid: str
    profile: str = MIG_PROFILE
    gpu_instance: int = -1
    pod: str = ""  # "ns/name" of the pod it was created for


class Gpu(msgspec.Struct, kw_only=True, gc=False):
    index: int
    uuid: str
    bus_id: str  # "0000:3b:00.0"
    present: bool = True  # False: fallen off the bus
    temperature_c: int = 34
    ecc_volatile_sbe: int = 0
    ecc_volatile_dbe: int = 0
    ecc_aggregate_sbe: int = 0
    ecc_aggregate_dbe: int = 0
    retired_pages_pending: bool = False
    retired_pages: int = 0
    row_remap_pending: bool = False
    row_remap_failure: bool = False
    nvlink_errors: int = 0
    recovery_action: str = ""  # "" | "reset" | "reboot" | "drain" (nvmlDeviceGetRecoveryAction)
    processes: list[GpuProcess] = msgspec.field(default_factory=list)
    pcie_root: str = ""  # "pci0000:10"
    numa_node: int | None = None
    mig_enabled: bool | None = None  # None: the GPU cannot do MIG
    mig: list[MigDevice] = msgspec.field(default_factory=list)  # instances that exist now


class Disk(msgspec.Struct, kw_only=True, gc=False):
    mount: str
    used_ratio: float
    read_only: bool = False


class Nic(msgspec.Struct, kw_only=True, gc=False):
    name: str
    up: bool = True
    rdma: bool = False
    pcie_root: str = ""


class LogLine(msgspec.Struct, kw_only=True, gc=False):
    seq: int
    line: str


class NodeHardware(msgspec.Struct, kw_only=True, gc=False):
    node: str
    up: bool = True  # False: powered off, or the agent cannot run (no heartbeat)
    expected_gpus: int = 0
    gpus: list[Gpu] = msgspec.field(default_factory=list)
    disks: list[Disk] = msgspec.field(default_factory=list)
    nics: list[Nic] = msgspec.field(default_factory=list)
    pods: list[str] = msgspec.field(default_factory=list)  # "ns/name", as pod-resources lists
    kernel_log: list[LogLine] = msgspec.field(default_factory=list)  # the last 64 lines
    kernel_log_seq: int = 0  # seq of the newest line


# building


def pci_bus(index: int) -> int:
    return _BUSES[index] if index < len(_BUSES) else (0x20 + 0x11 * index) & 0xFF


def bus_id(index: int) -> str:
    """NVML's PCI address of GPU ``index``, short form: ``0000:3b:00.0``."""
    return f"0000:{pci_bus(index):02x}:00.0"


def gpu_uuid(node: str, index: int) -> str:
    """A stable ``GPU-xxxxxxxx-xxxx-...`` for a node's GPU (NVML's UUID format)."""
    h = hashlib.md5(f"{node}/{index}".encode(), usedforsecurity=False).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def pcie_root(index: int) -> str:
    """The PCIe root complex of GPU ``index``, and of RDMA NIC ``index`` beside it."""
    return f"pci0000:{0x10 * (1 + index // PER_SWITCH):02x}"


def numa_node(index: int) -> int:
    return index // PER_NUMA


def mig_uuid(gpu_uuid: str, slot: int) -> str:
    """The UUID of the MIG device in memory slice ``slot`` of the GPU ``gpu_uuid``."""
    return f"MIG-{gpu_uuid[4:]}-{slot}"


def healthy(node: str, *, gpus: int, nics: int, mig: bool = False) -> NodeHardware:
    """A powered-on node with ``gpus`` healthy GPUs (MIG mode on with ``mig``), ``eth0``
    plus ``nics`` InfiniBand ports: GPU i and port ``ib<i>`` under one PCIe root."""
    doc = NodeHardware(
        node=node,
        expected_gpus=gpus,
        gpus=[Gpu(index=i, uuid=gpu_uuid(node, i), bus_id=bus_id(i), pcie_root=pcie_root(i),
                  numa_node=numa_node(i), mig_enabled=True if mig else None)
              for i in range(gpus)],
        disks=[Disk(mount=m, used_ratio=r) for m, r, _ in _DISKS],
        nics=[Nic(name="eth0", pcie_root="pci0000:c0"),
              *(Nic(name=f"ib{i}", rdma=True, pcie_root=pcie_root(i)) for i in range(nics))],
    )  # fmt: skip
    if gpus:
        log(doc, _BOOT)
    return doc


def device_of(mount: str) -> str:
    """The block device behind a mount, as the kernel names it in its log."""
    return next((dev for m, _, dev in _DISKS if m == mount), "nvme1n1")


def nic_bus(index: int) -> str:
    """PCI address of NIC ``index`` (eth0 first; ib<n> beside GPU n on its PCIe switch)."""
    if index == 0:
        return "0000:c1:00.0"
    return f"0000:{(pci_bus(index - 1) + 1) & 0xFF:02x}:00.0"


def next_pid(doc: NodeHardware) -> int:
    """A pid no process on the node's GPUs has."""
    pids = [p.pid for g in doc.gpus for p in g.processes]
    return max(pids, default=FIRST_PID - 1) + 1


def log(doc: NodeHardware, line: str) -> None:
    """Append a kernel log line; the document keeps the last ``KERNEL_LOG_LINES``."""
    doc.kernel_log_seq += 1
    doc.kernel_log.append(LogLine(seq=doc.kernel_log_seq, line=line))
    if len(doc.kernel_log) > KERNEL_LOG_LINES:
        del doc.kernel_log[: len(doc.kernel_log) - KERNEL_LOG_LINES]


# reading


def gpu_problem(gpu: Gpu) -> str:
    """Why NVIDIA's device plugin would call this GPU unhealthy; "" when it would not."""
    if not gpu.present:
        return "not present (fallen off the bus)"
    if gpu.row_remap_failure:
        return "row remapping failed"
    if gpu.ecc_volatile_dbe:
        return f"{gpu.ecc_volatile_dbe} uncorrectable ECC error(s)"
    return ""


def unhealthy_gpus(doc: NodeHardware) -> int:
    """GPUs the device plugin would withdraw from the node's allocatable."""
    missing = max(0, doc.expected_gpus - len(doc.gpus))
    return missing + sum(1 for g in doc.gpus if gpu_problem(g))


def disk_pressure(doc: NodeHardware) -> bool:
    """Whether the kubelet would report DiskPressure (nodefs or imagefs nearly full)."""
    return any(d.mount in NODEFS and d.used_ratio >= DISK_PRESSURE_RATIO for d in doc.disks)


def problems(doc: NodeHardware) -> list[str]:
    """What a preflight check finds wrong with the node; empty when it is healthy."""
    found: list[str] = []
    present = sum(1 for g in doc.gpus if g.present)
    if present < doc.expected_gpus:
        found.append(f"{present} of {doc.expected_gpus} GPUs present")
    for g in doc.gpus:
        problem = gpu_problem(g)
        if problem:
            found.append(f"GPU {g.index} ({g.bus_id}): {problem}")
    found += [f"NIC {n.name} down" for n in doc.nics if not n.up]
    for d in doc.disks:
        if d.read_only:
            found.append(f"disk {d.mount} read-only")
        elif d.used_ratio >= FULL_RATIO:
            found.append(f"disk {d.mount} full ({d.used_ratio:.0%})")
    return found


def find_gpu(doc: NodeHardware, index: int) -> Gpu:
    for g in doc.gpus:
        if g.index == index:
            return g
    raise ValueError(f"gpu: node {doc.node} has no GPU {index} (it has {len(doc.gpus)})")
