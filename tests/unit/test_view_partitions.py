"""Partitionable GPUs (DRA's shared counters): MIG devices and their whole GPU exclude
each other, MIG devices fill a GPU already partitioned before they break another, and
what pods and nodes count (whole GPUs, partitions by DeviceClass) follows what is given.

The slices are simcluster's own (``world/dra.py``, ``mig: true``) slimmed by the bridge's
code: 8 H100s, each with seven 1g.10gb MIG devices on its eight memory slices."""

from __future__ import annotations

from collections import Counter

import msgspec
import pytest

from baton.libs.view.claimed import Claimed
from baton.libs.view.devices import DEVICES, Devices
from baton.proto.dra import ResourceClaim
from baton.proto.k8s import (
    GPU,
    DeviceClassEvent,
    ResourceClaimEvent,
    ResourceSliceEvent,
)
from tests.support.builders import node
from tests.support.dra import claim, claiming, published_classes, published_slices, request

pytestmark = pytest.mark.unit

MIG = "mig.nvidia.com"
MIGS = DEVICES.format(MIG)


def cluster(*nodes: str) -> Devices:
    out = Devices()
    for name in nodes or ("n1",):
        for piece in published_slices(name):
            out.apply(ResourceSliceEvent(op="upsert", at=0.0, resource_slice=piece))
    for cls in published_classes():
        out.apply(DeviceClassEvent(op="upsert", at=0.0, device_class=cls))
    return out


def give(devices: Devices, c: ResourceClaim, node: str = "n1") -> list[str]:
    """Allocate ``c`` on ``node`` and apply its event as written; the devices given."""
    devices.apply(ResourceClaimEvent(op="upsert", at=0.0, resource_claim=c))
    found = devices.allocate(node, claiming(f"p-{c.name}", c))
    assert not isinstance(found, str), found
    done = msgspec.structs.replace(c, allocated=found[0].results, node=node)
    devices.apply(ResourceClaimEvent(op="upsert", at=1.0, resource_claim=done))
    return [r.device for r in found[0].results]


def refused(devices: Devices, c: ResourceClaim, node: str = "n1") -> str:
    devices.apply(ResourceClaimEvent(op="upsert", at=0.0, resource_claim=c))
    found = devices.allocate(node, claiming(f"p-{c.name}", c))
    assert isinstance(found, str), f"{c.name} was given {found}"
    return found


def gpu_of(device: str) -> str:
    return device.split("-mig-")[0]


def test_mig_devices_fill_a_partitioned_gpu_before_breaking_a_whole_one() -> None:
    devices = cluster()
    given = [give(devices, claim(f"m{i}", request("mig", MIG)))[0] for i in range(15)]
    assert Counter(map(gpu_of, given)) == {"gpu-0": 7, "gpu-1": 7, "gpu-2": 1}
    assert len(set(given)) == 15
    assert devices.gpus_broken("n1") == 3
    # a pod's own claims draw on one budget: two of one GPU's slices never overlap
    pair = give(devices, claim("two", request("mig", MIG, 2)))
    assert [gpu_of(d) for d in pair] == ["gpu-2", "gpu-2"]


def test_a_gpu_freed_stays_whole_while_a_partitioned_one_has_room() -> None:
    devices = cluster()
    whole = claim("w", request("g", "gpu.nvidia.com"))
    assert give(devices, whole) == ["gpu-0"]
    first = [give(devices, claim(f"m{i}", request("mig", MIG)))[0] for i in range(3)]
    assert {gpu_of(d) for d in first} == {"gpu-1"}
    freed = msgspec.structs.replace(devices.claims["default/w"], allocated=(), node="")
    devices.apply(ResourceClaimEvent(op="upsert", at=2.0, resource_claim=freed))
    # gpu-0 comes first in the slice, but it is whole again: gpu-1 takes the next four
    more = [give(devices, claim(f"n{i}", request("mig", MIG)))[0] for i in range(5)]
    assert [gpu_of(d) for d in more] == ["gpu-1"] * 4 + ["gpu-0"]
    assert devices.gpus_broken("n1") == 2


def test_a_mig_device_and_its_whole_gpu_exclude_each_other() -> None:
    devices = cluster()
    (first,) = give(devices, claim("m", request("mig", MIG)))
    assert gpu_of(first) == "gpu-0"
    why = refused(devices, claim("all", request("gpus", "gpu.nvidia.com", 8)))
    assert "wants 8 devices of DeviceClass gpu.nvidia.com: n1 has 8, 7 free" in why
    assert "ResourceClaim default/m (counter set gpu-0-counters)" in why
    seven = give(devices, claim("seven", request("gpus", "gpu.nvidia.com", 7)))
    assert sorted(seven) == [f"gpu-{i}" for i in range(1, 8)]
    # every GPU given: one MIG device per GPU is not left, none of gpu-0's either
    why = refused(devices, claim("more", request("mig", MIG, 7)))
    assert "wants 7 devices of DeviceClass mig.nvidia.com: n1 has 56, 6 free" in why


