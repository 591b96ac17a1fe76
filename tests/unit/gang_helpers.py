"""Drive the pure gang core with builders: feed objects, tick, bind what it decided."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from baton.proto.actions import ActionResult, BindGang
from baton.proto.k8s import Node, NodeEvent, Pod, PodEvent, PodGroup, PodGroupEvent
from baton.proto.placement import GangPlaced, GangUnschedulable
from baton.services.gang import core

Obj = Node | Pod | PodGroup


def event(obj: Obj, *, at: float = 0.0, op: str = "upsert") -> core.Input:
    if isinstance(obj, Node):
        return NodeEvent(op=op, at=at, node=obj)  # type: ignore[arg-type]
    if isinstance(obj, Pod):
        return PodEvent(op=op, at=at, pod=obj)  # type: ignore[arg-type]
    return PodGroupEvent(op=op, at=at, pod_group=obj)  # type: ignore[arg-type]


def feed(
    state: core.State, objs: Iterable[Obj], *, at: float = 0.0, op: str = "upsert"
) -> list[core.Output]:
    out: list[core.Output] = []
    for obj in objs:
        _, outputs = core.step(state, event(obj, at=at, op=op), at)
        out += outputs
    return out


def tick(state: core.State, at: float = 1.0) -> list[core.Output]:
    _, outputs = core.step(state, core.Tick(at=at), at)
    return list(outputs)


def make(
    nodes: Sequence[Node], *objs: Obj | Sequence[Obj], policy: core.Policy | None = None
) -> core.State:
    state = core.initial(policy)
    feed(state, nodes)
    for obj in objs:
        feed(state, obj if isinstance(obj, Sequence) else [obj])
    return state


def binds(outputs: Iterable[object]) -> list[BindGang]:
    return [o for o in outputs if isinstance(o, BindGang)]


def placed(outputs: Iterable[object]) -> list[GangPlaced]:
    return [o for o in outputs if isinstance(o, GangPlaced)]


def verdicts(outputs: Iterable[object]) -> list[GangUnschedulable]:
    return [o for o in outputs if isinstance(o, GangUnschedulable)]


def gangs_bound(outputs: Iterable[object]) -> list[str]:
    return [b.gang for b in binds(outputs)]


def apply(state: core.State, bind: BindGang, *, at: float = 2.0) -> None:
    """What the actuator and the bridge would report for a successful bind."""
    core.step(
        state,
        ActionResult(
            action_id=bind.id,
            action_type="action.bind-gang.v1",
            by="actuator",
            at=at,
            outcome="applied",
        ),
        at,
    )
    for b in bind.bindings:
        pod = state.cluster.pods[f"{b.namespace}/{b.pod}"]
        feed(state, [msgspec.structs.replace(pod, node_name=b.node, phase="Running")], at=at)


def finish(state: core.State, gang: str, *, at: float = 3.0) -> None:
    """Every bound member of ``gang`` succeeded."""
    for key in sorted(state.cluster.gangs[gang].bound):
        pod = state.cluster.pods[key]
        feed(state, [msgspec.structs.replace(pod, phase="Succeeded")], at=at)
