"""The workload through controllers: a trace's jobs as the JobSets, MPIJobs and Jobs
users submit (``controlled.py``), and the LLM-style mix (``mixes.py``)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from baton.proto import keys
from baton.services.simcluster.api import validation
from baton.services.simcluster.api.resources import resource
from baton.services.simcluster.api.store import Store
from baton.services.simcluster.clock import Clock
from baton.services.simcluster.world import controlling, mixes
from baton.services.simcluster.world.controlled import batch_job, controlled_objects, kind_of
from baton.services.simcluster.world.jobs import Jobs
from baton.services.simcluster.world.jobsets import job_for
from baton.services.simcluster.world.simulation import build
from baton.services.simcluster.world.workload import DURATION_ANNOTATION, Job
from tests.pipeline import until

pytestmark = pytest.mark.unit
Obj = dict[str, Any]


def job(job_id: str, gpus: int, duration_s: float = 600.0) -> Job:
    return Job(job_id=job_id, submit_s=0.0, gpus=gpus, duration_s=duration_s, team="a")


def valid(res: str, body: Obj) -> Obj:
    """The object as the API server would store it, refused on any unknown field."""
    decoded, _ = validation.decode(resource(res), body, mode="Strict")
    return decoded


def test_a_large_job_becomes_a_jobset_read_as_one_gang() -> None:
    big = job("big0", 256, duration_s=3600)  # 32 whole-node pods
    assert kind_of(big) == "JobSet"
    [(res, body)] = controlled_objects(big, speed=60)
    assert res == "jobsets" and valid(res, body) == body
    assert body["metadata"] == {"name": "job-big0", "namespace": "team-a",
                                "labels": {"sim.baton.io/job": "big0",
                                           "sim.baton.io/team": "a"}}  # fmt: skip
    [replicated] = body["spec"]["replicatedJobs"]
    spec = replicated["template"]["spec"]
    assert (replicated["replicas"], spec["parallelism"], spec["completions"]) == (4, 8, 8)
    assert spec["completionMode"] == "Indexed" and spec["backoffLimit"] == 0
    notes = spec["template"]["metadata"]["annotations"]
    assert notes == {keys.GANG_MEMBERS: "32", DURATION_ANNOTATION: "60.000"}
    [container] = spec["template"]["spec"]["containers"]
    assert container["resources"]["requests"][keys.GPU] == "8"
    assert container["resources"]["requests"]["rdma/ib"] == "8"
    assert spec["template"]["spec"]["schedulerName"] == "baton"
    assert body["spec"]["failurePolicy"]["maxRestarts"] >= 1  # an eviction restarts it


@pytest.mark.parametrize(("gpus", "jobs", "pods"), [(16, 1, 2), (24, 1, 3), (88, 11, 1),
                                                    (1024, 16, 8), (20, 1, 3)])  # fmt: skip
def test_a_jobset_splits_its_pods_into_equal_jobs(gpus: int, jobs: int, pods: int) -> None:
    [(_, body)] = controlled_objects(job("big0", gpus))
    [replicated] = body["spec"]["replicatedJobs"]
    assert (replicated["replicas"], replicated["template"]["spec"]["parallelism"]) == (jobs, pods)
    notes = replicated["template"]["spec"]["template"]["metadata"]["annotations"]
    assert notes[keys.GANG_MEMBERS] == str(jobs * pods)


def test_an_mpi_job_has_a_launcher_that_ends_it_and_whole_node_workers() -> None:
    mpi = job("big1", 32, duration_s=120)
    assert kind_of(mpi) == "MPIJob"
    [(res, body)] = controlled_objects(mpi, speed=2)
    assert res == "mpijobs" and valid(res, body) == body
    specs = body["spec"]["mpiReplicaSpecs"]
    launcher, worker = specs["Launcher"], specs["Worker"]
    assert (launcher["replicas"], worker["replicas"]) == (1, 4)
    assert launcher["template"]["metadata"]["annotations"] == {DURATION_ANNOTATION: "60.000"}
    assert DURATION_ANNOTATION not in worker["template"]["metadata"]["annotations"]
    assert body["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"  # workers end with it
    [launched] = launcher["template"]["spec"]["containers"]
    assert launched["resources"]["requests"][keys.GPU] == "0"


def test_a_small_job_is_a_job_of_one_pod_without_a_podgroup() -> None:
    small = job("e1", 4)
    assert kind_of(small) == "Job"
    [(res, body)] = controlled_objects(small)
    assert res == "jobs" and valid(res, body) == body
    assert (body["spec"]["parallelism"], body["spec"]["completions"]) == (1, 1)
    assert "completionMode" not in body["spec"]  # NonIndexed
    assert keys.POD_GROUP not in body["spec"]["template"]["metadata"]["labels"]


def test_a_job_of_several_pods_is_indexed_and_one_gang_by_its_podgroup() -> None:
    made = batch_job(job("two", 16), shape=[8, 8], duration="5.000")
    assert [res for res, _ in made] == ["podgroups", "jobs"]  # the group first
    [(_, group), (_, body)] = made
    assert valid("podgroups", group) == group and valid("jobs", body) == body
    assert group["metadata"]["name"] == "job-two" and group["spec"] == {"minMember": 2}
    assert body["spec"]["completionMode"] == "Indexed" and body["spec"]["parallelism"] == 2
    assert body["spec"]["template"]["metadata"]["labels"][keys.POD_GROUP] == "job-two"


async def test_through_controllers_each_kind_gets_its_controller_s_objects() -> None:
    """Replayed in the simulation: the MPI operator makes the MPIJob's PodGroup, the
    JobSet controller its Jobs, the Job controller the small job's pod."""
    store = Store()
    sim = build(store, nodes=0)
    await sim.start()
    try:
        sim.replay([job("big1", 16), job("big0", 16), job("e1", 1)], speed=10,
                   submit="controllers")  # fmt: skip

        def made() -> bool:
            groups = store.list("podgroups", namespace="team-a")[0]
            jobs = {j["metadata"]["name"] for j in store.list("jobs", namespace="team-a")[0]}
            pods = store.list("pods", namespace="team-a")[0]
            return bool(groups) and {"job-big0-trainers-0", "job-e1"} <= jobs and len(pods) == 6

        await until(made, what="the PodGroup, the JobSet's Job, the small Job and 6 pods")
        group = store.get("podgroups", "team-a", "job-big1")
        assert group["spec"]["minMember"] == 3  # launcher + 2 workers
        pods = store.list("pods", namespace="team-a")[0]
        gangs = Counter(p["metadata"]["labels"].get(keys.POD_GROUP)
                        or p["metadata"]["labels"].get(keys.JOBSET_NAME) for p in pods)  # fmt: skip
        assert gangs == {"job-big1": 3, "job-big0": 2, None: 1}
    finally:
        await sim.stop()


