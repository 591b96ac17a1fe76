"""A Job's pods as the Job controller makes and judges them (Kubernetes batch/v1).

``pod_for`` builds a pod from the Job's template with the labels and annotations the
controller adds (``batch.kubernetes.io/job-name``, ``controller-uid``, and for Indexed
Jobs the completion index as annotation and label, ``JOB_COMPLETION_INDEX`` in every
container's env, hostname ``<job>-<index>``). ``failure_action`` applies the Job's
``podFailurePolicy`` to a failed pod: the first rule whose ``onExitCodes`` or
``onPodConditions`` match decides (``FailJob``, ``FailIndex``, ``Ignore``, ``Count``);
no match counts the failure. Pure functions.
"""

from __future__ import annotations

import copy
import random
import string
from typing import Any

Obj = dict[str, Any]
JOB_NAME = "batch.kubernetes.io/job-name"
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
INDEX = "batch.kubernetes.io/job-completion-index"
INDEX_FAILURES = "batch.kubernetes.io/job-index-failure-count"
INDEX_ENV = "JOB_COMPLETION_INDEX"
DISRUPTION_TARGET = "DisruptionTarget"
_SUFFIX = string.ascii_lowercase + string.digits


def pod_for(job: Obj, *, index: int | None, failures: int, rng: random.Random) -> Obj:
    """A new pod of ``job`` (for completion ``index`` when Indexed)."""
    meta, template = job["metadata"], copy.deepcopy(job["spec"].get("template") or {})
    name, uid = meta["name"], meta["uid"]
    pod_meta = template.get("metadata") or {}
    labels = {**(pod_meta.get("labels") or {}), CONTROLLER_UID: uid, JOB_NAME: name,
              "controller-uid": uid, "job-name": name}  # fmt: skip
    notes = dict(pod_meta.get("annotations") or {})
    spec = template.get("spec") or {}
    prefix = f"{name}-"
    if index is not None:
        labels[INDEX] = notes[INDEX] = str(index)
        if failures:
            notes[INDEX_FAILURES] = str(failures)
        prefix = f"{name}-{index}-"
        spec.setdefault("hostname", f"{name}-{index}")
        for container in (*spec.get("containers", ()), *spec.get("initContainers", ())):
            env = [e for e in container.get("env") or () if e.get("name") != INDEX_ENV]
            ref = {"fieldPath": f"metadata.annotations['{INDEX}']"}
            container["env"] = [*env, {"name": INDEX_ENV, "valueFrom": {"fieldRef": ref}}]
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
             "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": prefix + "".join(rng.choice(_SUFFIX) for _ in range(5)),
            "namespace": meta.get("namespace"),
            "labels": labels,
            "annotations": notes,
            "ownerReferences": [owner],
        },
        "spec": spec,
    }


def index_of(pod: Obj) -> int | None:
    value = (pod["metadata"].get("annotations") or {}).get(INDEX)
    return int(value) if value is not None and value.isdigit() else None


def index_failures(pod: Obj) -> int:
    value = (pod["metadata"].get("annotations") or {}).get(INDEX_FAILURES, "0")
    return int(value) if value.isdigit() else 0


def failure_action(job: Obj, pod: Obj) -> tuple[str, int]:
    """The ``podFailurePolicy`` action for failed ``pod`` and the rule's index (-1: none)."""
    policy = job["spec"].get("podFailurePolicy") or {}
    for at, rule in enumerate(policy.get("rules") or ()):
        if _matches(rule, pod):
            return rule.get("action", "Count"), at
    return "Count", -1


def failure_message(pod: Obj, rule: Obj, at: int) -> str:
    """Upstream's message for a FailJob rule, naming the pod and the rule."""
    where = f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"
    if conditions := rule.get("onPodConditions"):
        kind = conditions[0].get("type")
        return f"Pod {where} has condition {kind} matching {rule['action']} rule at index {at}"
    name, code = next(iter(_exit_codes(pod, rule.get("onExitCodes") or {})), ("", 0))
    return (
        f"Container {name} for pod {where} failed with exit code {code} matching "
        f"{rule['action']} rule at index {at}"
    )


def _matches(rule: Obj, pod: Obj) -> bool:
    if on_codes := rule.get("onExitCodes"):
        return bool(_exit_codes(pod, on_codes))
    status = pod.get("status") or {}
    for wanted in rule.get("onPodConditions") or ():
        for found in status.get("conditions") or ():
            same = found.get("type") == wanted.get("type")
            if same and found.get("status") == wanted.get("status", "True"):
                return True
    return False


def _exit_codes(pod: Obj, on_codes: Obj) -> list[tuple[str, int]]:
    """Exit codes of the pod's terminated containers the ``onExitCodes`` rule matches."""
    operator, values = on_codes.get("operator"), set(on_codes.get("values") or ())
    only = on_codes.get("containerName")
    found = []
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        terminated = (status.get("state") or {}).get("terminated")
        if terminated is None or (only and status.get("name") != only):
            continue
        code = terminated.get("exitCode", 0)
        if code != 0 and (code in values) == (operator == "In"):
            found.append((status.get("name", ""), code))
    return found


def ranges(indexes: set[int]) -> str:
    """``{0, 1, 2, 5}`` -> ``"0-2,5"`` (``status.completedIndexes``' form)."""
    out: list[str] = []
    for i in sorted(indexes):
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ",".join(out)


def parse_ranges(text: str) -> set[int]:
    found: set[int] = set()
    for part in filter(None, (text or "").split(",")):
        low, _, high = part.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found
