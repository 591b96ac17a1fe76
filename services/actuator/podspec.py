"""Pod bodies: from a PodTemplate action, and an unbound copy of a pod for a rollback."""

from __future__ import annotations

from typing import Any

from proto.actions import PodTemplate

Obj = dict[str, Any]

# What a recreated pod keeps of the old one's metadata; everything the API server
# assigns (uid, resourceVersion, creationTimestamp, managedFields, ...) is dropped.
KEPT_METADATA = ("name", "namespace", "labels", "annotations", "ownerReferences")


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
    if t.requests:
        quantities = {k: (f"{v}m" if k == "cpu" else str(v)) for k, v in t.requests.items()}
        container["resources"] = {"requests": quantities, "limits": _limits(quantities)}
    spec: Obj = {"containers": [container]}
    optional: Obj = {
        "priorityClassName": t.priority_class_name,
        "priority": t.priority,
        "schedulerName": t.scheduler_name,
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
    """The pod as its author wrote it: no nodeName, status, uid or resourceVersion."""
    meta = pod.get("metadata", {})
    spec = {k: v for k, v in pod.get("spec", {}).items() if k != "nodeName"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {k: meta[k] for k in KEPT_METADATA if k in meta},
        "spec": spec,
    }
