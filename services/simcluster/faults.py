"""Node faults and heals, as data: which conditions and annotations each one sets.

The same fault applies in process (:func:`apply`, through ``Store.mutate``) or over the
API (:func:`patches`: a strategic merge patch of ``status.conditions`` on
``nodes/<name>/status`` and a merge patch of the annotations on ``nodes/<name>``), so
``baton sim fault`` drives any simcluster the way a real node problem detector would.
"""

from __future__ import annotations

from typing import Any

import msgspec

from services.simcluster.clock import timestamp
from services.simcluster.topology import GPU_HEALTHY

GPU_FAULT_ANNOTATION = "sim.baton.io/gpu-fault"

# DCGM / NVIDIA Xid meanings for the Xids a simulated fault may carry.
XIDS: dict[int, str] = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    48: "Double Bit ECC Error",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink Error",
    79: "GPU has fallen off the bus",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    119: "GSP RPC timeout",
}


class ConditionChange(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    status: str
    reason: str
    message: str = ""


class NodeFault(msgspec.Struct, frozen=True, kw_only=True):
    conditions: tuple[ConditionChange, ...] = ()
    annotations: dict[str, str | None] = {}  # None removes the annotation


def not_ready() -> NodeFault:
    return NodeFault(
        conditions=(
            ConditionChange(
                type="Ready",
                status="False",
                reason="KubeletNotReady",
                message="simulated fault: kubelet stopped posting ready status",
            ),
        )
    )


def ready() -> NodeFault:
    return NodeFault(
        conditions=(
            ConditionChange(
                type="Ready",
                status="True",
                reason="KubeletReady",
                message="kubelet is posting ready status",
            ),
        )
    )


def gpu_fault(*, xid: int = 79, gpu: int = 0) -> NodeFault:
    if xid not in XIDS:
        raise ValueError(f"xid: unknown Xid {xid}; known: {', '.join(map(str, sorted(XIDS)))}")
    if gpu < 0:
        raise ValueError(f"gpu: expected >= 0, got {gpu}")
    return NodeFault(
        conditions=(
            ConditionChange(
                type=GPU_HEALTHY,
                status="False",
                reason=f"Xid{xid}",
                message=f"GPU {gpu}: Xid {xid}: {XIDS[xid]}",
            ),
        ),
        annotations={GPU_FAULT_ANNOTATION: f"xid={xid},gpu={gpu}"},
    )


def gpu_heal() -> NodeFault:
    return NodeFault(
        conditions=(
            ConditionChange(
                type=GPU_HEALTHY, status="True", reason="GPUsHealthy", message="all GPUs healthy"
            ),
        ),
        annotations={GPU_FAULT_ANNOTATION: None},
    )


def apply(node: dict[str, Any], fault: NodeFault) -> None:
    """Edit ``node`` in place (for ``Store.mutate``)."""
    status = node.setdefault("status", {})
    conditions: list[dict[str, Any]] = status.setdefault("conditions", [])
    for change in fault.conditions:
        current = next((c for c in conditions if c.get("type") == change.type), None)
        entry = _condition(change, previous=current)
        if current is None:
            conditions.append(entry)
        else:
            current.clear()
            current.update(entry)
    annotations = node.setdefault("metadata", {}).setdefault("annotations", {})
    for key, value in fault.annotations.items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value


def patches(fault: NodeFault, node: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(merge patch for ``nodes/<name>``, strategic merge patch for ``nodes/<name>/status``)."""
    current = {c.get("type"): c for c in node.get("status", {}).get("conditions") or ()}
    conditions = [_condition(c, previous=current.get(c.type)) for c in fault.conditions]
    metadata = {"metadata": {"annotations": dict(fault.annotations)}} if fault.annotations else {}
    return metadata, {"status": {"conditions": conditions}}


def _condition(change: ConditionChange, *, previous: dict[str, Any] | None) -> dict[str, Any]:
    now = timestamp()
    since = now
    if previous is not None and previous.get("status") == change.status:
        since = previous.get("lastTransitionTime", now)
    return {
        "type": change.type,
        "status": change.status,
        "reason": change.reason,
        "message": change.message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": since,
    }


def is_ready(node: dict[str, Any]) -> bool:
    for c in node.get("status", {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False
