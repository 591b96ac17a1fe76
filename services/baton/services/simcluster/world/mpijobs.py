"""The MPI operator (``kubeflow.org/v2beta1`` MPIJob), inside the simulated cluster.

As the v2 operator does: ``mpiReplicaSpecs.Worker`` becomes ``replicas`` pods named
``<job>-worker-<i>`` owned by the MPIJob (a deleted one is created again),
``mpiReplicaSpecs.Launcher`` one batch/v1 Job ``<job>-launcher`` (its pods are the Job
controller's), created at once (``launcherCreationPolicy: AtStartup``, the default) or
once every worker is ready (``WaitForWorkersReady``). Pods are labelled
``training.kubeflow.org/job-name``, ``operator-name: mpi-operator``, ``job-role``
(``launcher``/``worker``) and ``replica-index``. With gang scheduling on (the operator's
``--gang-scheduling=scheduler-plugins-scheduler``, always on here) it creates the
scheduler-plugins ``PodGroup`` named after the MPIJob: ``minMember`` =
``runPolicy.schedulingPolicy.minAvailable``, else workers + launcher; ``minResources`` =
``schedulingPolicy.minResources``, else the requests of the launcher and the workers;
``scheduleTimeoutSeconds`` copied; every pod carries ``scheduling.x-k8s.io/pod-group``.
The launcher Job's outcome is the MPIJob's (``Succeeded``/``Failed`` conditions);
``runPolicy.cleanPodPolicy`` (``None`` by default, ``Running``, ``All``) says which
workers go when it ends. Status: ``replicaStatuses`` (``Launcher``, ``Worker``:
active, succeeded, failed), ``startTime``, ``completionTime`` and the ``Created``,
``Running``, ``Succeeded``, ``Failed`` conditions.
"""

from __future__ import annotations

import copy
from typing import Any

from baton.proto import keys
from baton.services.simcluster.clock import timestamp
from baton.services.simcluster.world import quantities
from baton.services.simcluster.world.controlling import (
    Controller,
    condition,
    is_true,
    owner_reference,
    set_condition,
)

Obj = dict[str, Any]
PREFIX = "training.kubeflow.org/"
JOB_NAME = PREFIX + "job-name"
ROLE = PREFIX + "job-role"


class MPIJobs(Controller):
    resource = "mpijobs"
    name = "mpijob"
    kind = "MPIJob"
    collects = ("pods", "jobs", "podgroups")

    async def reconcile(self, mpijob: Obj) -> None:
        status = copy.deepcopy(mpijob.get("status") or {})
        meta = mpijob["metadata"]
        ns, name, uid = meta.get("namespace", ""), meta["name"], meta["uid"]
        specs = mpijob["spec"].get("mpiReplicaSpecs") or {}
        workers = {p["metadata"]["name"]: p for p in self.owned("pods", ns, uid)}
        launcher = next(iter(self.owned("jobs", ns, uid)), None)
        launched = (launcher or {}).get("status") or {}
        if is_true(status, "Succeeded") or is_true(status, "Failed"):
            self._clean(mpijob, workers)
            return
        _observe(mpijob, status, workers, launched)
        self.write_status(mpijob, status)
        if "completionTime" in status:
            self._clean(mpijob, workers)
            return
        if not self.owned("podgroups", ns, uid):
            await self.create("podgroups", pod_group(mpijob))
        count = (specs.get("Worker") or {}).get("replicas", 0)
        for i in range(count):
            if f"{name}-worker-{i}" not in workers:
                await self.create("pods", worker(mpijob, i))
        policy = mpijob["spec"].get("launcherCreationPolicy", "AtStartup")
        all_ready = len(workers) == count and all(_ready(p) for p in workers.values())
        if launcher is None and "Launcher" in specs and (policy == "AtStartup" or all_ready):
            await self.create("jobs", launcher_job(mpijob))

    def _clean(self, mpijob: Obj, workers: dict[str, Obj]) -> None:
        policy = (mpijob["spec"].get("runPolicy") or {}).get("cleanPodPolicy", "None")
        for pod in workers.values():
            if policy == "All" or (policy == "Running" and _active(pod)):
                self.delete("pods", pod)