def test_one_claim_cannot_take_a_gpu_whole_and_a_mig_device_of_it() -> None:
    """The search spends the counters pick by pick: eight whole GPUs leave no MIG
    device, though both requests' devices are free when it starts."""
    devices = cluster()
    why = refused(devices, claim("both", request("gpus", "gpu.nvidia.com", 8), request("mig", MIG)))
    assert "no choice of free devices on n1" in why
    assert give(devices, claim("fits", request("gpus", "gpu.nvidia.com", 7), request("mig", MIG)))


def test_pods_count_whole_gpus_and_partitions_and_nodes_count_what_is_left() -> None:
    claimed = Claimed(devices=cluster("n1"))
    mig, whole = (
        claim("m", request("mig", MIG, 2)),
        claim("w", request("gpus", "gpu.nvidia.com", 3)),
    )
    for c in (mig, whole):
        claimed.devices.apply(ResourceClaimEvent(op="upsert", at=0.0, resource_claim=c))
    assert claimed.pod(claiming("a", mig)).requests.get(GPU, 0) == 0
    assert claimed.pod(claiming("a", mig)).requests[MIGS] == 2
    assert claimed.pod(claiming("b", whole)).requests[GPU] == 3
    n1 = node("n1", gpus=8).build()
    assert claimed.node(n1).allocatable[GPU] == 8 and claimed.node(n1).allocatable[MIGS] == 56
    give(claimed.devices, mig)  # two MIG devices, one GPU partitioned
    give(claimed.devices, whole)  # three whole GPUs: their 21 MIG devices are gone
    assert claimed.devices.drain_touched() == {"n1"}
    counted = claimed.node(n1).allocatable
    assert (counted[GPU], counted[MIGS]) == (7, 56 - 21)  # pods count what they use
    done = msgspec.structs.replace(mig, allocated=(), node="")
    claimed.devices.apply(ResourceClaimEvent(op="upsert", at=2.0, resource_claim=done))
    assert claimed.devices.drain_touched() == {"n1"}
    assert claimed.node(n1).allocatable[GPU] == 8


def test_a_hold_partitions_a_gpu_until_released() -> None:
    devices = cluster()
    c = claim("m", request("mig", MIG))
    devices.apply(ResourceClaimEvent(op="upsert", at=0.0, resource_claim=c))
    found = devices.allocate("n1", claiming("p", c))
    assert not isinstance(found, str)
    devices.hold("default/p", "n1", found)
    assert devices.gpus_broken("n1") == 1 and devices.drain_touched() == {"n1"}
    other = claim("o", request("gpus", "gpu.nvidia.com", 8))
    assert "held for pod default/p" in refused(devices, other)
    devices.release("default/p")
    assert devices.gpus_broken("n1") == 0 and devices.drain_touched() == {"n1"}
    assert give(devices, other)


def test_nodes_without_counters_are_not_touched() -> None:
    devices = Devices()
    for piece in published_slices("n1", mig=False):
        devices.apply(ResourceSliceEvent(op="upsert", at=0.0, resource_slice=piece))
    for cls in published_classes():
        devices.apply(DeviceClassEvent(op="upsert", at=0.0, device_class=cls))
    devices.on_node("n1")
    assert devices.drain_touched() == {"n1"}  # classes, a kind of node: counted anew
    give(devices, claim("w", request("gpus", "gpu.nvidia.com", 2)))
    assert devices.drain_touched() == set()
    assert devices.class_devices("n1") == {DEVICES.format("dra.net"): 8}
    # a MIG class with no MIG device anywhere: nothing to count it by
    assert devices.kind_of(MIG) == "gpu"


def test_a_malformed_allocation_never_gives_a_device_twice() -> None:
    """Two claims the API shows holding one GPU's whole and a MIG device of it (a writer
    that ignored the counters): nothing more of that GPU is given."""
    devices = cluster()
    whole = claim("w", request("g", "gpu.nvidia.com"))
    give(devices, whole)
    forced = msgspec.structs.replace(
        claim("x", request("mig", MIG)),
        allocated=(msgspec.structs.replace(
            next(iter(devices.claims["default/w"].allocated)), device="gpu-0-mig-1g10gb-0",
            request="mig"),),
        node="n1",
    )  # fmt: skip
    devices.apply(ResourceClaimEvent(op="upsert", at=2.0, resource_claim=forced))
    taken = devices.taken("n1")
    assert all(f"gpu-0-mig-1g10gb-{j}" in {d[2] for d in taken} for j in range(7))
