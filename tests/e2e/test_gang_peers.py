"""The peers' own tests, scheduler-plugins' coscheduling and Kueue's topology-aware
scheduling (Kueue's preemption and JobSet's: test_gang_peers_jobs.py), run end to end on
simcluster with kubectl-shaped objects: bridge -> gang -> actuator (and the reporter,
which tells a waiting pod why). Each test names the peer test it mirrors; where Baton
differs on purpose the test asserts Baton's behaviour and docs/gang.md (the peer-test
table under "minMember is a quorum") says why."""

from __future__ import annotations

from typing import Any

import pytest

from baton.proto import keys
from baton.services.reporter import main as reporter
from baton.services.simcluster.world.spec import from_dict
from tests.e2e.test_gang_formats import PLUGINS, member, pods
from tests.e2e.test_gang_quorum import bound, condition, group
from tests.pipeline import stack, until
from tests.support.sim import Sim

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
TOLD = reporter.Settings(pod_every=0.2, tick_every=0.1)
# two racks of two nodes per block, two blocks (8 nodes of 8 GPUs)
BLOCKS = from_dict({"pools": [{"name": "gpu", "count": 8}],
                    "topology": {"nodes_per_rack": 2, "racks_per_block": 2}})  # fmt: skip


async def priority_classes(custom: Any, **values: int) -> None:
    for name, value in values.items():
        await custom.create_cluster_custom_object(
            "scheduling.k8s.io", "v1", "priorityclasses",
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
             "metadata": {"name": name}, "value": value},
        )  # fmt: skip


async def prioritised(api: Any, custom: Any, ns: str, name: str, *, need: int,
                      priority_class: str, **annotations: str) -> None:  # fmt: skip
    """A PodGroup of ``need`` 8-GPU members of one priority class (``annotations`` on it)."""
    body = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"minMember": need}}  # fmt: skip
    await custom.create_namespaced_custom_object(*PLUGINS, ns, "podgroups", body)
    for i in range(need):
        pod = member(f"{name}-{i}", gpus=8, labels={keys.POD_GROUP: name},
                     priorityClassName=priority_class)  # fmt: skip
        await api.create_namespaced_pod(ns, pod)


async def cordoned(api: Any, value: bool) -> None:
    for node in (await api.list_node()).items:
        await api.patch_node(node.metadata.name, {"spec": {"unschedulable": value}})


def label(sim: Sim, node: str, key: str) -> str:
    return str(sim.store.get("nodes", None, node)["metadata"]["labels"][key])


def domains(sim: Sim, ns: str, key: str) -> set[str]:
    return {
        label(sim, p["spec"]["nodeName"], key) for p in pods(sim, ns) if p["spec"].get("nodeName")
    }


def verdict(sim: Sim, ns: str, name: str) -> str:
    """The False condition a PodGroup's status carries ('' while none)."""
    status = sim.store.get("podgroups", ns, name).get("status") or {}
    found = [c for c in status.get("conditions") or () if c["status"] == "False"]
    return str(found[0].get("message", "")) if found else ""


# scheduler-plugins: test/integration/coscheduling_test.go, pkg/coscheduling/core/core_test.go


async def test_a_higher_priority_group_created_later_starts_first() -> None:
    """Mirrors scheduler-plugins test/integration/coscheduling_test.go TestCoschedulingPlugin
    "different priority, sequentially pg1 meet min and pg2 meet min": two groups of 3 that
    cannot both fit; the high-priority one, created second, is the one scheduled. Both are
    created while every node is cordoned, so both wait when room appears."""
    async with stack(nodes=4, namespaces=["ml"], reporter_settings=TOLD) as s:
        api, custom, sim = s.api, s.custom, s.sim
        await priority_classes(custom, mid=100, high=1000)
        await cordoned(api, True)
        await prioritised(api, custom, "ml", "pg1", need=3, priority_class="mid")
        await prioritised(api, custom, "ml", "pg2", need=3, priority_class="high")
        await until(lambda: "were unschedulable" in condition(sim, "ml", "pg1-0"), within=30,
                    what="pg1 told no node takes it while all are cordoned")  # fmt: skip
        await cordoned(api, False)
        await until(lambda: bound(sim, "ml") == ["pg2-0", "pg2-1", "pg2-2"], within=60,
                    what="the high-priority group bound")  # fmt: skip
        await until(lambda: "need 2 more nodes" in verdict(sim, "ml", "pg1"), within=30,
                    what="the mid-priority group told it needs 2 more nodes")  # fmt: skip
        assert bound(sim, "ml") == ["pg2-0", "pg2-1", "pg2-2"]


