"""Trace parsing, jobs to PodGroups and pods, synthetic determinism, submitters."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from baton.services.simcluster.api.resources import Resource
from baton.services.simcluster.api.store import ApiError, Store
from baton.services.simcluster.main import workload_metrics
from baton.services.simcluster.world import trace, workload
from baton.services.simcluster.world.simulation import build
from baton.services.simcluster.world.workload import Job
from tests.pipeline import until

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
HEADER = "job_id,submit_time,submit_s,num_gpus,duration_s,vc,user,status\n"


def test_trace_rows_become_jobs() -> None:
    text = HEADER + "0,2017-09-04 10:30:41,0,8,2240194,7f04ca,,\n1,x,235696,16,3600,6214E9,,\n"
    jobs = list(trace.parse(io.StringIO(text)))
    assert jobs == [
        Job(job_id="0", submit_s=0, gpus=8, duration_s=2240194, team="7f04ca"),
        Job(job_id="1", submit_s=235696, gpus=16, duration_s=3600, team="6214e9"),
    ]


@pytest.mark.parametrize(
    ("row", "where"),
    [
        ("0,x,0,zero,10,vc1,,", "line 2: num_gpus"),
        ("0,x,0,0,10,vc1,,", "line 2: num_gpus"),
        ("0,x,-5,1,10,vc1,,", "line 2: submit_s"),
        ("0,x,0,1,10,bad vc,,", "line 2: vc"),
    ],
)
def test_bad_trace_rows_name_line_and_column(row: str, where: str) -> None:
    with pytest.raises(trace.TraceError, match=where):
        list(trace.parse(io.StringIO(HEADER + row + "\n")))


def test_missing_columns_are_named() -> None:
    with pytest.raises(trace.TraceError, match="missing columns num_gpus"):
        list(trace.parse(io.StringIO("job_id,submit_s,duration_s,vc\n")))


def test_bundled_sample_reads_whole() -> None:
    jobs = trace.read(trace.sample_path())
    assert len(jobs) == 2000
    assert jobs == sorted(jobs, key=lambda j: j.submit_s)
    assert trace.read(Path(trace.sample_path()), limit=10) == jobs[:10]


def test_multi_node_job_becomes_whole_node_pods() -> None:
    job = Job(job_id="7", submit_s=0, gpus=20, duration_s=600, team="vc1")
    group, pods = workload.job_objects(job, speed=60, gpus_per_node=8)
    assert group["metadata"] == {
        "name": "job-7",
        "namespace": "team-vc1",
        "labels": {"sim.baton.io/job": "7", "sim.baton.io/team": "vc1"},
    }
    assert group["spec"]["minMember"] == 3
    assert [p["metadata"]["name"] for p in pods] == ["job-7-0", "job-7-1", "job-7-2"]
    for pod in pods:
        requests = pod["spec"]["containers"][0]["resources"]["requests"]
        assert requests["nvidia.com/gpu"] == "8"
        assert requests["rdma/ib"] == "8"
        assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "job-7"
        assert pod["spec"]["schedulerName"] == "baton"
        assert pod["metadata"]["annotations"]["sim.baton.io/duration-seconds"] == "10.000"


def test_small_job_is_one_pod_with_its_gpus() -> None:
    job = Job(job_id="8", submit_s=0, gpus=3, duration_s=10, team="vc1")
    group, pods = workload.job_objects(job)
    assert group["spec"]["minMember"] == 1
    (pod,) = pods
    requests = pod["spec"]["containers"][0]["resources"]["requests"]
    assert requests["nvidia.com/gpu"] == "3"
    assert "rdma/ib" not in requests


def test_synthetic_is_deterministic_per_seed() -> None:
    a = list(workload.synthetic_jobs(seed=7, count=200))
    b = list(workload.synthetic_jobs(seed=7, count=200))
    c = list(workload.synthetic_jobs(seed=8, count=200))
    assert a == b
    assert a != c
    assert [j.submit_s for j in a] == sorted(j.submit_s for j in a)
    assert {j.team for j in a} == {"a", "b", "c"}
    assert any(j.gpus > 8 for j in a)
    assert any(j.gpus == 1 for j in a)


def test_synthetic_load_scales_with_the_cluster() -> None:
    small = workload.arrival_interval(gpus=512, load=0.9, median_duration_s=1800)
    large = workload.arrival_interval(gpus=60_000, load=0.9, median_duration_s=1800)
    assert small / large == pytest.approx(60_000 / 512)
    # Little's law over a long stretch: the offered GPU-seconds match the load asked for
    jobs = list(workload.synthetic_jobs(seed=3, count=40_000, gpus=4096, load=0.9))
    steady = [j for j in jobs if j.submit_s > 0]
    span = steady[-1].submit_s - steady[0].submit_s
    offered = sum(j.gpus * j.duration_s for j in steady) / span
    assert offered / 4096 == pytest.approx(0.9, rel=0.1)


def test_synthetic_starts_with_the_cluster_already_busy() -> None:
    jobs = list(workload.synthetic_jobs(seed=3, count=2_000, gpus=4096, load=0.5))
    at_once = [j for j in jobs if j.submit_s == 0]
    assert 2048 <= sum(j.gpus for j in at_once) < 2048 + 128
    assert jobs[len(at_once)].submit_s > 0
    legacy = list(workload.synthetic_jobs(seed=3, count=3))  # no gpus: the old pace
    assert legacy[0].submit_s == 0 and legacy[1].submit_s > 0


def job(job_id: str, submit_s: float, duration_s: float) -> Job:
    return Job(job_id=job_id, submit_s=submit_s, gpus=1, duration_s=duration_s, team="a")


def test_a_trace_starts_where_its_jobs_are() -> None:
    quiet = [job("early", 0, 10), job("long", 100, 5_000)]
    busy = [job(f"b{i}", 1_000 + i, 60) for i in range(30)]
    out = trace.from_busy_start([*busy, *quiet], window_s=100, min_jobs=20)
    assert out[0] == job("long", 0.0, 4_100.0)  # still running at the busy start: remains
    assert "early" not in {j.job_id for j in out}  # finished before: dropped
    assert [j.submit_s for j in out[1:4]] == [0.0, 1.0, 2.0]
    assert trace.from_busy_start(quiet, window_s=100) == quiet  # never busy: as it is
    sample = trace.from_busy_start(trace.read(trace.sample_path()))
    assert len(sample) == 2000 and sample[-1].submit_s < 2 * 86_400  # not 21 days


def test_the_philly_sample_starts_with_the_72_running_jobs_the_readme_promises() -> None:
    """tests/e2e/test_up_philly.py checks that `baton up` runs every one of them."""
    sample = trace.from_busy_start(trace.read(trace.sample_path()))
    assert sum(1 for j in sample if j.submit_s == 0) == 72
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "so it starts with 72 jobs running" in " ".join(readme.split())


@pytest.mark.parametrize("submitters", [1, 4])
async def test_submitters_create_that_many_jobs_at_once_each_in_its_own_order(
    submitters: int,
) -> None:
    """Through a webhook that answers only after a while, as a busy one does: ``n``
    submitters keep ``n`` jobs in flight; a job's group still comes before its pods,
    and a job the webhook refuses is skipped without holding the others."""
    store = Store()
    sim = build(store, nodes=0)
    in_flight, most, created = 0, 0, []

    async def slow_webhook(
        operation: str, res: Resource, obj: Obj, old: Obj | None, *, dry_run: bool = False
    ) -> Obj:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        name = obj["metadata"]["name"]
        if name.startswith("job-s3"):
            raise ApiError(403, "Forbidden", f"{name}: refused")
        created.append(name)
        return obj

    sim.admission = [slow_webhook]
    await sim.start()
    try:
        jobs = [Job(job_id=f"s{i}", submit_s=0.0, gpus=16, duration_s=600, team="a")
                for i in range(12)]  # fmt: skip
        sim.replay(jobs, speed=1.0, submitters=submitters)
        await until(lambda: sim.submitted == 11, what="the 11 jobs the webhook lets in")
    finally:
        await sim.stop()
    assert most == submitters
    for i in (0, 11):  # the group, then its two whole-node pods
        mine = [n for n in created if n.startswith(f"job-s{i}")]
        assert mine == [f"job-s{i}", f"job-s{i}-0", f"job-s{i}-1"], mine
    assert not [n for n in created if n.startswith("job-s3")]


async def test_metrics_show_a_replay_behind_its_trace_and_the_controllers_queue() -> None:
    """Six jobs due at once through a webhook that takes 50 ms an object: one submitter
    starts the later ones late, and says how late; the Job controller's queue holds the
    Jobs it has not made pods for yet. Once every job is in, the replay is behind by 0."""
    store = Store()
    sim = build(store, nodes=0)

    async def slow_webhook(
        operation: str, res: Resource, obj: Obj, old: Obj | None, *, dry_run: bool = False
    ) -> Obj:
        await asyncio.sleep(0.05)
        return obj

    sim.admission = [slow_webhook]
    registry = CollectorRegistry()
    registry.register(workload_metrics(sim))
    await sim.start()
    try:
        jobs = [Job(job_id=f"b{i}", submit_s=0.0, gpus=1, duration_s=600, team="a")
                for i in range(6)]  # fmt: skip
        sim.replay(jobs, speed=1.0, submit="controllers", submitters=1)

        def value(metric: str, **labels: str) -> float | None:
            return registry.get_sample_value(metric, labels)

        behind = "baton_simcluster_workload_behind_seconds"
        queued: list[float | None] = []  # the Job controller's queue, at each look

        def behind_with_a_queue() -> bool:
            queued.append(value("workqueue_depth", name="job"))
            return (value(behind) or 0.0) >= 0.15

        await until(behind_with_a_queue, what="the replay 0.15 s behind its trace")
        assert max(q or 0.0 for q in queued) >= 1, queued
        await until(lambda: sim.submitted == 6, what="the six jobs created")
        await until(lambda: value(behind) == 0.0, what="the replay done, behind by 0")
        submitted = value("baton_simcluster_workload_jobs_submitted_total")
        depths = {n: value("workqueue_depth", name=n)
                  for n in ("job", "jobset", "mpijob", "resource_claim")}  # fmt: skip
    finally:
        await sim.stop()
    assert submitted == 6
    assert None not in depths.values(), depths  # every controller's queue is exposed


def test_submitters_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match="submitters: expected >= 1, got 0"):
        build(Store(), nodes=0).replay([], submitters=0)
