"""The peers' own tests, continued from test_gang_peers.py: Kueue's preemption (by
priority, and between teams through admission) and JobSet's controller tests (exclusive
placement, failure policy), end to end on simcluster with kubectl-shaped objects. Each
test names the peer test it mirrors; docs/gang.md's peer-test table says where Baton
differs on purpose, and why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from baton.proto import keys
from baton.services.gang import main as gang
from baton.services.simcluster.world.spec import from_dict
from tests.e2e.admitting import admitting, submit
from tests.e2e.test_controllers import JOBSETS, pod_template
from tests.e2e.test_gang_formats import pods
from tests.e2e.test_gang_peers import TOLD, label, prioritised, priority_classes, verdict
from tests.e2e.test_gang_quorum import bound
from tests.pipeline import stack, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

# Kueue: test/integration/singlecluster/tas/tas_test.go,
# test/integration/singlecluster/scheduler/preemption_test.go


async def test_a_running_group_of_the_same_priority_is_not_preempted() -> None:
    """Mirrors Kueue test/integration/singlecluster/scheduler/preemption_test.go "Should
    preempt newer Workloads with the same priority when there is not enough quota" (with
    withinClusterQueue LowerOrNewerEqualPriority) against its default, LowerPriority:
    a running group of the same priority as the one that waits is never taken off;
    the waiting one is told it needs more nodes."""
    settings = gang.Settings(cycle_interval=0.1, preempt_min_run_s=0, preempt_grace_s=0)
    async with stack(
        nodes=4, namespaces=["ml"], gang_settings=settings, reporter_settings=TOLD
    ) as s:
        api, custom, sim = s.api, s.custom, s.sim
        await priority_classes(custom, normal=100)
        await prioritised(api, custom, "ml", "old", need=3, priority_class="normal")
        await until(lambda: len(bound(sim, "ml", "old-")) == 3, within=60, what="old bound")
        placed = {p["metadata"]["uid"] for p in pods(sim, "ml")}
        await prioritised(api, custom, "ml", "new", need=3, priority_class="normal")
        await until(lambda: "need 2 more nodes" in verdict(sim, "ml", "new"), within=60,
                    what="new told it needs 2 more nodes")  # fmt: skip
        assert bound(sim, "ml") == ["old-0", "old-1", "old-2"]
        assert placed <= {p["metadata"]["uid"] for p in pods(sim, "ml")}  # none recreated


async def test_a_high_priority_group_takes_off_the_low_and_mid_ones_whole() -> None:
    """Mirrors Kueue test/integration/singlecluster/tas/tas_test.go "should preempt the low
    and mid priority workloads to fit the high-priority workload": two nodes, a low and a
    mid-priority group of one pod each running; a high-priority group of two takes both
    nodes. Both are taken off (their bare pods recreated unbound), the high one bound."""
    settings = gang.Settings(cycle_interval=0.1, preempt_min_run_s=0, preempt_grace_s=0)
    async with stack(nodes=2, namespaces=["ml"], gang_settings=settings) as s:
        api, custom, sim = s.api, s.custom, s.sim
        await priority_classes(custom, low=1, mid=2, high=3)
        for name in ("low", "mid"):
            await prioritised(api, custom, "ml", name, need=1, priority_class=name)
            await until(lambda name=name: bound(sim, "ml", f"{name}-"), within=60,  # type: ignore[misc]
                        what=f"the {name}-priority group bound")  # fmt: skip
        before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(sim, "ml")}
        await prioritised(api, custom, "ml", "high", need=2, priority_class="high")

        def swapped() -> bool:
            now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods(sim, "ml")}
            recreated = all(now.get(n, u) != u for n, u in before.items())
            return recreated and set(now) == {"low-0", "mid-0", "high-0", "high-1"}

        await until(lambda: bound(sim, "ml") == ["high-0", "high-1"] and swapped(), within=60,
                    what="high bound on both nodes, low and mid recreated unbound")  # fmt: skip


# JobSet: test/integration/controller/jobset_controller_test.go,
# pkg/controllers/jobset_controller_test.go


async def test_exclusive_placement_for_one_replicated_job_keeps_its_jobs_apart() -> None:
    """Mirrors JobSet pkg/controllers/jobset_controller_test.go TestConstructJobsFromTemplate
    "exclusive placement for a ReplicatedJob": the exclusive-topology annotation on one
    replicated Job's template (not on the JobSet) applies to its Jobs only. Two worker
    Jobs of two 4-GPU pods, which one rack of two nodes could hold together, each get a
    rack of their own; the driver Job (three 8-GPU pods, no annotation) is not confined
    to one rack, and shares neither of theirs."""
    racks = from_dict({"pools": [{"name": "gpu", "count": 8}],
                       "topology": {"nodes_per_rack": 2}})  # fmt: skip
    notes = {keys.GANG_MEMBERS: "7"}
    workers = {"metadata": {"annotations": {keys.JOBSET_EXCLUSIVE: keys.RACK}},
               "spec": {"parallelism": 2, "completions": 2,
                        "template": pod_template(gpus=4, **notes)}}  # fmt: skip
    driver = {"spec": {"parallelism": 3, "completions": 3,
                       "template": pod_template(gpus=8, **notes)}}  # fmt: skip
    body = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "llm"},
            "spec": {"replicatedJobs": [
                {"name": "workers", "replicas": 2, "template": workers},
                {"name": "driver", "replicas": 1, "template": driver}]}}  # fmt: skip
    async with stack(spec=racks, namespaces=["research"]) as s:
        sim = s.sim
        await s.custom.create_namespaced_custom_object(*JOBSETS, body)
        await until(lambda: len(bound(sim, "research")) == 7, within=60, what="7 pods bound")
        by_job: dict[str, set[str]] = {}
        for pod in pods(sim, "research"):
            job = pod["metadata"]["labels"]["batch.kubernetes.io/job-name"]
            by_job.setdefault(job, set()).add(label(sim, pod["spec"]["nodeName"], keys.RACK))
        apart = [by_job["llm-workers-0"], by_job["llm-workers-1"], by_job["llm-driver-0"]]
        assert [len(r) for r in apart] == [1, 1, 2], by_job
        assert len(set.union(*apart)) == 4, by_job


async def test_a_jobset_that_fails_past_max_restarts_is_failed_each_attempt_placed_whole() -> None:
    """Mirrors JobSet test/integration/controller/jobset_controller_test.go "jobset fails
    after reaching max restarts": a JobSet (maxRestarts 1) whose pods fail is restarted
    once and then Failed with reason ReachedMaxRestarts; Baton places each attempt's pods
    whole (two Jobs x two 8-GPU pods, one gang)."""
    notes = {keys.GANG_MEMBERS: "4", "sim.baton.io/exit-code": "1"}
    template = pod_template(gpus=8, seconds=0.5, **notes)
    job = {"parallelism": 2, "completions": 2, "backoffLimit": 0, "template": template}
    body = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "llm"},
            "spec": {"failurePolicy": {"maxRestarts": 1},
                     "replicatedJobs": [{"name": "workers", "replicas": 2,
                                         "template": {"spec": job}}]}}  # fmt: skip
    seen: dict[str, set[str]] = {}  # restart attempt -> names of its pods seen bound

    def failed() -> dict[str, Any] | None:
        for pod in pods(sim, "research"):
            attempt = pod["metadata"]["labels"].get("jobset.sigs.k8s.io/restart-attempt", "")
            if pod["spec"].get("nodeName"):
                seen.setdefault(attempt, set()).add(pod["metadata"]["name"])
        status = sim.store.get("jobsets", "research", "llm").get("status") or {}
        found = [c for c in status.get("conditions") or ()
                 if c["type"] == "Failed" and c["status"] == "True"]  # fmt: skip
        return status if found else None

    async with stack(nodes=4, namespaces=["research"]) as s:
        sim = s.sim
        await s.custom.create_namespaced_custom_object(*JOBSETS, body)
        status = await until(failed, within=90, what="the JobSet Failed", step=0.01)
        (cond,) = [c for c in status["conditions"] if c["type"] == "Failed"]
        assert cond["reason"] == "ReachedMaxRestarts", cond
        assert status["restarts"] == 1 and status.get("terminalState") == "Failed", status
        assert {a: len(n) for a, n in seen.items()} == {"0": 4, "1": 4}, seen


# Kueue: test/integration/singlecluster/scheduler/preemption_test.go, with admission's teams
COHORT = """
teams:
  - name: a
    namespaces: [team-a]
    pools: [pa]
    borrow: {gpus: 16}
  - name: b
    namespaces: [team-b]
    pools: [pb]
    borrow: {gpus: 8}