async def test_a_group_that_can_never_fit_does_not_hold_back_one_that_can() -> None:
    """Mirrors scheduler-plugins test/integration/coscheduling_test.go TestPodgroupBackoff
    "pg1 can not be scheduled and pg2 can be scheduled": a minMember-6 group larger than
    the cluster, created first, and a group of one behind it; the second is scheduled,
    the first is told it needs more nodes."""
    async with stack(nodes=4, namespaces=["ml"], reporter_settings=TOLD) as s:
        api, custom, sim = s.api, s.custom, s.sim
        await group(api, custom, "ml", "pg1", need=6, size=6, gpus=8)
        await group(api, custom, "ml", "pg2", need=1, size=1, gpus=4)
        await until(lambda: bound(sim, "ml") == ["pg2-0"], within=60, what="pg2 bound")
        said = "4 of 6 members fit; need 2 more nodes with 8 nvidia.com/gpu"
        await until(lambda: said in verdict(sim, "ml", "pg1"), within=30,
                    what="pg1 told it needs 2 more nodes")  # fmt: skip
        assert bound(sim, "ml", "pg1-") == []


async def test_min_resources_more_than_the_cluster_has_is_not_tried() -> None:
    """Mirrors scheduler-plugins pkg/coscheduling/core/core_test.go TestPreFilter
    "cluster's resource cannot satisfy minResource" (and TestCheckClusterResource "Cluster
    resource not enough"): a PodGroup whose minResources the free nodes cannot cover is
    rejected before any member is tried, though its two pods would fit; the verdict
    names the gap."""
    async with stack(nodes=4, namespaces=["ml"], reporter_settings=TOLD) as s:
        api, custom, sim = s.api, s.custom, s.sim
        body = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                "metadata": {"name": "pg"},
                "spec": {"minMember": 2, "minResources": {keys.GPU: "48"}}}  # fmt: skip
        await custom.create_namespaced_custom_object(*PLUGINS, "ml", "podgroups", body)
        for i in range(2):
            pod = member(f"pg-{i}", gpus=8, labels={keys.POD_GROUP: "pg"})
            await api.create_namespaced_pod("ml", pod)
        said = "short of the PodGroup's minResources (nvidia.com/gpu 16 more free)"
        await until(lambda: said in verdict(sim, "ml", "pg"), within=60,
                    what="pg told the free nodes are short of its minResources")  # fmt: skip
        await until(lambda: said in condition(sim, "ml", "pg-0"), within=30,
                    what="the verdict on pg-0's PodScheduled condition")  # fmt: skip
        assert bound(sim, "ml") == []


async def test_a_completed_member_does_not_count_toward_the_quorum() -> None:
    """Mirrors scheduler-plugins test/integration/coscheduling_test.go TestPodCompleted
    "pg cannot be scheduled with completed pod": a minMember-6 group whose first member
    already ran to completion and five pending; the five are not scheduled, they wait
    for a sixth."""
    async with stack(nodes=8, namespaces=["ml"], reporter_settings=TOLD) as s:
        api, custom, sim = s.api, s.custom, s.sim
        await group(api, custom, "ml", "pg", need=6, size=0)
        (node, *_) = [n.metadata.name for n in (await api.list_node()).items]
        done = member("pg-0", gpus=1, labels={keys.POD_GROUP: "pg"}, nodeName=node)
        done["metadata"]["annotations"]["sim.baton.io/duration-seconds"] = "0.1"
        await api.create_namespaced_pod("ml", done)
        await until(lambda: sim.store.get("pods", "ml", "pg-0")["status"].get("phase")
                    == "Succeeded", within=30, what="pg-0 completed")  # fmt: skip
        await group(api, custom, "ml", "pg", need=6, size=5, gpus=1, first=1)
        said = "waiting for all 6 members of gang pg to be created (minMember 6)"
        for i in range(1, 6):
            await until(lambda i=i: said in condition(sim, "ml", f"pg-{i}"),  # type: ignore[misc]
                        within=30, what=f"pg-{i} told it waits for members")  # fmt: skip
        assert bound(sim, "ml") == ["pg-0"]


