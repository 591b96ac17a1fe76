"""Training jobs, and the PodGroup plus pods each one becomes.

A job asking for more GPUs than a node has becomes whole-node pods
(``ceil(gpus / gpus_per_node)`` pods of ``gpus_per_node`` GPUs, each with the node's
InfiniBand NICs); a smaller job is one pod with its GPUs. Every job is a gang: a
scheduler-plugins PodGroup with ``minMember`` = its pod count, pods labelled
``scheduling.x-k8s.io/pod-group`` and scheduled by ``baton``. Its team ``vc`` becomes
the namespace ``team-<vc>``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Any

import msgspec

from baton.proto.k8s import GPU, POD_GROUP_LABEL, SCHEDULER_NAME

DURATION_ANNOTATION = "sim.baton.io/duration-seconds"
JOB_LABEL = "sim.baton.io/job"
TEAM_LABEL = "sim.baton.io/team"  # the trace's vc; baton.io/team is Baton's to set
CPU_PER_GPU = 20  # cores; an 8-GPU pod asks 160 of an HGX node's 192
MEMORY_PER_GPU_GI = 200

Obj = dict[str, Any]


class Job(msgspec.Struct, frozen=True, kw_only=True):
    job_id: str
    submit_s: float  # seconds after the first job
    gpus: int
    duration_s: float
    team: str

    @property
    def namespace(self) -> str:
        return f"team-{self.team}"

    @property
    def name(self) -> str:
        return f"job-{self.job_id}"


def pod_gpus(gpus: int, gpus_per_node: int) -> list[int]:
    """GPUs of each pod: ``pod_gpus(20, 8) == [8, 8, 8]``, ``pod_gpus(4, 8) == [4]``."""
    if gpus <= gpus_per_node:
        return [gpus]
    return [gpus_per_node] * math.ceil(gpus / gpus_per_node)


def job_objects(job: Job, *, speed: float = 1.0, gpus_per_node: int = 8) -> tuple[Obj, list[Obj]]:
    """The PodGroup and pods of ``job``; durations are divided by ``speed``."""
    shape = pod_gpus(job.gpus, gpus_per_node)
    labels = {JOB_LABEL: job.job_id, TEAM_LABEL: job.team}
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": job.name, "namespace": job.namespace, "labels": labels},
        "spec": {"minMember": len(shape)},
    }
    duration = f"{job.duration_s / speed:.3f}"
    pods = [
        _pod(job, index=i, gpus=g, multi_node=len(shape) > 1, labels=labels, duration=duration)
        for i, g in enumerate(shape)
    ]
    return group, pods


def _pod(
    job: Job, *, index: int, gpus: int, multi_node: bool, labels: dict[str, str], duration: str
) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job.name}-{index}",
            "namespace": job.namespace,
            "labels": {**labels, POD_GROUP_LABEL: job.name},
            "annotations": {DURATION_ANNOTATION: duration},
        },
        "spec": pod_spec(gpus=gpus, multi_node=multi_node),
    }


def pod_spec(*, gpus: int, multi_node: bool, cpu: int = 0, memory_gi: int = 0) -> Obj:
    """A trainer's pod spec: ``gpus`` GPUs with 20 cores and 200 GiB each (or ``cpu``
    cores and ``memory_gi`` GiB when given: a launcher with no GPUs), the node's
    InfiniBand NICs when it is one of several nodes, scheduled by Baton, never restarted
    in place."""
    requests = {
        GPU: str(gpus),
        "cpu": str(cpu or CPU_PER_GPU * gpus),
        "memory": f"{memory_gi or MEMORY_PER_GPU_GI * gpus}Gi",
    }
    if multi_node and gpus:
        requests["rdma/ib"] = str(gpus)
    return {
        "schedulerName": SCHEDULER_NAME,
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "trainer",
                "image": "sim.baton.io/trainer:latest",
                "resources": {"requests": requests, "limits": {GPU: str(gpus)}},
            }
        ],
    }


# Synthetic mix: (weight, pods, gpus per pod) - mostly small jobs, a tail of big gangs,
# shaped like the Philly trace's GPU-time split.
SYNTHETIC_SHAPES: tuple[tuple[float, int, int], ...] = (
    (0.55, 1, 1),
    (0.10, 1, 2),
    (0.10, 1, 4),
    (0.10, 1, 8),
    (0.08, 2, 8),
    (0.04, 4, 8),
    (0.02, 8, 8),
    (0.01, 16, 8),
)


def mean_gpus() -> float:
    """GPUs of the average synthetic job."""
    total = sum(w for w, _, _ in SYNTHETIC_SHAPES)
    return sum(w * pods * per_pod for w, pods, per_pod in SYNTHETIC_SHAPES) / total


def arrival_interval(*, gpus: int, load: float, median_duration_s: float) -> float:
    """Mean seconds between jobs that keep ``load`` of ``gpus`` busy (Little's law: busy
    GPUs = arrival rate x mean duration x GPUs per job; durations are log-normal, sigma 1)."""
    if gpus <= 0 or load <= 0:
        raise ValueError("gpus and load must be > 0")
    mean_duration = median_duration_s * math.exp(0.5)
    return mean_gpus() * mean_duration / (load * gpus)


def synthetic_jobs(
    *,
    seed: int,
    count: int | None = None,
    teams: tuple[str, ...] = ("a", "b", "c"),
    mean_interval_s: float = 30.0,
    median_duration_s: float = 1800.0,
    gpus: int | None = None,
    load: float = 0.9,
) -> Iterator[Job]:
    """A seeded, reproducible stream of jobs (endless when ``count`` is None).

    With ``gpus`` (the cluster's) the stream is sized to the cluster: jobs arrive often
    enough to keep ``load`` of those GPUs busy, and the first ones, summing to that load,
    are all submitted at once, so the cluster starts busy rather than filling over an
    hour. Without it jobs arrive every ``mean_interval_s`` on average.
    """
    rng = random.Random(seed)
    weights = [w for w, _, _ in SYNTHETIC_SHAPES]
    if gpus:
        mean_interval_s = arrival_interval(
            gpus=gpus, load=load, median_duration_s=median_duration_s
        )
    backlog = load * gpus if gpus else 0.0  # GPUs submitted at t=0
    at = 0.0
    index = 0
    while count is None or index < count:
        _, pods, per_pod = rng.choices(SYNTHETIC_SHAPES, weights)[0]
        duration = median_duration_s * math.exp(rng.gauss(0.0, 1.0))
        yield Job(
            job_id=f"s{index}",
            submit_s=round(at, 3),
            gpus=pods * per_pod,
            duration_s=round(max(1.0, duration), 3),
            team=rng.choice(teams),
        )
        backlog -= pods * per_pod
        if backlog <= 0:
            at += rng.expovariate(1.0 / mean_interval_s)
        index += 1
