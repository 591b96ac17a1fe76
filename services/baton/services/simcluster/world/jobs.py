"""The Job controller (Kubernetes ``batch/v1`` Job), inside the simulated cluster.

What it does, as upstream's documentation of each field says (docs/simcluster.md,
"Workload controllers"): it keeps ``parallelism`` pods running until ``completions``
pods succeeded (NonIndexed) or each index ``0..completions-1`` has one that did
(Indexed); a pod that fails, or is deleted before it succeeded, counts as failed and is
replaced (at once, or once it is gone when ``podReplacementPolicy`` is ``Failed``, the
default with a ``podFailurePolicy``); ``podFailurePolicy`` rules decide first
(``FailJob`` fails the Job, ``Ignore`` does not count the failure, ``Count`` does,
``FailIndex`` fails the index); more failures than ``backoffLimit`` (or than
``backoffLimitPerIndex`` for one index) fail the Job; ``suspend`` deletes its active
pods and resuming starts them again. Status: ``active``, ``ready``, ``succeeded``,
``failed``, ``terminating``, ``completedIndexes``, ``failedIndexes``, ``startTime``,
``completionTime`` and the ``Suspended``, ``SuccessCriteriaMet``/``Complete`` and
``FailureTarget``/``Failed`` conditions. No backoff delay between replacements.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from typing import Any

from baton.services.simcluster.clock import timestamp
from baton.services.simcluster.world import jobpods
from baton.services.simcluster.world.controlling import (
    Controller,
    controller_uid,
    is_true,
    set_condition,
)

Obj = dict[str, Any]
DEFAULT_BACKOFF_LIMIT = 6


@dataclass(slots=True)
class Book:
    """What the controller remembers of one Job (upstream keeps it in pod finalizers)."""

    counted: set[str] = field(default_factory=set)  # pod uids already in the status
    gone: dict[str, Obj] = field(default_factory=dict)  # deleted pods not yet counted
    index_failures: dict[int, int] = field(default_factory=dict)  # counted, per index


@dataclass(slots=True)
class Pods:
    """A Job's pods, sorted by what they are now."""

    active: list[Obj] = field(default_factory=list)
    terminating: list[Obj] = field(default_factory=list)
    finished: list[Obj] = field(default_factory=list)  # Succeeded or Failed, or gone