async def test_pods_whose_podgroup_is_deleted_wait_for_it_and_start_when_it_is_back() -> None:
    """Mirrors scheduler-plugins pkg/coscheduling/core/core_test.go TestPreFilter "pod
    belongs to a non-existent pg" (rejected) and TestPermit "pod specifies a non-existent
    pg" (Wait): the PodGroup of two waiting pods is deleted; they stay unbound and say
    which PodGroup they wait for, and start once it is created again with minMember 2."""
    async with stack(nodes=4, namespaces=["ml"], reporter_settings=TOLD) as s:
        api, custom, sim = s.api, s.custom, s.sim
        await group(api, custom, "ml", "pg", need=3, size=2)
        said = "waiting for all 3 members of gang pg to be created (minMember 3)"
        await until(lambda: said in condition(sim, "ml", "pg-1"), within=30,
                    what="pg-1 told it waits for members")  # fmt: skip
        await custom.delete_namespaced_custom_object(*PLUGINS, "ml", "podgroups", "pg")
        said = f"waiting for PodGroup ml/pg (named by label {keys.POD_GROUP}) to be created"
        for name in ("pg-0", "pg-1"):
            await until(lambda name=name: said in condition(sim, "ml", name),  # type: ignore[misc]
                        within=30, what=f"{name} told its PodGroup is missing")  # fmt: skip
        assert bound(sim, "ml") == []
        await group(api, custom, "ml", "pg", need=2, size=0)
        await until(lambda: bound(sim, "ml") == ["pg-0", "pg-1"], within=60,
                    what="both bound once the PodGroup is back")  # fmt: skip


# Kueue: test/integration/singlecluster/tas/tas_test.go, pkg/cache/scheduler/tas_cache_test.go


async def test_a_required_level_that_fits_places_the_group_in_one_domain() -> None:
    """Mirrors Kueue test/integration/singlecluster/tas/tas_test.go "should admit workload
    which fits in a required topology domain": three 8-GPU pods requiring one block
    (racks of two nodes) are placed in one block, over two of its racks."""
    async with stack(spec=BLOCKS, namespaces=["ml"]) as s:
        api, custom, sim = s.api, s.custom, s.sim
        await priority_classes(custom, normal=0)
        await prioritised(api, custom, "ml", "pg", need=3, priority_class="normal",
                          **{keys.TOPOLOGY_REQUIRED: keys.BLOCK})  # fmt: skip
        await until(lambda: len(bound(sim, "ml")) == 3, within=60, what="the group bound")
        assert len(domains(sim, "ml", keys.BLOCK)) == 1
        assert len(domains(sim, "ml", keys.RACK)) == 2


async def test_a_required_level_that_does_not_fit_binds_nothing() -> None:
    """Mirrors Kueue test/integration/singlecluster/tas/tas_test.go "should not admit
    workload which does not fit to the required topology domain": three 8-GPU pods that
    require one rack of two nodes bind none, with eight free nodes, and say why."""
    async with stack(spec=BLOCKS, namespaces=["ml"], reporter_settings=TOLD) as s:
        api, custom, sim = s.api, s.custom, s.sim
        await priority_classes(custom, normal=0)
        await prioritised(api, custom, "ml", "pg", need=3, priority_class="normal",
                          **{keys.TOPOLOGY_REQUIRED: keys.RACK})  # fmt: skip
        said = (
            "2 of 3 members fit in one baton.io/rack; "
            "need 1 more node with 8 nvidia.com/gpu in one rack"
        )
        await until(lambda: said in verdict(sim, "ml", "pg"), within=60,
                    what="pg told no rack holds it")  # fmt: skip
        await until(lambda: said in condition(sim, "ml", "pg-0"), within=30,
                    what="the verdict on pg-0's PodScheduled condition")  # fmt: skip
        assert bound(sim, "ml") == []


async def test_a_preferred_level_falls_back_to_a_broader_domain() -> None:
    """Mirrors Kueue pkg/cache/scheduler/tas_cache_test.go TestFindTopologyAssignments
    "rack preferred; but only block can accommodate the workload; BestFit": three 8-GPU
    pods preferring one rack of two nodes are placed in one block instead."""
    async with stack(spec=BLOCKS, namespaces=["ml"]) as s:
        api, custom, sim = s.api, s.custom, s.sim
        await priority_classes(custom, normal=0)
        await prioritised(api, custom, "ml", "pg", need=3, priority_class="normal",
                          **{keys.TOPOLOGY_PREFERRED: keys.RACK})  # fmt: skip
        await until(lambda: len(bound(sim, "ml")) == 3, within=60, what="the group bound")
        assert len(domains(sim, "ml", keys.BLOCK)) == 1
        assert len(domains(sim, "ml", keys.RACK)) == 2
