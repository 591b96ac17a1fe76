"""Builders of DRA objects as the bridge slims them (``proto.dra``), shaped like
simcluster's drivers (``services/simcluster/world/dra.py``): a node's GPUs and RDMA NICs,
GPU *i* and NIC *i* under one PCIe root, the two DeviceClasses, and claims."""

from __future__ import annotations

import msgspec

from baton.libs.kube import dra as kube_dra
from baton.libs.view.devices import GPU_DRIVER
from baton.proto.dra import (
    AttributeValue,
    Device,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    DeviceResult,
    PodClaim,
    ResourceClaim,
    ResourceSlice,
)
from baton.proto.k8s import Pod
from baton.services.simcluster.world import dra as world_dra
from baton.services.simcluster.world import hardware
from tests.support.builders import pod

__all__ = ["GPU_DRIVER", "H100", "NIC_DRIVER", "ROOT", "claim", "claiming", "device",
           "device_class", "node_slices", "paired", "published_classes", "published_slices",
           "request"]  # fmt: skip

NIC_DRIVER = "dra.net"
ROOT = "resource.kubernetes.io/pcieRoot"
H100 = "NVIDIA H100 80GB HBM3"


def device(driver: str, name: str, i: int, **attributes: AttributeValue) -> Device:
    """As simcluster's world/dra.py publishes it, slimmed: names qualified by the driver."""
    attributes |= {"index": i, "numa": i // 4}
    qualified = {f"{driver}/{k}": v for k, v in attributes.items()}
    return Device(name=name, attributes={**qualified, ROOT: f"pci0000:{0x10 * (1 + i // 2):02x}"})


def node_slices(
    node: str, *, gpus: int = 8, nics: int = 8, product: str = H100
) -> list[ResourceSlice]:
    gpu = [
        device(
            GPU_DRIVER,
            f"gpu-{i}",
            i,
            type="gpu",
            productName=product,
            uuid=hardware.gpu_uuid(node, i),
            pcieBusID=hardware.bus_id(i),
        )
        for i in range(gpus)
    ]
    nic = [
        device(NIC_DRIVER, f"nic-{i}", i, rdma=True, rail=i, ifName=f"ib{i}") for i in range(nics)
    ]
    return [
        ResourceSlice(name=f"{node}-{d.replace('.', '-')}", uid=f"uid-{node}-{d}", driver=d,
                      node=node, pool=node, devices=tuple(devices))
        for d, devices in ((GPU_DRIVER, gpu), (NIC_DRIVER, nic)) if devices
    ]  # fmt: skip


def device_class(driver: str, name: str = "") -> DeviceClass:
    return DeviceClass(name=name or driver, uid=f"uid-{name or driver}",
                       selectors=(f'device.driver == "{driver}"',))  # fmt: skip


def request(name: str, cls: str = GPU_DRIVER, count: int = 1, *selectors: str) -> DeviceRequest:
    return DeviceRequest(name=name, device_class=cls, count=count, selectors=selectors)


def claim(
    name: str,
    *requests: DeviceRequest,
    constraints: tuple[DeviceConstraint, ...] = (),
    allocated: tuple[DeviceResult, ...] = (),
    node: str = "",
) -> ResourceClaim:
    return ResourceClaim(namespace="default", name=name, uid=f"uid-{name}", requests=requests,
                         constraints=constraints, allocated=allocated, node=node)  # fmt: skip


def paired(name: str, pairs: int = 8, *, interleaved: bool = False) -> ResourceClaim:
    """``pairs`` GPUs and as many NICs, each NIC under its GPU's PCIe root."""
    gpus = [request(f"gpu-{i}") for i in range(pairs)]
    nics = [request(f"nic-{i}", NIC_DRIVER) for i in range(pairs)]
    order = [r for p in zip(gpus, nics, strict=True) for r in p] if interleaved else gpus + nics
    pairing = tuple(
        DeviceConstraint(requests=(f"gpu-{i}", f"nic-{i}"), match_attribute=ROOT)
        for i in range(pairs)
    )
    return claim(name, *order, constraints=pairing)


def published_slices(node: str, *, mig: bool = True) -> list[ResourceSlice]:
    """``node``'s slices as simcluster publishes them (``mig``: partitionable GPUs, seven
    1g.10gb MIG devices each), slimmed as the bridge slims them."""
    raw = world_dra.node_slices(node, gpus=8, nics=8, product=H100, memory="80Gi", mig=mig)
    return [kube_dra.resource_slice(msgspec.convert(s, kube_dra.WireResourceSlice)) for s in raw]


def published_classes() -> list[DeviceClass]:
    """simcluster's DeviceClasses (whole GPUs, MIG devices, NICs), slimmed."""
    return [
        kube_dra.device_class(msgspec.convert(c, kube_dra.WireDeviceClass))
        for c in world_dra.device_classes()
    ]


def claiming(name: str, *claims: ResourceClaim | str) -> Pod:
    """A pod whose claims are ``claims`` (a str: one not generated yet)."""
    entries = tuple(
        PodClaim(name=c, template=c) if isinstance(c, str) else PodClaim(name=c.name, claim=c.name)
        for c in claims
    )
    return msgspec.structs.replace(pod(name), claims=entries)
