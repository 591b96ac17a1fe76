"""Training jobs as users submit them: through the workload controllers.

A job larger than a node becomes a JobSet (one replicated job of Indexed Jobs of up to
``PODS_PER_JOB`` whole-node pods, ``baton.io/gang-members`` on the pod template so Baton
reads the whole JobSet as one gang) or, one job in three by its id, an MPIJob (a
launcher with no GPUs and whole-node workers; the MPI operator makes its PodGroup). A
job of a node or less becomes a ``batch/v1`` Job of one pod. The pods are the bare-pod
workload's (``workload.pod_spec``), labelled the same, and run for the job's duration:
JobSet and Job pods by their duration annotation, an MPIJob's by its launcher's (its
workers are deleted when the launcher ends, ``cleanPodPolicy: Running``), so every
controller marks its job finished.
"""

from __future__ import annotations

import zlib
from typing import Any, Literal

from baton.proto import keys
from baton.services.simcluster.world.workload import (
    DURATION_ANNOTATION,
    JOB_LABEL,
    TEAM_LABEL,
    Job,
    pod_gpus,
    pod_spec,
)

Obj = dict[str, Any]
Kind = Literal["Job", "JobSet", "MPIJob"]
PODS_PER_JOB = 8  # a JobSet's Jobs: at most this many pods each
JOBSET_RESTARTS = 3  # failurePolicy.maxRestarts: a gang evicted by Baton comes back
LAUNCHER_CPU, LAUNCHER_MEMORY_GI = 2, 8


def kind_of(job: Job, *, gpus_per_node: int = 8) -> Kind:
    """``Job`` for a node or less; of larger jobs one in three (by a checksum of the id,
    so the same trace gives the same kinds) ``MPIJob``, the others ``JobSet``."""
    if job.gpus <= gpus_per_node:
        return "Job"
    return "MPIJob" if zlib.crc32(job.job_id.encode()) % 3 == 0 else "JobSet"


def controlled_objects(
    job: Job, *, speed: float = 1.0, gpus_per_node: int = 8
) -> list[tuple[str, Obj]]:
    """(resource, object) to create, in order, for ``job``; durations divided by
    ``speed``."""
    kind = kind_of(job, gpus_per_node=gpus_per_node)
    shape = pod_gpus(job.gpus, gpus_per_node)
    duration = f"{job.duration_s / speed:.3f}"
    if kind == "JobSet":
        return [("jobsets", jobset(job, shape=shape, duration=duration))]
    if kind == "MPIJob":
        return [("mpijobs", mpijob(job, shape=shape, duration=duration))]
    return batch_job(job, shape=shape, duration=duration)


def jobset(job: Job, *, shape: list[int], duration: str) -> Obj:
    """One replicated job ``trainers`` of ``len(shape) / per_job`` Indexed Jobs, each of
    ``per_job`` pods (the largest divisor of the pod count up to ``PODS_PER_JOB``); any
    failed Job restarts the whole JobSet (up to ``JOBSET_RESTARTS`` times)."""
    per_job = max(d for d in range(1, PODS_PER_JOB + 1) if len(shape) % d == 0)
    notes = {DURATION_ANNOTATION: duration, keys.GANG_MEMBERS: str(len(shape))}
    spec = {"completionMode": "Indexed", "parallelism": per_job, "completions": per_job,
            "backoffLimit": 0, "template": _template(job, gpus=shape[0], multi_node=True,
                                                     notes=notes)}  # fmt: skip
    replicated = {"name": "trainers", "replicas": len(shape) // per_job, "template": {"spec": spec}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": _meta(job),
        "spec": {"failurePolicy": {"maxRestarts": JOBSET_RESTARTS}, "replicatedJobs": [replicated]},
    }


def mpijob(job: Job, *, shape: list[int], duration: str) -> Obj:
    """A launcher that runs for the job's duration and ``len(shape)`` workers; the MPI
    operator's PodGroup has them all (minMember = workers + 1)."""
    launcher = _template(job, gpus=0, multi_node=False, notes={DURATION_ANNOTATION: duration})
    launcher["spec"] = pod_spec(gpus=0, multi_node=False, cpu=LAUNCHER_CPU,
                                memory_gi=LAUNCHER_MEMORY_GI)  # fmt: skip
    worker = _template(job, gpus=shape[0], multi_node=True, notes={})
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": _meta(job),
        "spec": {
            "slotsPerWorker": shape[0],
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": launcher},
                "Worker": {"replicas": len(shape), "template": worker},
            },
        },
    }


def batch_job(job: Job, *, shape: list[int], duration: str) -> list[tuple[str, Obj]]:
    """A Job of ``len(shape)`` pods: one pod NonIndexed; several Indexed, one gang by a
    PodGroup (``minMember`` = its pods) named on the pod template, created first."""
    template = _template(job, gpus=shape[0], multi_node=len(shape) > 1,
                         notes={DURATION_ANNOTATION: duration})  # fmt: skip
    spec: Obj = {"parallelism": len(shape), "completions": len(shape), "template": template}
    out: list[tuple[str, Obj]] = []
    if len(shape) > 1:
        spec["completionMode"] = "Indexed"
        template["metadata"]["labels"][keys.POD_GROUP] = job.name
        group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                 "metadata": _meta(job), "spec": {"minMember": len(shape)}}  # fmt: skip
        out.append(("podgroups", group))
    body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": _meta(job), "spec": spec}
    return [*out, ("jobs", body)]


def _meta(job: Job) -> Obj:
    return {"name": job.name, "namespace": job.namespace, "labels": _labels(job)}


def _labels(job: Job) -> dict[str, str]:
    return {JOB_LABEL: job.job_id, TEAM_LABEL: job.team}


def _template(job: Job, *, gpus: int, multi_node: bool, notes: dict[str, str]) -> Obj:
    return {
        "metadata": {"labels": _labels(job), "annotations": dict(notes)},
        "spec": pod_spec(gpus=gpus, multi_node=multi_node),
    }
