"""Builders and feeders for the health core's unit tests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import msgspec

from baton.proto import keys
from baton.proto.actions import MarkNode
from baton.proto.health import HealthPolicy, Note
from baton.proto.k8s import Condition, Node, NodeEvent, Pod, PodEvent
from baton.proto.runner import Tick
from baton.proto.telemetry import Disk, GpuReport, GpuStatus, Nic, NodeReport, XidEvent
from baton.services.health import core
from baton.services.health.core import checks, moving
from tests.support.builders import node, pod

T = TypeVar("T")

# No preflight on first sight (the nodes are not new) unless a test asks for it.
QUIET = HealthPolicy(new_node_s=0.0, recheck_days=1000.0)


def rack(n: int, *, name: str = "r1", block: str = "b1", prefix: str = "n") -> list[Node]:
    return [node(f"{prefix}{i}").in_rack(name, block=block, zone="z1").build() for i in range(n)]


def make(
    nodes: Sequence[Node], policy: HealthPolicy = QUIET, *, at: float = 0.0, validated: bool = True
) -> core.State:
    """A core that has seen ``nodes`` (validated at ``at``, unless told otherwise)."""
    state = core.initial(policy)
    for n in nodes:
        feed(state, [NodeEvent(op="upsert", at=at, node=n)], at)
        rec = state.nodes[n.name]
        if validated and rec.state == "healthy":
            rec.validated = at or 1e-9
            rec.recheck_at = checks.due_at(rec, policy)
            rec.deadline = moving.deadline(state, rec, at)
    return state


def feed(
    state: core.State, events: Iterable[Any], at: float | None = None, *, echo: bool = True
) -> list[Any]:
    """Step each event. ``echo``: as the actuator and the bridge do, each ``MarkNode``
    is applied to the node and the node event comes back, at the same time (health asks
    for a preflight pod only once its node shows the preflight taint); and, as the
    runner does, a tick follows an event that freed a test slot (preflights are asked on
    ticks)."""
    out: list[Any] = []
    for event in events:
        now = at if at is not None else float(event.at)
        _, outputs = core.step(state, event, now)
        out.extend(outputs)
        if echo:
            out.extend(feed(state, marked(state, outputs, at=now), now))
            if state.slots_changed and not isinstance(event, Tick):
                out.extend(feed(state, [Tick(at=now, service="health")], now))
    return out


def marked(state: core.State, outputs: Iterable[Any], *, at: float) -> list[NodeEvent]:
    """The node events the API would send back once each ``MarkNode`` is applied."""
    events = []
    for mark in of(outputs, MarkNode):
        seen = state.view.nodes.get(mark.node)
        if seen is None:
            continue
        n = seen.node
        gone = {(t.key, t.effect) for t in (*mark.untaint, *mark.taints)}
        taints = (*(t for t in n.taints if (t.key, t.effect) not in gone), *mark.taints)
        labels = {k: v for k, v in {**n.labels, **mark.labels}.items() if v is not None}
        notes = {k: v for k, v in {**n.annotations, **mark.annotations}.items() if v is not None}
        events.append(changed(n, at=at, taints=taints, labels=labels, annotations=notes))
    return events


def tick(state: core.State, at: float) -> list[Any]:
    return feed(state, [Tick(at=at, service="health")], at)


def of(outputs: Iterable[Any], type_: type[T]) -> list[T]:
    return [o for o in outputs if isinstance(o, type_)]


def states(state: core.State) -> dict[str, str]:
    return {name: rec.state for name, rec in sorted(state.nodes.items())}


def xid(name: str, number: int, *, at: float, gpu: int = 0) -> XidEvent:
    return XidEvent(node=name, at=at, xid=number, source="kmsg", gpu=gpu, bus_id="0000:3b:00")


def gpus(name: str, *, at: float, count: int = 8, **bad: Any) -> GpuReport:
    """A GPU report; ``bad`` sets fields of GPU 0 (``present=False``, ``ecc_volatile_dbe=2``)."""
    found = [GpuStatus(index=i, ecc_volatile_dbe=0, nvlink_errors=0) for i in range(count)]
    found[0] = msgspec.structs.replace(found[0], **bad)
    return GpuReport(node=name, at=at, gpus=tuple(found))


def report(name: str, *, at: float, nics_down: tuple[str, ...] = (), **fields: Any) -> NodeReport:
    nics = tuple(Nic(name=n, up=n not in nics_down) for n in ("eth0", "ib0"))
    base: dict[str, Any] = {"disks": (Disk(mount="/", used_ratio=0.3),), "nics": nics,
                            "gpus_expected": 8, "gpus_found": 8}  # fmt: skip
    return NodeReport(node=name, at=at, **{**base, **fields})


def changed(n: Node, *, at: float, **fields: Any) -> NodeEvent:
    return NodeEvent(op="upsert", at=at, node=msgspec.structs.replace(n, **fields))


def not_ready(n: Node, *, at: float) -> NodeEvent:
    cond = Condition(type="Ready", status="False", reason="KubeletNotReady")
    return changed(n, at=at, ready=False, conditions=(cond,))


def ready(n: Node, *, at: float) -> NodeEvent:
    return changed(n, at=at, ready=True, conditions=(Condition(type="Ready", status="True"),))


def running(name: str, on: str, *, gpus: int = 8, at: float = 0.0, **kw: Any) -> PodEvent:
    return PodEvent(op="upsert", at=at, pod=pod(name, node_name=on, gpus=gpus, **kw))


def gone(p: Pod, *, at: float) -> PodEvent:
    return PodEvent(op="delete", at=at, pod=p)


def preflight_pod(state: core.State, name: str, *, phase: str, at: float) -> PodEvent:
    rec = state.nodes[name]
    assert rec.check is not None and rec.check.pod, f"{name} has no preflight pod asked"
    p = pod(rec.check.pod, namespace=state.policy.preflight_namespace, node_name=name,
            gpus=8, phase=phase, labels={keys.PREFLIGHT: "true"})  # fmt: skip
    return PodEvent(op="upsert", at=at, pod=p)


def noted(n: Node, note: Note, **fields: Any) -> Node:
    return msgspec.structs.replace(
        n, annotations={keys.HEALTH: msgspec.json.encode(note).decode()}, **fields
    )
