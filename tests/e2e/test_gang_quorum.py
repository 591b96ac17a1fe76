"""minMember is a quorum, end to end on simcluster (bridge -> gang -> actuator -> the
reporter): a group starts once minMember of its members fit together, the others are
bound as room appears, and every member that waits says why where Kubernetes users
look (its PodScheduled condition and a FailedScheduling Event). Each test mirrors a
peer's test, named in its docstring."""

from __future__ import annotations

from typing import Any

import pytest

from baton.proto import keys
from baton.services.reporter import main as reporter
from tests.e2e.test_gang_formats import PLUGINS, events, member, pods
from tests.pipeline import stack, until
from tests.support.sim import Sim

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
TOLD = reporter.Settings(pod_every=0.2, tick_every=0.1)


async def group(api: Any, custom: Any, ns: str, name: str, *, need: int, size: int,
                gpus: int = 8, first: int = 0) -> None:  # fmt: skip
    """A scheduler-plugins PodGroup of ``need`` and ``size`` member pods (from ``first``)."""
    body = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name}, "spec": {"minMember": need}}  # fmt: skip
    if not first:
        await custom.create_namespaced_custom_object(*PLUGINS, ns, "podgroups", body)
    for i in range(first, first + size):
        pod = member(f"{name}-{i}", gpus=gpus, labels={keys.POD_GROUP: name})
        await api.create_namespaced_pod(ns, pod)


def bound(sim: Sim, ns: str, prefix: str = "") -> list[str]:
    return sorted(
        p["metadata"]["name"]
        for p in pods(sim, ns)
        if p["spec"].get("nodeName") and p["metadata"]["name"].startswith(prefix)
    )


def condition(sim: Sim, ns: str, name: str) -> str:
    """The pod's PodScheduled message ('' when none, or scheduled)."""
    pod = sim.store.get("pods", ns, name)
    found = [c for c in pod["status"].get("conditions") or () if c["type"] == "PodScheduled"]
    return str(found[0].get("message", "")) if found and found[0]["status"] == "False" else ""


def failed_event(sim: Sim, ns: str, name: str, text: str) -> bool:
    return any(
        e["reason"] == "FailedScheduling" and text in e["message"] for e in events(sim, ns, name)
    )


async def test_min_member_2_with_six_pods_and_room_for_four_binds_four() -> None:
    """Mirrors scheduler-plugins coscheduling core "TestPreFilter/pod count more minMember"
    (a group with more pods than minMember passes) and Volcano schedulingbase "Job E2E
    Test: Schedule Job" (minAvailable 2, more replicas than room: the job is ready once
    2 run): four of six bound, the two others told why they wait."""
    async with stack(nodes=4, namespaces=["ml"], reporter_settings=TOLD) as s:
        api, custom, sim = s.api, s.custom, s.sim
        await group(api, custom, "ml", "job", need=2, size=6)
        got = await until(lambda: len(bound(sim, "ml")) == 4 and bound(sim, "ml"),
                          within=60, what="four of the six members bound")  # fmt: skip
        waiting = sorted({f"job-{i}" for i in range(6)} - set(got))
        said = "4 members run (minMember 2); 2 more wait for room"
        for name in waiting:
            await until(lambda name=name: said in condition(sim, "ml", name),  # type: ignore[misc]
                        within=30, what=f"{name}'s PodScheduled condition")  # fmt: skip
            await until(lambda name=name: failed_event(sim, "ml", name, said),  # type: ignore[misc]
                        within=30, what=f"a FailedScheduling Event on {name}")  # fmt: skip
        assert len(bound(sim, "ml")) == 4


async def test_three_groups_of_min_member_2_each_start() -> None:
    """Mirrors Volcano schedulingbase "Job E2E Test: Schedule Multiple Jobs" (three jobs of
    minAvailable 2, each with more replicas than the cluster holds: every job becomes
    ready). Three groups of minMember 2 x eight 4-GPU pods, all created while the four
    8-GPU nodes are cordoned; once they are not, every group starts."""
    async with stack(nodes=4, namespaces=["ml"], reporter_settings=TOLD) as s:
        api, custom, sim = s.api, s.custom, s.sim
        nodes = [n.metadata.name for n in (await api.list_node()).items]
        for name in nodes:
            await api.patch_node(name, {"spec": {"unschedulable": True}})
        for name in ("a", "b", "c"):
            await group(api, custom, "ml", name, need=2, size=8, gpus=4)
        cordoned = "4 node(s) were unschedulable"
        await until(lambda: cordoned in condition(sim, "ml", "c-0"), within=30,
                    what="the last group told no node takes it while all are cordoned")  # fmt: skip
        for name in nodes:
            await api.patch_node(name, {"spec": {"unschedulable": False}})
        await until(lambda: len(bound(sim, "ml")) == 8, within=60, what="all 32 GPUs bound")
        counts = {g: len(bound(sim, "ml", f"{g}-")) for g in ("a", "b", "c")}
        assert all(n >= 2 for n in counts.values()), counts


async def test_late_members_join_a_running_group_as_room_appears() -> None:
    """Mirrors scheduler-plugins coscheduling core "TestPermit/pod belongs to a pg that has
    enough pods" (a pod of a group whose minMember are already assigned is let through):
    members created after the group runs are bound while there is room, and the one
    that finds none says why until a running member ends."""
    async with stack(nodes=4, namespaces=["ml"], reporter_settings=TOLD) as s:
        api, custom, sim = s.api, s.custom, s.sim
        await group(api, custom, "ml", "job", need=2, size=2)
        await until(lambda: len(bound(sim, "ml")) == 2, within=60, what="the group running")
        await group(api, custom, "ml", "job", need=2, size=3, first=2)
        await until(lambda: len(bound(sim, "ml")) == 4, within=60,
                    what="two late members bound beside the running ones")  # fmt: skip
        (left,) = sorted({f"job-{i}" for i in range(5)} - set(bound(sim, "ml")))
        said = "4 members run (minMember 2); 1 more wait for room"
        await until(lambda: said in condition(sim, "ml", left), within=30,
                    what=f"{left}'s PodScheduled condition")  # fmt: skip
        await until(lambda: failed_event(sim, "ml", left, said), within=30,
                    what=f"a FailedScheduling Event on {left}")  # fmt: skip
        await api.delete_namespaced_pod("job-0", "ml", grace_period_seconds=0)
        await until(lambda: left in bound(sim, "ml"), within=60,
                    what=f"{left} bound once a running member ended")  # fmt: skip


async def test_a_group_with_fewer_members_than_min_member_waits() -> None:
    """Mirrors scheduler-plugins coscheduling core "TestPreFilter/pod count less than
    minMember" and "TestPermit/pod belongs to a pg that doesn't have enough pods" (Wait):
    two pods of a minMember-3 group bind none and say they wait for members."""
    async with stack(nodes=4, namespaces=["ml"], reporter_settings=TOLD) as s:
        api, custom, sim = s.api, s.custom, s.sim
        await group(api, custom, "ml", "job", need=3, size=2)
        said = "waiting for all 3 members of gang job to be created (minMember 3)"
        for name in ("job-0", "job-1"):
            await until(lambda name=name: said in condition(sim, "ml", name),  # type: ignore[misc]
                        within=30, what=f"{name} told it waits for members")  # fmt: skip
        assert bound(sim, "ml") == []
        status = sim.store.get("podgroups", "ml", "job").get("status") or {}
        assert status.get("phase") == "Pending", status
