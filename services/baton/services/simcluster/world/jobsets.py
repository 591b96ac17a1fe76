"""The JobSet controller (``jobset.x-k8s.io/v1alpha2``), inside the simulated cluster.

Each ``replicatedJobs[i]`` becomes ``replicas`` Jobs named ``<jobset>-<replicatedJob>-
<index>``, its template with the labels and annotations JobSet puts on Jobs and their
pods (``jobset.sigs.k8s.io/jobset-name``, ``replicatedjob-name``, ``replicatedjob-
replicas``, ``job-index``, ``job-global-index``, ``global-replicas``, ``job-key``,
``restart-attempt``, ``jobset-uid``) and the ``alpha.jobset.sigs.k8s.io/exclusive-
topology`` annotation of the JobSet or of the replicated Job's template (which wins).

- ``startupPolicy.startupPolicyOrder: InOrder`` creates a replicated job's Jobs once
  every Job of the one before is ready (all its pods ready or succeeded).
- A failed Job: ``failurePolicy.rules`` decide first (``FailJobSet``, ``RestartJobSet``,
  ``RestartJobSetAndIgnoreMaxRestarts``, matched by ``onJobFailureReasons`` and
  ``targetReplicatedJobs``); otherwise the JobSet restarts while ``restartsCountTowards
  Max`` is below ``maxRestarts``, and fails when it is not (no ``failurePolicy``: fails).
  A restart counts in ``status.restarts`` and deletes every Job of the attempt; the next
  attempt's Jobs (``restart-attempt`` = restarts) are created once they are gone.
- ``successPolicy``: ``All`` (default) or ``Any`` of the Jobs of ``targetReplicatedJobs``
  (default: all) complete -> ``Completed``; the Jobs still running are deleted.
- ``suspend`` goes to every Job (created suspended, suspended, resumed), condition
  ``Suspended`` (``SuspendedJobs``, then ``ResumeJobs``).
- Status: ``restarts``, ``restartsCountTowardsMax``, ``replicatedJobsStatus`` (ready,
  succeeded, failed, active, suspended Jobs per replicated job), ``terminalState`` and
  the ``Completed``, ``Failed``, ``StartupPolicyInProgress``/``StartupPolicyCompleted``
  conditions.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from baton.services.simcluster.world.controlling import (
    Controller,
    is_true,
    owner_reference,
    set_condition,
)

Obj = dict[str, Any]
PREFIX = "jobset.sigs.k8s.io/"
JOBSET_NAME = PREFIX + "jobset-name"
REPLICATED_JOB = PREFIX + "replicatedjob-name"
RESTART_ATTEMPT = PREFIX + "restart-attempt"
EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
_MESSAGES = {
    "FailedJobs": "jobset failed due to one or more job failures",
    "ReachedMaxRestarts": "jobset failed due to reaching max number of restarts",
    "FailJobSetFailurePolicyAction": "applying FailJobSet failure policy action",
}


class JobSets(Controller):
    resource = "jobsets"
    name = "jobset"
    kind = "JobSet"
    collects = ("jobs",)

    async def reconcile(self, jobset: Obj) -> None:
        status = copy.deepcopy(jobset.get("status") or {})
        if is_true(status, "Completed") or is_true(status, "Failed"):
            return
        ns, uid = jobset["metadata"].get("namespace", ""), jobset["metadata"]["uid"]
        attempt = status.get("restarts", 0)
        current: dict[str, Obj] = {}
        for job in self.owned("jobs", ns, uid):
            if int(job["metadata"]["labels"].get(RESTART_ATTEMPT, "0")) < attempt:
                self.delete("jobs", job)  # an earlier attempt's
            else:
                current[job["metadata"]["name"]] = job
        status["replicatedJobsStatus"] = _replicated_status(jobset, current)
        if self._failed(jobset, status, current) or self._succeeded(jobset, status, current):
            self.write_status(jobset, status)
            return
        self._suspend(jobset, status, current)
        wanted = self._startable(jobset, status)
        self.write_status(jobset, status)
        if len(current) < sum(len(v) for v in _jobs_of(jobset).values()):
            for job in wanted:
                if job["metadata"]["name"] not in current:
                    await self.create("jobs", job)

    def _suspend(self, jobset: Obj, status: Obj, current: dict[str, Obj]) -> None:
        """``spec.suspend`` goes to every Job (their controller stops or starts pods)."""
        suspended = bool(jobset["spec"].get("suspend"))
        if suspended:
            set_condition(status, "Suspended", "True", "SuspendedJobs", "jobset is suspended")
        elif is_true(status, "Suspended"):
            set_condition(status, "Suspended", "False", "ResumeJobs", "jobset is resumed")
        for job in current.values():
            if bool(job["spec"].get("suspend")) != suspended:
                meta = job["metadata"]

                def put(o: Obj) -> None:
                    o["spec"]["suspend"] = suspended

                self.store.mutate("jobs", meta.get("namespace"), meta["name"], put)

    def _failed(self, jobset: Obj, status: Obj, current: dict[str, Obj]) -> bool:
        failed = [j for j in current.values() if is_true(j.get("status") or {}, "Failed")]
        if not failed:
            return False
        policy = jobset["spec"].get("failurePolicy")
        action = _action(jobset, failed[0])
        reason = "FailJobSetFailurePolicyAction" if policy else "FailedJobs"
        counted = status.get("restartsCountTowardsMax", 0)
        most = (policy or {}).get("maxRestarts", 0)
        if action == "RestartJobSet" and counted >= most:
            action, reason = "FailJobSet", "ReachedMaxRestarts"
        if action == "FailJobSet":
            set_condition(status, "Failed", "True", reason, _MESSAGES[reason])
            status["terminalState"] = "Failed"
            self._delete_active(current)
            return True
        status["restarts"] = status.get("restarts", 0) + 1
        if action == "RestartJobSet":
            status["restartsCountTowardsMax"] = counted + 1
        for job in current.values():
            self.delete("jobs", job)
        return True

    def _succeeded(self, jobset: Obj, status: Obj, current: dict[str, Obj]) -> bool:
        policy = jobset["spec"].get("successPolicy") or {}
        targets = policy.get("targetReplicatedJobs") or list(_jobs_of(jobset))
        names = [name for rj in targets for name in _jobs_of(jobset).get(rj, ())]
        done = [is_true((current.get(n) or {}).get("status") or {}, "Complete") for n in names]
        ok = any(done) if policy.get("operator") == "Any" else bool(done) and all(done)
        if not ok:
            return False
        set_condition(status, "Completed", "True", "AllJobsCompleted",
                      "jobset completed successfully")  # fmt: skip
        status["terminalState"] = "Completed"
        self._delete_active(current)
        return True

    def _delete_active(self, current: dict[str, Obj]) -> None:
        """A finished JobSet deletes its Jobs that have not finished."""
        for job in current.values():
            s = job.get("status") or {}
            if not is_true(s, "Complete") and not is_true(s, "Failed"):
                self.delete("jobs", job)

    def _startable(self, jobset: Obj, status: Obj) -> list[Obj]:
        """The Jobs this attempt may have now (InOrder: up to the first not ready)."""
        in_order = (jobset["spec"].get("startupPolicy") or {}).get("startupPolicyOrder")
        out: list[Obj] = []
        ready = {s["name"]: s["ready"] + s["succeeded"] for s in status["replicatedJobsStatus"]}
        for rj in jobset["spec"].get("replicatedJobs") or ():
            out.extend(job_for(jobset, rj, i, restarts=status.get("restarts", 0))
                       for i in range(rj.get("replicas", 1)))  # fmt: skip
            if in_order == "InOrder" and ready.get(rj["name"], 0) < rj.get("replicas", 1):
                set_condition(status, "StartupPolicyInProgress", "True",
                              "InOrderStartupPolicyInProgress",
                              "in order startup policy is in progress")  # fmt: skip
                return out
        if in_order == "InOrder":
            reason = "InOrderStartupPolicyCompleted"
            message = "in order startup policy has completed"
            set_condition(status, "StartupPolicyInProgress", "False", reason, message)
            set_condition(status, "StartupPolicyCompleted", "True", reason, message)
        return out


def _jobs_of(jobset: Obj) -> dict[str, list[str]]:
    name = jobset["metadata"]["name"]
    return {
        rj["name"]: [f"{name}-{rj['name']}-{i}" for i in range(rj.get("replicas", 1))]
        for rj in jobset["spec"].get("replicatedJobs") or ()
    }


def _action(jobset: Obj, job: Obj) -> str:
    """The failure policy's action for failed ``job``: the first matching rule's, else
    RestartJobSet with a failurePolicy and FailJobSet without one."""
    policy = jobset["spec"].get("failurePolicy")
    if policy is None:
        return "FailJobSet"
    failed = next(c for c in job["status"]["conditions"] if c.get("type") == "Failed")
    rj = job["metadata"]["labels"].get(REPLICATED_JOB, "")
    for rule in policy.get("rules") or ():
        reasons, targets = rule.get("onJobFailureReasons"), rule.get("targetReplicatedJobs")
        if (not reasons or failed.get("reason") in reasons) and (not targets or rj in targets):
            return str(rule["action"])
    return "RestartJobSet"


def job_for(jobset: Obj, rj: Obj, index: int, *, restarts: int) -> Obj:
    """Job ``index`` of replicated job ``rj``, labelled as JobSet labels it."""
    meta = jobset["metadata"]
    ns, name = meta.get("namespace", ""), f"{meta['name']}-{rj['name']}-{index}"
    before = sum(r.get("replicas", 1) for r in _until(jobset, rj["name"]))
    marks = {
        JOBSET_NAME: meta["name"],
        REPLICATED_JOB: rj["name"],
        PREFIX + "replicatedjob-replicas": str(rj.get("replicas", 1)),
        PREFIX + "job-index": str(index),
        PREFIX + "job-global-index": str(before + index),
        PREFIX + "global-replicas": str(sum(len(v) for v in _jobs_of(jobset).values())),
        PREFIX + "job-key": hashlib.sha1(f"{ns}/{name}".encode()).hexdigest(),
        RESTART_ATTEMPT: str(restarts),
        PREFIX + "jobset-uid": meta["uid"],
    }
    template = copy.deepcopy(rj.get("template") or {})
    if jobset["spec"].get("suspend"):
        template.setdefault("spec", {})["suspend"] = True
    notes = dict(marks)
    job_notes = (template.get("metadata") or {}).get("annotations") or {}
    # the JobSet's, else the replicated Job's template (which wins, as upstream)
    if exclusive := job_notes.get(EXCLUSIVE) or (meta.get("annotations") or {}).get(EXCLUSIVE):
        notes[EXCLUSIVE] = exclusive
    pod = template.setdefault("spec", {}).setdefault("template", {})
    pod_meta = pod.setdefault("metadata", {})
    pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **marks}
    pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **notes}
    job_meta = template.get("metadata") or {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {**(job_meta.get("labels") or {}), **marks},
            "annotations": {**(job_meta.get("annotations") or {}), **notes},
            "ownerReferences": [owner_reference(jobset)],
        },
        "spec": template["spec"],
    }


def _until(jobset: Obj, name: str) -> list[Obj]:
    """The replicated jobs before ``name``."""
    out = []
    for rj in jobset["spec"].get("replicatedJobs") or ():
        if rj["name"] == name:
            break
        out.append(rj)
    return out


def _replicated_status(jobset: Obj, current: dict[str, Obj]) -> list[Obj]:
    out = []
    for rj in jobset["spec"].get("replicatedJobs") or ():
        counts = {"name": rj["name"], "ready": 0, "succeeded": 0, "failed": 0, "active": 0,
                  "suspended": 0}  # fmt: skip
        parallelism = (rj.get("template", {}).get("spec") or {}).get("parallelism", 1)
        for job in current.values():
            if job["metadata"]["labels"].get(REPLICATED_JOB) != rj["name"]:
                continue
            s = job.get("status") or {}
            if is_true(s, "Complete"):
                counts["succeeded"] += 1
            elif is_true(s, "Failed"):
                counts["failed"] += 1
            elif job["spec"].get("suspend"):
                counts["suspended"] += 1
            else:
                counts["active"] += 1
                if s.get("ready", 0) + s.get("succeeded", 0) >= parallelism:
                    counts["ready"] += 1
        out.append(counts)
    return out
