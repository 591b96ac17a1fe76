"""A node's state beyond what it can hold, published on its real subject (as anyone with
the bridge's rights could): gang does not believe it. Two 8-GPU nodes, one claimed to
have 1,000 GPUs: a gang of three 8-GPU pods stays unschedulable (believed, the claimed
node took two of them and the kubelet refused one)."""

from __future__ import annotations

import msgspec
import pytest

from baton.libs.bus import Bus
from baton.proto import k8s, subjects
from baton.proto.deadletter import DeadLetter
from baton.proto.placement import AnyPlacement, GangUnschedulable
from baton.services.gang import main as gang
from tests.e2e.admitting import gang_objects
from tests.pipeline import every, stack, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
C = "c1"
NS = "research"
PODGROUPS = ("scheduling.x-k8s.io", "v1alpha1", NS, "podgroups")


async def test_gang_does_not_believe_a_node_claiming_more_gpus_than_it_can_hold() -> None:
    async with stack(
        nodes=2, namespaces=[NS], gang_settings=gang.Settings(cycle_interval=0.1)
    ) as s:
        api, custom, sim, url = s.api, s.custom, s.sim, s.url
        bus = await Bus.connect(url, cluster=C, name="forger")
        try:
            nodes_subject = subjects.wildcard(C, subjects.K8S, "node", ">")
            held: list[k8s.NodeEvent] = []

            async def both_nodes() -> bool:
                held[:] = await bus.snapshot(nodes_subject, k8s.NodeEvent)
                return len(held) == 2

            await until(both_nodes, within=30, what="both nodes on the bus")
            real = held[0].node
            claimed = {**real.allocatable, k8s.GPU: 1000}
            forged = msgspec.structs.replace(real, allocatable=claimed)
            await bus.publish(subjects.subject(C, subjects.K8S, "node", real.name),
                              k8s.NodeEvent(op="upsert", at=held[0].at, node=forged))  # fmt: skip
            group, pods = gang_objects("wide", 3)
            await custom.create_namespaced_custom_object(*PODGROUPS, group)
            for pod in pods:
                pod["spec"]["schedulerName"] = "baton"
                await api.create_namespaced_pod(NS, pod)
            placements = subjects.wildcard(C, subjects.PLACEMENT, ">")

            async def unschedulable() -> bool:
                found = await bus.snapshot(placements, AnyPlacement)
                return any(isinstance(p, GangUnschedulable) and p.gang.endswith("wide")
                           for p in found)  # fmt: skip

            await until(unschedulable, within=30, what="the 3-node gang unschedulable on 2")
            bound = [p["spec"].get("nodeName") for p in sim.store.list("pods", namespace=NS)[0]]
            assert not any(bound), bound
            letters = await every(bus, subjects.wildcard(C, subjects.DEADLETTER, ">"), DeadLetter)
            assert any(f"node {real.name} claims 1000" in letter.reason for letter in letters)
        finally:
            await bus.close()
