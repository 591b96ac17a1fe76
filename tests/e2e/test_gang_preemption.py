"""Priority preemption through the whole path on simcluster: bridge -> gang -> actuator.
A low-priority gang fills the cluster; a high-priority gang arrives; the low one is taken
off whole (its bare pods evicted and recreated unbound), the high one is bound on the
nodes it freed, and the low one waits, unbound, for room again."""

from __future__ import annotations

from typing import Any

import pytest

from baton.services.gang import main as gang
from tests.pipeline import stack, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
NS = "research"
PODGROUPS = ("scheduling.x-k8s.io", "v1alpha1", NS, "podgroups")
# no minimum run time and no grace here, so the test does not wait for them
GANG = gang.Settings(cycle_interval=0.1, preempt_min_run_s=0, preempt_grace_s=0)


def member(name: str, group: str, priority_class: str) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    return {
        "metadata": {"name": name, "labels": {"scheduling.x-k8s.io/pod-group": group}},
        "spec": {"schedulerName": "baton", "priorityClassName": priority_class,
                 "containers": [container]},
    }  # fmt: skip


async def test_a_high_priority_gang_preempts_a_low_one_whole() -> None:
    async with stack(nodes=2, namespaces=[NS], gang_settings=GANG) as s:
        api, custom, sim = s.api, s.custom, s.sim
        for name, value in (("low", 0), ("high", 1000)):
            await custom.create_cluster_custom_object(
                "scheduling.k8s.io", "v1", "priorityclasses",
                {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                 "metadata": {"name": name}, "value": value},
            )  # fmt: skip

        async def submit(group: str, priority_class: str) -> None:
            body = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                    "metadata": {"name": group}, "spec": {"minMember": 2}}  # fmt: skip
            await custom.create_namespaced_custom_object(*PODGROUPS, body)
            for i in range(2):  # GPUs in limits only: requested as the API server defaults
                await api.create_namespaced_pod(NS, member(f"{group}-{i}", group, priority_class))

        def nodes(group: str) -> dict[str, str]:
            pods = sim.store.list("pods", namespace=NS)[0]
            return {
                p["metadata"]["name"]: p["spec"].get("nodeName", "")
                for p in pods
                if p["metadata"]["name"].startswith(group)
            }

        await submit("low", "low")
        await until(lambda: len(nodes("low")) == 2 and all(nodes("low").values()),
                    within=30, what="the low-priority gang bound")  # fmt: skip
        before = set(nodes("low").values())
        await submit("high", "high")

        def swapped() -> bool:
            high, low = nodes("high"), nodes("low")
            return (
                len(high) == 2 and set(high.values()) == before
                and len(low) == 2 and not any(low.values())
            )  # fmt: skip

        await until(swapped, within=45, what="high bound on low's nodes, low recreated unbound")
