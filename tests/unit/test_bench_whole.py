"""The whole-system bench reads every batch's lag from the runners' histogram."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from baton.libs.runner import metrics
from baton.services.simcluster.world import trace
from baton.services.simcluster.world.workload import Job
from tests.bench.bench_whole import behind, lag_buckets, offered, steady_trace, trace_jobs

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("buckets", "expected"),
    [
        ({0.05: 3, 0.1: 5, 5.0: 9, 10.0: 10, math.inf: 10}, (1, 10, "5-10")),  # one over 5 s
        ({0.05: 3, 0.1: 5, 5.0: 5, 10.0: 5, math.inf: 5}, (0, 5, "0.05-0.1")),
        ({0.05: 4, 5.0: 4, math.inf: 4}, (0, 4, "0-0.05")),
        ({}, (0, 0, "-")),  # the service published no histogram (yet)
    ],
)
def test_batches_over_five_seconds_and_the_worst_bucket(
    buckets: dict[float, float], expected: tuple[float, float, str]
) -> None:
    assert behind(buckets) == expected


def test_the_buckets_are_read_from_a_metrics_page_as_the_runner_writes_it() -> None:
    """The page is prometheus_client's own (it writes ``le`` before ``service``)."""
    registry = CollectorRegistry()
    histogram = Histogram(
        "baton_runner_batch_lag_seconds", "", ["service"], registry=registry,
        buckets=metrics.LAG_BUCKETS,
    )  # fmt: skip
    for lag in (0.01, 0.3, 7.0):
        histogram.labels(service="gang").observe(lag)
    found = lag_buckets(generate_latest(registry).decode())
    assert set(found) == {"gang"} and found["gang"][5.0] == 2 and found["gang"][math.inf] == 3
    assert behind(found["gang"]) == (1, 3, "5-10")


def test_the_steady_workload_asks_for_97_percent_of_the_gpus_in_jobs_that_never_end(
    tmp_path: Path,
) -> None:
    path = Path(steady_trace(tmp_path, 100))
    jobs = trace.from_busy_start(trace.read(path))  # as simcluster reads a trace file
    asked = sum(j.gpus for j in jobs)
    assert asked == int(0.97 * 800)
    assert {j.submit_s for j in jobs} == {0.0}
    assert min(j.duration_s for j in jobs) >= 10**8  # years at any --speed the bench uses
    assert {j.team for j in jobs} == {"a", "b", "c"}


def test_the_trace_offers_the_gpus_of_the_jobs_in_and_not_yet_ended() -> None:
    """At the last submitted job's time: jobs that came and would still run count; one
    that would have ended does not; jobs not submitted yet do not."""
    jobs = [Job(job_id="a", submit_s=0, gpus=8, duration_s=100, team="t"),
            Job(job_id="b", submit_s=10, gpus=4, duration_s=5, team="t"),
            Job(job_id="c", submit_s=50, gpus=2, duration_s=100, team="t"),
            Job(job_id="d", submit_s=200, gpus=1, duration_s=100, team="t")]  # fmt: skip
    assert offered(jobs, 0) == 0
    assert offered(jobs, 2) == 8 + 4  # at 10 s: b has just come
    assert offered(jobs, 3) == 8 + 2  # at 50 s: b ended at 15 s
    assert offered(jobs, 4) == 1  # at 200 s: a ended at 100, c at 150


@pytest.mark.parametrize("workload", ["synthetic", "llm"])
def test_the_trace_s_jobs_are_the_first_ones_simcluster_submits(workload: str) -> None:
    """As many as were submitted, in submit order, even from the endless synthetic mix."""
    jobs = trace_jobs(50, workload=workload, nodes=64, load="1.3")
    assert len(jobs) == 50
    assert [j.submit_s for j in jobs] == sorted(j.submit_s for j in jobs)
    assert trace_jobs(50, workload="/some/trace.csv", nodes=64, load="") == []
