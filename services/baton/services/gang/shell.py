"""The gang service's edges: where its outputs go, and what people see of its decisions.

The runner (``libs.runner``) does the I/O: it feeds nodes, pods, PodGroups,
``bind-gang`` results and ticks to the core in HISTORY's order, publishes the
routes below, and withholds actions in dry run. This module says where each output
goes and turns decisions into logs and metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import structlog

from baton.libs.runner import Route, action_route
from baton.proto import keys, subjects
from baton.proto.actions import BindGang, EvictGang, RecreatePod
from baton.proto.k8s import GPU
from baton.proto.placement import GangPlaced, GangRestarted, GangUnschedulable
from baton.services.gang import core, metrics

log = structlog.get_logger("baton.gang")

_KIND: dict[type[Any], str] = {
    GangPlaced: "placed",
    GangUnschedulable: "unschedulable",
    GangRestarted: "restarted",
}


def _decision(cluster: str, event: Any) -> tuple[str, str]:
    namespace, _, name = event.gang.partition("/")
    subject = subjects.subject(cluster, subjects.PLACEMENT, _KIND[type(event)], namespace, name)
    if isinstance(event, GangPlaced):
        return subject, f"{event.action_id}:placed"
    return subject, f"{subject}:{event.at}"


ROUTES = (
    Route((BindGang, EvictGang, RecreatePod), to=action_route, action=True),
    Route((GangPlaced, GangUnschedulable, GangRestarted), to=_decision),
)


def observe(state: core.State, outputs: Sequence[core.Output]) -> None:
    for output in outputs:
        if isinstance(output, BindGang | EvictGang | RecreatePod):
            metrics.ACTIONS.labels(type=str(type(output).__struct_config__.tag)).inc()
            continue
        taken_off = isinstance(output, GangRestarted) and not output.node  # no node failed
        metrics.DECISIONS.labels(kind="preempted" if taken_off else _KIND[type(output)]).inc()
        if isinstance(output, GangPlaced):
            if waited := wait(state, output):
                metrics.WAIT_SECONDS.labels(team=waited[0], size=waited[1]).observe(waited[2])
            log.info("placed", gang=output.gang, members=len(output.bindings), level=output.level,
                     domains=output.domains, action_id=output.action_id)  # fmt: skip
        elif isinstance(output, GangUnschedulable):
            log.info("unschedulable", gang=output.gang, reason=output.reason,
                     need=msgspec.to_builtins(output.need))  # fmt: skip
        elif isinstance(output, GangRestarted):
            log.warning("restarting gang", gang=output.gang, node=output.node, reason=output.reason)


def wait(state: core.State, placed: GangPlaced) -> tuple[str, str, float] | None:
    """``(team, size class, seconds)`` from the gang's creation (its newest member's, or
    its PodGroup's) to ``placed``; None when the creation time is unknown."""
    pods = [state.cluster.pods.get(f"{b.namespace}/{b.pod}") for b in placed.bindings]
    members = [p for p in pods if p is not None]
    created = [p.created_at for p in members]
    gang = state.cluster.gangs.get(placed.gang)
    if gang is not None and gang.group is not None:
        created.append(gang.group.created_at)
    if not members or not all(created):
        return None
    team = next((p.labels[keys.TEAM] for p in members if p.labels.get(keys.TEAM)), metrics.NO_TEAM)
    size = metrics.size_class(len(placed.bindings))
    return team, size, max(0.0, placed.at - max(created))


def gauges(state: core.State) -> None:
    cluster = state.cluster
    pending = sum(1 for g in cluster.gangs.values() if g.pending and not g.bound)
    metrics.PENDING_GANGS.set(pending)
    usable = sum(1 for n in cluster.nodes.values() if n.usable)
    metrics.NODES.labels(usable="true").set(usable)
    metrics.NODES.labels(usable="false").set(len(cluster.nodes) - usable)
    metrics.RACK_GPUS.clear()  # racks that went away go from /metrics too
    for (rack, state_), gpus in rack_gpus(state).items():
        metrics.RACK_GPUS.labels(rack=rack, state=state_).set(gpus)


def rack_gpus(state: core.State) -> dict[tuple[str, str], int]:
    """GPUs of usable nodes per rack (the narrowest topology level): allocated, free."""
    level = state.policy.topology_keys[-1] if state.policy.topology_keys else keys.RACK
    found: dict[tuple[str, str], int] = {}
    for view in state.cluster.nodes.values():
        if not view.usable:
            continue
        rack = view.node.labels.get(level) or metrics.NO_RACK
        total = view.node.allocatable.get(GPU, 0)
        free = max(0, min(total, view.free.get(GPU, 0)))
        for which, gpus in (("allocated", total - free), ("free", free)):
            found[(rack, which)] = found.get((rack, which), 0) + gpus
    return found
