"""Balloons on simcluster, through the whole path: bridge -> balloon -> actuator puts
placeholders on the empty GPU nodes; a gang that fits that headroom is placed on the
balloon nodes at once (gang evicts the balloons in its bind step), without waiting for
a new node (the cloud takes 60 s here); the balloon service then asks for replacement
headroom and the autoscaler grows the pool by it."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi

from baton.proto import keys
from baton.services.autoscaler import main as autoscaler
from baton.services.balloon import main as balloon
from baton.services.simcluster.world import spec
from tests.e2e.test_autoscaler import NS, nodes, replicas, submit_gang
from tests.pipeline import running, running_services, until
from tests.support.nats import running_nats
from tests.support.sim import running_sim

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
CLUSTER = spec.from_dict(
    {"pools": [{"name": "h100", "count": 2, "min_size": 1, "max_size": 8, "provisioning_s": 60}]}
)
BALLOON = balloon.Settings(static_nodes=2, priority_class="", tick_s=0.2)
AUTOSCALER = autoscaler.Settings(tick_s=0.2, unneeded_s=600.0, mark_machines=False)


def balloons(sim: Any) -> list[dict[str, Any]]:
    pods = sim.store.list("pods", namespace=BALLOON.namespace)[0]
    return [p for p in pods if keys.BALLOON in p["metadata"].get("labels", {})]


async def test_a_gang_that_fits_the_headroom_starts_without_waiting_for_new_nodes() -> None:
    async with (
        running_nats() as url,
        running_sim(spec=CLUSTER, speed=1.0) as sim,
        running_services(url, sim) as services,
        running(balloon.SPEC, url, BALLOON),
        running(autoscaler.SPEC, url, AUTOSCALER),
    ):
        await CoreV1Api(services.client).create_namespace({"metadata": {"name": BALLOON.namespace}})
        await until(lambda: len(balloons(sim)) == 2, within=30, what="a balloon on each node")
        held = sorted(p["spec"]["nodeName"] for p in balloons(sim))
        await submit_gang(services.client, "train", 2)

        def running_whole() -> list[str]:
            pods = sim.store.list("pods", namespace=NS)[0]
            up = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
            return sorted(p["spec"]["nodeName"] for p in up) if len(up) == 2 else []

        placed = await until(running_whole, within=30, what="the gang running on balloon nodes")
        assert placed == held and nodes(sim) == 2  # on the held nodes; no new node joined
        # the balloons made way, and replacement headroom is asked for
        await until(lambda: replicas(sim) == 4, within=30, what="the pool asked for 2 more")
        assert [p["spec"]["nodeName"] for p in balloons(sim) if p["spec"].get("nodeName") in held
                and not p["metadata"].get("deletionTimestamp")] == []  # fmt: skip


async def test_a_capacity_buffer_declares_headroom() -> None:
    async with (
        running_nats() as url,
        running_sim(spec=CLUSTER, speed=1.0) as sim,
        running_services(url, sim) as services,
        running(balloon.SPEC, url, msgspec.structs.replace(BALLOON, static_nodes=0)),
    ):
        await CoreV1Api(services.client).create_namespace({"metadata": {"name": BALLOON.namespace}})
        buffer = {"apiVersion": "autoscaling.x-k8s.io/v1alpha1", "kind": "CapacityBuffer",
                  "metadata": {"name": "warm", "labels": {keys.POOL: "h100"}},
                  "spec": {"replicas": 1}}  # fmt: skip
        await CustomObjectsApi(services.client).create_namespaced_custom_object(
            "autoscaling.x-k8s.io", "v1alpha1", "default", "capacitybuffers", buffer
        )
        await until(lambda: len(balloons(sim)) == 1, within=30, what="one node held by the buffer")
