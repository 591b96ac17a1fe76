"""The bridge publishes Dynamic Resource Allocation's objects, against a real nats-server and
a simcluster with NVIDIA's GPU DRA driver and an RDMA NIC driver (``devices: dra``): each
node's ResourceSlices, the DeviceClasses, and the claim generated for a pod's template,
with the pod naming it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes_asyncio import client

from baton.libs.bus import Bus
from baton.proto import dra, k8s, subjects
from baton.services.bridge import core
from baton.services.simcluster.world.spec import from_dict
from tests.connected.test_bridge import CLUSTER, K8S, running_bridge
from tests.connected.test_sim_dra import DRA, MERGE, claiming_pod, template
from tests.pipeline import until
from tests.support.nats import running_nats
from tests.support.sim import Sim, running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(90)]
NODES = {"gpu-00001", "gpu-00002"}
DRIVERS = {"gpu.nvidia.com", "dra.net"}


@dataclass(frozen=True)
class Running:
    sim: Sim
    bus: Bus  # a reader's connection, not the bridge's


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    async with running_nats() as url:
        spec = from_dict({"pools": [{"name": "gpu", "count": 2, "mig": True}], "devices": "dra"})
        async with running_sim(spec=spec, speed=100.0) as sim, running_bridge(sim, url):
            bus = await Bus.connect(url, cluster=CLUSTER, name="check")
            try:
                yield Running(sim=sim, bus=bus)
            finally:
                await bus.close()


async def published(bus: Bus) -> dict[str, k8s.K8sEvent]:
    """The K8S stream's latest event per subject."""
    return {core.subject_of(CLUSTER, e): e for e in await bus.snapshot(K8S, k8s.K8sEvent)}


def of_type(events: dict[str, k8s.K8sEvent], kind: type[Any]) -> list[Any]:
    return [k8s.object_of(e) for e in events.values() if isinstance(e, kind) and e.op == "upsert"]


async def test_each_node_s_slices_and_the_classes_are_published(running: Running) -> None:
    async def slices_and_classes() -> dict[str, k8s.K8sEvent] | None:
        events = await published(running.bus)
        slices = of_type(events, k8s.ResourceSliceEvent)
        classes = of_type(events, k8s.DeviceClassEvent)
        return events if len(slices) == 6 and len(classes) == 3 else None

    events = await until(slices_and_classes, what="6 ResourceSlices and 3 DeviceClasses",
                         within=30, step=0.2)  # fmt: skip
    slices: list[dra.ResourceSlice] = of_type(events, k8s.ResourceSliceEvent)
    assert {(s.node, s.driver) for s in slices} == {(n, d) for n in NODES for d in DRIVERS}
    assert all(s.pool == s.node for s in slices)  # a node's drivers name their pool after it
    gpus = next(s for s in slices if s.node == "gpu-00001" and s.devices
                and s.driver == "gpu.nvidia.com")  # fmt: skip
    whole = [d for d in gpus.devices if d.attributes["gpu.nvidia.com/type"] == "gpu"]
    assert [d.name for d in whole] == [f"gpu-{i}" for i in range(8)]
    assert len(gpus.devices) == 64  # and 7 MIG devices per GPU: the most a slice holds
    # partitionable: the counters come in a slice of their own, as integers
    counters = next(s for s in slices if s.node == "gpu-00001" and s.counters)
    assert counters.counters["gpu-3-counters"] == {f"memory-slice-{k}": 1 for k in range(8)}
    mig = next(d for d in gpus.devices if d.name == "gpu-3-mig-1g10gb-5")
    assert mig.consumes == {"gpu-3-counters": {"memory-slice-5": 1}}
    assert mig.attributes["gpu.nvidia.com/parentIndex"] == 3
    assert whole[3].consumes == {"gpu-3-counters": counters.counters["gpu-3-counters"]}
    first = whole[0].attributes
    assert str(first["gpu.nvidia.com/productName"]).startswith("NVIDIA")  # qualified by driver
    assert first["gpu.nvidia.com/index"] == 0
    assert "resource.kubernetes.io/pcieRoot" in first  # qualified already: kept
    by_name = subjects.subject(CLUSTER, subjects.K8S, "resourceslice", "gpu-00001-gpu-nvidia-com")
    assert by_name in events  # cluster-scoped: no namespace token
    classes: list[dra.DeviceClass] = of_type(events, k8s.DeviceClassEvent)
    typed = 'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type'
    assert {c.name: c.selectors for c in classes} == {
        "gpu.nvidia.com": (f'{typed} == "gpu"',),
        "mig.nvidia.com": (f'{typed} == "mig"',),
        "dra.net": ('device.driver == "dra.net"',),
    }


async def test_a_pod_s_generated_claim_is_published_and_the_pod_names_it(
    running: Running,
) -> None:
    bus = running.bus
    api = await running.sim.api_client()
    try:
        core_api, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        await custom.create_namespaced_custom_object(
            *DRA, "default", "resourceclaimtemplates", template("eight")
        )
        pod = await core_api.create_namespaced_pod("default", claiming_pod("rank-0", "eight"))
        uid = pod.metadata.uid

        async def claim_and_pod() -> tuple[dra.ResourceClaim, k8s.Pod] | None:
            events = await published(bus)
            claims = [c for c in of_type(events, k8s.ResourceClaimEvent) if c.owner == uid]
            pods = [p for p in of_type(events, k8s.PodEvent) if p.key == "default/rank-0"]
            if claims and pods and pods[0].claims and pods[0].claims[0].claim:
                return claims[0], pods[0]
            return None

        found = await until(claim_and_pod, what="rank-0's generated ResourceClaim, and rank-0 "
                            "naming it in its claims", within=30, step=0.2)  # fmt: skip
        claim, published_pod = found
        assert published_pod.claims == (
            dra.PodClaim(name="gpus", claim=claim.name, template="eight"),
        )
        assert (claim.namespace, claim.pod_claim, claim.node, claim.allocated) == (
            "default", "gpus", "", ()
        )  # fmt: skip
        assert claim.requests == (dra.DeviceRequest(name="gpus", device_class="gpu.nvidia.com",
                                                    count=8),)  # fmt: skip

        # Allocated on gpu-00001 and reserved for rank-0, as the scheduler writes it.
        results = [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu-00001",
                    "device": f"gpu-{i}"} for i in range(8)]  # fmt: skip
        on_node = {"key": "metadata.name", "operator": "In", "values": ["gpu-00001"]}
        status = {"allocation": {"devices": {"results": results},
                                 "nodeSelector": {"nodeSelectorTerms": [
                                     {"matchFields": [on_node]}]}},
                  "reservedFor": [{"resource": "pods", "name": "rank-0", "uid": uid}]}  # fmt: skip
        await custom.patch_namespaced_custom_object_status(
            *DRA, "default", "resourceclaims", claim.name, {"status": status}, _content_type=MERGE
        )

        async def allocated() -> dra.ResourceClaim | None:
            events = await published(bus)
            mine = [c for c in of_type(events, k8s.ResourceClaimEvent) if c.uid == claim.uid]
            return mine[0] if mine and mine[0].reserved_for else None

        held = await until(allocated, what="the claim published allocated and reserved",
                           within=20, step=0.2)  # fmt: skip
        assert (held.node, held.reserved_for, len(held.allocated)) == ("gpu-00001", (uid,), 8)
        assert held.allocated[0] == dra.DeviceResult(
            request="gpus", driver="gpu.nvidia.com", pool="gpu-00001", device="gpu-0"
        )
    finally:
        await api.close()
