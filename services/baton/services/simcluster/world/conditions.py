"""Node conditions and annotations that faults set and heals clear, as data.

A :class:`NodeFault` says which conditions (``Ready``, ``GPUHealthy``) and annotations
a fault changes; :func:`apply` edits a Node in place (inside ``Store.mutate``). The
simulation applies them together with the fault's hardware effect (:mod:`faults`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from baton.services.simcluster.clock import timestamp
from baton.services.simcluster.world.topology import GPU_HEALTHY
from baton.services.simcluster.world.xids import XIDS

GPU_FAULT_ANNOTATION = "sim.baton.io/gpu-fault"


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
    """What a node problem detector writes for an Xid: GPUHealthy=False and an annotation."""
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
                message=f"GPU {gpu}: Xid {xid}: {XIDS[xid].name}",
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


def joined_not_ready() -> NodeFault:
    """A machine whose kubelet came up but whose network plugin did not."""
    return NodeFault(
        conditions=(
            ConditionChange(
                type="Ready",
                status="False",
                reason="KubeletNotReady",
                message="container runtime network not ready: NetworkReady=false "
                "reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin "
                "not initialized",
            ),
        )
    )


def disk_pressure(pressure: bool) -> NodeFault:
    """The kubelet's DiskPressure condition (nodefs or imagefs over its eviction threshold)."""
    if pressure:
        change = ConditionChange(
            type="DiskPressure",
            status="True",
            reason="KubeletHasDiskPressure",
            message="kubelet has disk pressure",
        )
    else:
        change = ConditionChange(
            type="DiskPressure",
            status="False",
            reason="KubeletHasNoDiskPressure",
            message="kubelet has no disk pressure",
        )
    return NodeFault(conditions=(change,))


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