def test_replay_refuses_an_unknown_way_to_submit() -> None:
    with pytest.raises(ValueError, match="submit: expected one of pods, controllers"):
        build(Store(), nodes=0).replay([], submit="operators")


def test_the_llm_mix_is_sized_to_the_cluster_with_most_gpu_time_in_large_gangs() -> None:
    jobs = mixes.llm_jobs(seed=1, gpus=512)
    kinds = Counter(j.job_id.rstrip("0123456789") for j in jobs)
    assert kinds == {"eval": 500, "tune": 40, "pretrain": 5}  # a quarter of 2,048 GPUs'
    assert max(j.gpus for j in jobs) == 512  # none larger than the cluster
    work = sum(j.gpus * j.duration_s for j in jobs)
    assert sum(j.gpus * j.duration_s for j in jobs if j.gpus >= 256) > 0.5 * work
    assert mixes.llm_jobs(seed=1, gpus=512) == jobs  # seeded
    with pytest.raises(ValueError, match="gpus must be > 0"):
        mixes.llm_jobs(seed=1, gpus=0)


def test_exclusive_placement_on_a_replicated_job_reaches_its_pods_only() -> None:
    """As upstream's labelAndAnnotateObject: the annotation on the JobSet, or on a
    replicated Job's template (which wins), goes on that Job and its pods."""

    def rj(name: str, **notes: str) -> Obj:
        job = {"metadata": {"annotations": notes}, "spec": {"template": {}}}
        return {"name": name, "replicas": 1, "template": job}

    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "llm", "namespace": "ml", "uid": "u1"},
              "spec": {"replicatedJobs": [rj("w", **{keys.JOBSET_EXCLUSIVE: keys.RACK}),
                                          rj("d")]}}  # fmt: skip
    made = {r["name"]: job_for(jobset, r, 0, restarts=0) for r in jobset["spec"]["replicatedJobs"]}
    notes = {n: j["spec"]["template"]["metadata"]["annotations"] for n, j in made.items()}
    assert notes["w"][keys.JOBSET_EXCLUSIVE] == keys.RACK
    assert made["w"]["metadata"]["annotations"][keys.JOBSET_EXCLUSIVE] == keys.RACK
    assert keys.JOBSET_EXCLUSIVE not in notes["d"]
    jobset["metadata"]["annotations"] = {keys.JOBSET_EXCLUSIVE: keys.BLOCK}
    on_set = job_for(jobset, jobset["spec"]["replicatedJobs"][1], 0, restarts=0)
    assert (
        on_set["spec"]["template"]["metadata"]["annotations"][keys.JOBSET_EXCLUSIVE] == keys.BLOCK
    )
    on_rj = job_for(jobset, jobset["spec"]["replicatedJobs"][0], 0, restarts=0)
    assert on_rj["spec"]["template"]["metadata"]["annotations"][keys.JOBSET_EXCLUSIVE] == keys.RACK


