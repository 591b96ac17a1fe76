"""Devices the DRA drivers publish against what the node's agent sees (pure).

A driver publishes a node's devices in ResourceSlices; the node's agent reports the
GPUs NVML answers for (UUID and PCIe root) and its NICs (name, RDMA, PCIe root). When
they disagree, a claim may be given a device the node does not have (its pod cannot
start: the kubelet fails to prepare it) or a GPU and a NIC paired under a root they do
not share. Compared per device:

- a GPU (a device with the driver's ``uuid`` attribute) the agent does not report;
- a NIC (``ifName``) the agent does not report, when the agent watches RDMA NICs at
  all (a report without any RDMA NIC is an agent told to watch other names);
- either one that the agent places under another PCIe root
  (``resource.kubernetes.io/pcieRoot``) than the driver says.

MIG devices (``parentUUID``) are partitions a driver may create when it prepares a
claim, not instances that exist: their GPU is what is compared. A GPU the agent
reports as lost is ``gpu-lost``'s, not this rule's (NVML gives a GPU it lost no UUID,
so while one is lost no GPU is called unseen). Nothing is compared before the
agent's first report.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from baton.proto.dra import ResourceSlice
from baton.proto.telemetry import GpuReport, NodeReport
from baton.services.health.core.rules import DEVICES, Found

PCIE_ROOT = "resource.kubernetes.io/pcieRoot"


@dataclass(frozen=True, slots=True)
class Published:
    kind: str  # "GPU" | "NIC"
    ident: str  # the GPU's UUID, the NIC's interface name
    root: str  # '' when the driver does not say
    name: str  # the device's name in the slice
    driver: str


@dataclass(slots=True)
class Devices:
    """One node's: what each slice publishes, what the agent last reported."""

    published: dict[str, tuple[Published, ...]] = field(default_factory=dict)
    gpus: dict[str, str] | None = None  # UUID -> PCIe root; None before a report
    lost: int = 0  # GPUs reported lost with no UUID (NVML gave no handle): gpu-lost's
    nics: dict[str, str] | None = None  # name -> PCIe root; None: no RDMA NIC reported


def published(piece: ResourceSlice) -> tuple[Published, ...]:
    found = []
    for device in piece.devices:
        attrs, driver = device.attributes, piece.driver
        if f"{driver}/parentUUID" in attrs:
            continue
        root = attrs.get(PCIE_ROOT)
        root = root if isinstance(root, str) else ""
        uuid, interface = attrs.get(f"{driver}/uuid"), attrs.get(f"{driver}/ifName")
        where, name = sys.intern(root), sys.intern(device.name)  # alike on every node
        if isinstance(uuid, str) and uuid:
            found.append(Published("GPU", uuid, where, name, sys.intern(driver)))
        elif isinstance(interface, str) and interface:
            found.append(Published("NIC", sys.intern(interface), where, name, sys.intern(driver)))
    return tuple(found)


def on_slice(devices: Devices, piece: ResourceSlice, *, deleted: bool) -> None:
    found = () if deleted else published(piece)
    if found:
        devices.published[piece.name] = found
    else:
        devices.published.pop(piece.name, None)


def on_gpus(devices: Devices, report: GpuReport) -> None:
    devices.gpus = {g.uuid: sys.intern(g.pcie_root) for g in report.gpus if g.uuid}
    devices.lost = sum(1 for g in report.gpus if not g.present and not g.uuid)


def on_node(devices: Devices, report: NodeReport) -> None:
    watched = any(n.rdma for n in report.nics)
    nics = {sys.intern(n.name): sys.intern(n.pcie_root) for n in report.nics}
    devices.nics = nics if watched else None


def signals(devices: Devices) -> Found:
    """``devices-disagree`` signals, one per device that disagrees."""
    found: Found = {}
    for pieces in devices.published.values():
        for p in pieces:
            seen = devices.gpus if p.kind == "GPU" else devices.nics
            if seen is None:
                continue
            where = seen.get(p.ident)
            if where is None and p.kind == "GPU" and devices.lost:
                continue  # a GPU NVML lost has no UUID to name: gpu-lost says it
            said = f"{p.driver} publishes {p.kind} {p.name} ({p.ident})"
            if where is None:
                detail = f"{said}; the agent does not see it"
            elif p.root and where and where != p.root:
                detail = f"{said} under {p.root}; the agent sees it under {where}"
            else:
                continue
            found[f"{DEVICES.name}:{p.ident}"] = (DEVICES, detail)
    return found