"""


async def test_a_team_that_would_have_to_borrow_takes_nothing_back(tmp_path: Path) -> None:
    """Mirrors Kueue test/integration/singlecluster/scheduler/preemption_test.go "Should
    not preempt Workloads in the cohort, if the ClusterQueue requires borrowing": a uses 8
    of its 16 GPUs, b uses its own 16 and borrows a's other 8. a's gang of 16 more would
    take a past its quota (it would have to borrow), so it is no reclaim: b's gangs keep
    running and a's waits, saying why."""
    pools, namespaces = ["pa", "pa", "pb", "pb"], ["team-a", "team-b"]  # nodes in name order
    async with stack(nodes=4, services=False, pools=pools, namespaces=namespaces) as s:
        core_api, custom, sim, url, nodes = s.api, s.custom, s.sim, s.url, s.nodes
        async with admitting(url, sim, custom, teams=COHORT, folder=tmp_path) as admission:

            async def tainted() -> bool:
                found = (await core_api.list_node()).items
                return all(any(t.key == keys.TEAM for t in n.spec.taints or []) for n in found)

            await until(tainted, within=45, what="team taints on every node")
            await until(lambda: admission.ready, within=45, what="admission caught up")
            for ns, name, size, running in (("team-a", "own", 1, 1), ("team-b", "home", 2, 2),
                                            ("team-b", "extra", 1, 3)):  # fmt: skip
                await submit(core_api, custom, ns, name, size)
                await until(lambda ns=ns, running=running: len(bound(sim, ns)) == running,  # type: ignore[misc]
                            within=45, what=f"{ns}/{name} bound")  # fmt: skip
            extra = sim.store.get("pods", "team-b", "extra-0")["spec"]["nodeName"]
            assert extra in nodes[:2]  # on a's idle node, borrowed
            before = {p["metadata"]["uid"] for p in pods(sim, "team-b")}
            await submit(core_api, custom, "team-a", "big", 2)

            def waits() -> str:
                gang = admission.state.gangs.get("team-a/big")
                if gang is None or gang.admitted or gang.reason.startswith("waiting for members"):
                    return ""
                return gang.reason

            said = await until(waits, within=45, what="a's gang queued with a reason")
            assert said == (
                "team 'a' is at quota (8/16 GPUs) and other teams lend only 0 idle GPUs; "
                "the gang needs 16"
            )
            assert {p["metadata"]["uid"] for p in pods(sim, "team-b")} == before
            assert len(bound(sim, "team-b")) == 3 and bound(sim, "team-a") == ["own-0"]