def _observe(mpijob: Obj, status: Obj, workers: dict[str, Obj], launched: Obj) -> None:
    """The MPIJob's status from its workers and its launcher Job's status."""
    meta = mpijob["metadata"]
    ns, name = meta.get("namespace", ""), meta["name"]
    set_condition(status, "Created", "True", "MPIJobCreated", f"MPIJob {ns}/{name} is created.")
    status.setdefault("startTime", timestamp())
    status["replicaStatuses"] = {
        "Launcher": _counts(launched),
        "Worker": {"active": sum(1 for p in workers.values() if _active(p))},
    }
    if is_true(launched, "Complete"):
        message = f"MPIJob {ns}/{name} successfully completed."
        set_condition(status, "Succeeded", "True", "MPIJobSucceeded", message)
        set_condition(status, "Running", "False", "MPIJobSucceeded", message)
        status["completionTime"] = timestamp()
    elif is_true(launched, "Failed"):
        found = condition(launched, "Failed") or {}
        set_condition(status, "Failed", "True", "MPIJobFailed", found.get("message", ""))
        set_condition(status, "Running", "False", "MPIJobFailed", found.get("message", ""))
        status["completionTime"] = timestamp()
    elif launched.get("active", 0) and all(_ready(p) for p in workers.values()):
        message = f"MPIJob {ns}/{name} is running."
        set_condition(status, "Running", "True", "MPIJobRunning", message)


def _labels(mpijob: Obj, role: str, index: int) -> dict[str, str]:
    name = mpijob["metadata"]["name"]
    return {JOB_NAME: name, PREFIX + "operator-name": "mpi-operator", ROLE: role,
            PREFIX + "replica-index": str(index), keys.POD_GROUP: name}  # fmt: skip


def _template(mpijob: Obj, role: str, index: int) -> Obj:
    spec = (mpijob["spec"].get("mpiReplicaSpecs") or {}).get(role.capitalize()) or {}
    template = copy.deepcopy(spec.get("template") or {})
    meta = template.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **_labels(mpijob, role, index)}
    return template


def worker(mpijob: Obj, index: int) -> Obj:
    meta = mpijob["metadata"]
    template = _template(mpijob, "worker", index)
    name = f"{meta['name']}-worker-{index}"
    spec = template.get("spec") or {}
    spec.setdefault("hostname", name)
    spec.setdefault("subdomain", meta["name"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **template["metadata"],
            "name": name,
            "namespace": meta.get("namespace"),
            "ownerReferences": [owner_reference(mpijob)],
        },
        "spec": spec,
    }


def launcher_job(mpijob: Obj) -> Obj:
    meta = mpijob["metadata"]
    run = mpijob["spec"].get("runPolicy") or {}
    job_spec: Obj = {"template": _template(mpijob, "launcher", 0), "parallelism": 1,
                     "completions": 1}  # fmt: skip
    if "backoffLimit" in run:
        job_spec["backoffLimit"] = run["backoffLimit"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{meta['name']}-launcher",
            "namespace": meta.get("namespace"),
            "labels": _labels(mpijob, "launcher", 0),
            "ownerReferences": [owner_reference(mpijob)],
        },
        "spec": job_spec,
    }


def pod_group(mpijob: Obj) -> Obj:
    """The scheduler-plugins PodGroup the operator makes for gang scheduling."""
    meta = mpijob["metadata"]
    specs = mpijob["spec"].get("mpiReplicaSpecs") or {}
    policy = (mpijob["spec"].get("runPolicy") or {}).get("schedulingPolicy") or {}
    members = {role: (specs.get(role) or {}).get("replicas", 1 if role == "Launcher" else 0)
               for role in ("Launcher", "Worker") if role in specs}  # fmt: skip
    spec: Obj = {"minMember": policy.get("minAvailable", sum(members.values()))}
    spec["minResources"] = policy.get("minResources") or _requests(specs, members)
    if "scheduleTimeoutSeconds" in policy:
        spec["scheduleTimeoutSeconds"] = policy["scheduleTimeoutSeconds"]
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "ownerReferences": [owner_reference(mpijob)],
        },
        "spec": spec,
    }


def _requests(specs: Obj, members: dict[str, int]) -> dict[str, str]:
    total: dict[str, int] = {}
    for role, count in members.items():
        asks = quantities.pod_requests(specs[role].get("template") or {})
        for name, amount in asks.items():
            total[name] = total.get(name, 0) + amount * count
    return {k: (f"{v}m" if k == "cpu" else str(v)) for k, v in total.items() if v}


def _counts(job_status: Obj) -> Obj:
    return {k: job_status.get(k, 0) for k in ("active", "succeeded", "failed")}


def _active(pod: Obj) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def _ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