async def test_a_controller_reads_what_it_owns_from_its_index_not_the_namespace() -> None:
    """What a Job owns is kept by owner as the store changes (a pod created before the
    controller started too); a pod orphaned, deleted or owned by another Job is not its."""
    store = Store()
    for namespace in ("team-a", "team-b"):
        store.create("namespaces", {"metadata": {"name": namespace}})
    jobs = Jobs(store, clock=Clock(), create=lambda res, obj: None)  # type: ignore[arg-type,return-value]

    def pod(name: str, owner: str) -> None:
        ref = {"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": f"uid-{owner}",
               "controller": True}  # fmt: skip
        store.create("pods", {"metadata": {"name": name, "namespace": "team-a",
                                           "ownerReferences": [ref]},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}})  # fmt: skip

    def owned(owner: str) -> list[str]:
        return [p["metadata"]["name"] for p in jobs.owned("pods", "team-a", f"uid-{owner}")]

    pod("early", "j1")  # before the controller followed the store
    store.add_listener(lambda event, res, obj: controlling.route([jobs], event, res, obj))
    jobs.start()
    try:
        for name, owner in (("p1", "j1"), ("p2", "j2"), ("p3", "j1"), ("p4", "j1")):
            pod(name, owner)
        assert (owned("j1"), owned("j2")) == (["early", "p1", "p3", "p4"], ["p2"])
        store.delete("pods", "team-a", "p3")
        # an orphan is not routed to any controller: owned() checks its owner again
        store.mutate("pods", "team-a", "p4", lambda o: o["metadata"].pop("ownerReferences"))
        assert owned("j1") == ["early", "p1"] and jobs.owned("pods", "team-b", "uid-j1") == []
    finally:
        await jobs.stop()


class _Watched(controlling.Controller):
    """A controller whose reconcile takes a while and notes who runs at once."""

    resource = "jobs"
    name = "watched"
    workers = 3

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.now: Counter[str] = Counter()  # name -> reconciles of it running
        self.most = 0  # reconciles running at once, any objects
        self.twice: list[str] = []  # an object reconciled by two workers at once
        self.done: Counter[str] = Counter()

    async def reconcile(self, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        self.now[name] += 1
        if self.now[name] > 1:
            self.twice.append(name)
        self.most = max(self.most, sum(self.now.values()))
        await asyncio.sleep(0.02)
        self.now[name] -= 1
        self.done[name] += 1


async def test_workers_reconcile_different_objects_at_once_and_one_object_one_at_a_time() -> None:
    """As a real controller's work queue: ``workers`` objects at once, never one object
    twice at once; one queued again while it is reconciled is reconciled once more after."""
    store = Store()
    store.create("namespaces", {"metadata": {"name": "team-a"}})
    for i in range(6):
        store.create("jobs", {"metadata": {"name": f"j{i}", "namespace": "team-a"}})
    watched = _Watched(store, clock=Clock(), create=lambda res, obj: None)  # type: ignore[arg-type,return-value]
    watched.start()
    try:
        for i in range(6):
            watched.queue("team-a", f"j{i}")
        await until(lambda: watched.now["j0"] == 1, what="j0 being reconciled")
        watched.queue("team-a", "j0")  # changed while a worker reconciles it
        await until(lambda: sum(watched.done.values()) == 7, what="seven reconciles")
    finally:
        await watched.stop()
    assert watched.most == 3
    assert watched.twice == []
    assert watched.done == Counter({"j0": 2, **{f"j{i}": 1 for i in range(1, 6)}})


async def test_the_job_controller_makes_pods_for_several_jobs_at_once() -> None:
    """Five Jobs whose pods each wait 50 ms on a webhook: the Job controller's five
    workers (``--concurrent-job-syncs``) have all five pods in flight at once."""
    store = Store()
    sim = build(store, nodes=0)
    in_flight, most = 0, 0

    async def slow_webhook(
        operation: str, res: Any, obj: Obj, old: Obj | None, *, dry_run: bool = False
    ) -> Obj:
        nonlocal in_flight, most
        if res.plural == "pods":
            in_flight += 1
            most = max(most, in_flight)
            await asyncio.sleep(0.05)
            in_flight -= 1
        return obj

    sim.admission = [slow_webhook]
    await sim.start()
    try:
        sim.replay([job(f"w{i}", 1) for i in range(5)], submit="controllers", submitters=5)
        await until(lambda: len(list(store.entries("pods", None))) == 5, what="five pods")
    finally:
        await sim.stop()
    assert most == Jobs.workers == 5
