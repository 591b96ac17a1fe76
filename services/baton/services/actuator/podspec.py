"""Pod bodies: from a PodTemplate action, and an unbound copy of a live pod (a gang
rollback, a RecreatePod)."""

from __future__ import annotations

import copy
from typing import Any

from baton.proto.actions import PodTemplate
from baton.proto.keys import PLACEMENT_MARKS, RECREATED_FROM

Obj = dict[str, Any]

# What a copy keeps of the old pod's metadata (an allow-list): everything the API
# server assigns (uid, resourceVersion, creationTimestamp, generation, managedFields,
# deletionTimestamp, ...) is dropped, and so is generateName (the copy keeps the name).
KEPT_METADATA = ("name", "namespace", "labels", "annotations", "ownerReferences", "finalizers")
# What a copy drops of the spec: the binding, and what the API refuses on create.
DROPPED_SPEC = ("nodeName", "ephemeralContainers")


def from_template(t: PodTemplate) -> Obj:
    meta: Obj = {"namespace": t.namespace}
    if t.name:
        meta["name"] = t.name
    if t.generate_name:
        meta["generateName"] = t.generate_name
    if t.labels:
        meta["labels"] = dict(t.labels)
    if t.annotations:
        meta["annotations"] = dict(t.annotations)
    container: Obj = {"name": "main", "image": t.image}
    if t.command:
        container["command"] = list(t.command)
    if t.requests:
        quantities = {k: (f"{v}m" if k == "cpu" else str(v)) for k, v in t.requests.items()}
        container["resources"] = {"requests": quantities, "limits": _limits(quantities)}
    if t.restricted:
        container["securityContext"] = {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }
    spec: Obj = {"containers": [container]}
    if t.restricted:
        spec["securityContext"] = {
            "runAsNonRoot": True,
            "runAsUser": 65535,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
    optional: Obj = {
        "priorityClassName": t.priority_class_name,
        "priority": t.priority,
        "schedulerName": t.scheduler_name,
        "restartPolicy": t.restart_policy,
        "nodeName": t.node_name,
        "nodeSelector": dict(t.node_selector) or None,
        "tolerations": [_toleration(x) for x in t.tolerations] or None,
    }
    spec.update({k: v for k, v in optional.items() if v not in ("", None)})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _limits(requests: dict[str, str]) -> dict[str, str]:
    """Extended resources (GPUs) must have limits equal to requests."""
    return {k: v for k, v in requests.items() if "/" in k}


def _toleration(t: Any) -> Obj:
    out = {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect}
    return {k: v for k, v in out.items() if v}


def has_controller(pod: Obj) -> bool:
    refs = pod.get("metadata", {}).get("ownerReferences") or []
    return any(ref.get("controller") for ref in refs)


def unbound_copy(pod: Obj) -> Obj:
    """The pod as its author wrote it, unbound, annotated with the uid it replaces.

    Spec and metadata are kept whole (images, commands, env, volumes, resources,
    affinity, tolerations, priority, labels, annotations, ...), less ``nodeName``,
    status, server-set metadata and Baton's per-placement marks (``PLACEMENT_MARKS``:
    the admission webhook refuses a new pod claiming ``baton.io/admitted``). A deep
    copy: the pod given is left untouched.
    """
    meta = pod.get("metadata", {})
    kept = copy.deepcopy({k: meta[k] for k in KEPT_METADATA if meta.get(k) is not None})
    for field in ("labels", "annotations"):
        values = {
            k: v for k, v in (kept.pop(field, None) or {}).items() if k not in PLACEMENT_MARKS
        }
        if meta.get("uid") and field == "annotations":
            values[RECREATED_FROM] = meta["uid"]
        if values:
            kept[field] = values
    spec = copy.deepcopy({k: v for k, v in pod.get("spec", {}).items() if k not in DROPPED_SPEC})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": kept, "spec": spec}
