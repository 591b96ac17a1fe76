"""Defragmentation through the whole path on simcluster: bridge -> gang -> actuator. Two
8-GPU nodes each run a preemptible 4-GPU pod: 8 GPUs free, but no node can take an
8-GPU pod. The gang service moves one of the small pods (recreated unbound, placed
again in the other node's free half) and the 8-GPU pod starts on the node it freed."""

from __future__ import annotations

from typing import Any

import pytest

from baton.proto.keys import PREEMPTIBLE
from baton.services.gang import main as gang
from tests.pipeline import stack, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
NS = "research"
GANG = gang.Settings(cycle_interval=0.1, preempt_min_run_s=0, preempt_grace_s=0)


def lone(name: str, gpus: int, *, node: str = "", preemptible: bool = False) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    spec: dict[str, Any] = {"schedulerName": "baton", "containers": [container]}
    if node:
        spec["nodeName"] = node  # placed where another scheduler would have put it
    notes = {PREEMPTIBLE: "true"} if preemptible else {}
    return {"metadata": {"name": name, "annotations": notes}, "spec": spec}


async def test_scattered_free_gpus_are_consolidated_for_a_waiting_pod() -> None:
    async with stack(nodes=2, namespaces=[NS], gang_settings=GANG) as s:
        api, sim = s.api, s.sim
        n0, n1 = sim.cluster.node_names()[:2]
        await api.create_namespaced_pod(NS, lone("small-a", 4, node=n0, preemptible=True))
        await api.create_namespaced_pod(NS, lone("small-b", 4, node=n1, preemptible=True))

        def where() -> dict[str, str]:
            pods = sim.store.list("pods", namespace=NS)[0]
            return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods}

        await until(lambda: len(where()) == 2, within=15, what="the small pods created")
        await api.create_namespaced_pod(NS, lone("big", 8))

        def consolidated() -> bool:
            got = where()
            return (
                len(got) == 3 and all(got.values())
                and got["small-a"] == got["small-b"] and got["big"] != got["small-a"]
            )  # fmt: skip

        await until(consolidated, within=45, what="one small pod moved, the big one bound")