class Jobs(Controller):
    resource = "jobs"
    name = "job"
    workers = 5  # kube-controller-manager's --concurrent-job-syncs default
    kind = "Job"
    collects = ("pods",)

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._books: dict[str, Book] = {}
        self._rng = random.Random(0)

    def owned_changed(self, event: str, res: str, obj: Obj) -> None:
        book = self._books.get(controller_uid(obj))
        if res == "pods" and event == "DELETED" and book is not None:
            book.gone[obj["metadata"]["uid"]] = obj

    def forget(self, uid: str) -> None:
        self._books.pop(uid, None)

    async def reconcile(self, job: Obj) -> None:
        status = copy.deepcopy(job.get("status") or {})
        uid = job["metadata"]["uid"]
        book = self._books.setdefault(uid, Book())
        pods = self._sort(job, book)
        if finished(status):
            self._delete_all(pods.active, book)
            return
        self._count(job, status, pods.finished, book)
        self._conclude(job, status, pods)
        if finished(status) or self._suspend(job, status):
            self._delete_all(pods.active, book)
            pods.active = []
        status.update(active=len(pods.active), terminating=len(pods.terminating),
                      ready=sum(1 for p in pods.active if _ready(p)))  # fmt: skip
        self.write_status(job, status)
        if not finished(status) and not job["spec"].get("suspend"):
            await self._create(job, status, pods, book)

    def _sort(self, job: Obj, book: Book) -> Pods:
        pods = Pods()
        ns = job["metadata"].get("namespace", "")
        for pod in self.owned("pods", ns, job["metadata"]["uid"]):
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                pods.finished.append(pod)
            elif pod["metadata"].get("deletionTimestamp"):
                pods.terminating.append(pod)
                if not _only_failed(job):  # counted as failed while it terminates
                    pods.finished.append(pod)
            else:
                pods.active.append(pod)
        pods.finished.extend(book.gone.values())
        book.gone.clear()
        return pods

    def _count(self, job: Obj, status: Obj, finished_pods: list[Obj], book: Book) -> None:
        """Step 1: each finished pod, once, into the status (and the policy's verdict)."""
        spec = job["spec"]
        completed = jobpods.parse_ranges(status.get("completedIndexes", ""))
        failed_indexes = jobpods.parse_ranges(status.get("failedIndexes", ""))
        for pod in finished_pods:
            if pod["metadata"]["uid"] in book.counted:
                continue
            book.counted.add(pod["metadata"]["uid"])
            index = jobpods.index_of(pod)
            if (pod.get("status") or {}).get("phase") == "Succeeded":
                status["succeeded"] = status.get("succeeded", 0) + 1
                if index is not None:
                    completed.add(index)
                continue
            action, at = jobpods.failure_action(job, pod)
            if action == "Ignore":
                continue
            status["failed"] = status.get("failed", 0) + 1
            if action == "FailJob":
                rule = spec["podFailurePolicy"]["rules"][at]
                fail(status, "PodFailurePolicy", jobpods.failure_message(pod, rule, at))
            if index is not None:
                book.index_failures[index] = book.index_failures.get(index, 0) + 1
            per_index = spec.get("backoffLimitPerIndex")
            if index is not None and per_index is not None:
                over = book.index_failures[index] > per_index
                if action == "FailIndex" or over:
                    failed_indexes.add(index)
        if completed:
            status["completedIndexes"] = jobpods.ranges(completed)
        if spec.get("backoffLimitPerIndex") is not None:
            status["failedIndexes"] = jobpods.ranges(failed_indexes)

    def _conclude(self, job: Obj, status: Obj, pods: Pods) -> None:
        """Step 2: success or failure of the whole Job."""
        if finished(status):
            return
        spec = job["spec"]
        completions = spec.get("completions")
        done = status.get("succeeded", 0)
        if _indexed(job):
            completed = jobpods.parse_ranges(status.get("completedIndexes", ""))
            failed_indexes = jobpods.parse_ranges(status.get("failedIndexes", ""))
            most = spec.get("maxFailedIndexes")
            if most is not None and len(failed_indexes) > most:
                message = "Job has exceeded the specified maximal number of failed indexes"
                fail(status, "MaxFailedIndexesExceeded", message)
                return
            if len(completed | failed_indexes) >= completions and failed_indexes:
                fail(status, "FailedIndexes", "Job has failed indexes")
                return
            succeeded = len(completed) >= completions
        elif completions is None:
            succeeded = done > 0 and not pods.active
        else:
            succeeded = done >= completions
        if succeeded:
            message = "Reached expected number of succeeded pods"
            for kind in ("SuccessCriteriaMet", "Complete"):
                set_condition(status, kind, "True", "CompletionsReached", message)
            status["completionTime"] = timestamp()
            return
        limit = spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)
        if spec.get("backoffLimitPerIndex") is None and status.get("failed", 0) > limit:
            fail(status, "BackoffLimitExceeded", "Job has reached the specified backoff limit")

    def _suspend(self, job: Obj, status: Obj) -> bool:
        """Step 3: ``spec.suspend``; True while the Job is suspended."""
        suspended = bool(job["spec"].get("suspend"))
        was = is_true(status, "Suspended")
        if suspended and not was:
            set_condition(status, "Suspended", "True", "JobSuspended", "Job suspended")
        elif was and not suspended:
            set_condition(status, "Suspended", "False", "JobResumed", "Job resumed")
            status.pop("startTime", None)
        if not suspended:
            status.setdefault("startTime", timestamp())
        return suspended

    async def _create(self, job: Obj, status: Obj, pods: Pods, book: Book) -> None:
        """Step 4: new pods where the Job wants more than it has."""
        spec = job["spec"]
        parallelism = spec.get("parallelism", 1)
        busy = [*pods.active, *(pods.terminating if _only_failed(job) else ())]
        room = parallelism - len(busy)
        if room <= 0:
            return
        wanted: list[tuple[int | None, int]] = []  # (index, failures so far)
        if _indexed(job):
            done = jobpods.parse_ranges(status.get("completedIndexes", ""))
            done |= jobpods.parse_ranges(status.get("failedIndexes", ""))
            taken = {jobpods.index_of(p) for p in busy}
            free = [i for i in range(spec["completions"]) if i not in done | taken]
            wanted = [(i, book.index_failures.get(i, 0)) for i in free[:room]]
        else:
            completions = spec.get("completions")
            left = parallelism if completions is None else completions - status.get("succeeded", 0)
            if completions is None and status.get("succeeded", 0):
                left = 0
            wanted = [(None, 0)] * max(0, min(room, left - len(busy)))
        for index, failures in wanted:
            pod = jobpods.pod_for(job, index=index, failures=failures, rng=self._rng)
            await self.create("pods", pod)

    def _delete_all(self, pods: list[Obj], book: Book) -> None:
        """Pods the Job stops (suspended, finished): they do not count as failures."""
        for pod in pods:
            book.counted.add(pod["metadata"]["uid"])
            self.delete("pods", pod)


def finished(status: Obj) -> bool:
    return is_true(status, "Complete") or is_true(status, "Failed")


def fail(status: Obj, reason: str, message: str) -> None:
    for kind in ("FailureTarget", "Failed"):
        set_condition(status, kind, "True", reason, message)


def _indexed(job: Obj) -> bool:
    return bool(job["spec"].get("completionMode") == "Indexed")


def _only_failed(job: Obj) -> bool:
    """``podReplacementPolicy: Failed`` (the default with a ``podFailurePolicy``)."""
    spec = job["spec"]
    default = "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    return bool(spec.get("podReplacementPolicy", default) == "Failed")


def _ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
