"""The health service's edges: where its outputs go, what people see of them, and the I/O
beside the runner (heartbeats, ``heartbeats.py``; the pause switch as it was, here).

The runner feeds nodes, pods, telemetry, silences, the pause switch, create-pod
results and ticks to the core in HISTORY's order, publishes the routes below and
withholds actions in dry run.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import nats.js.errors
import structlog

from baton.libs.bus import Bus
from baton.libs.bus.streams import EVENTS
from baton.libs.runner import Route, action_route
from baton.proto import health, subjects
from baton.proto.actions import CreatePod, DeletePod, Evict, MarkNode
from baton.proto.codec import Undecodable, decode
from baton.proto.health import Control, Remediate, StateChanged, Withheld
from baton.services.health import metrics
from baton.services.health.core import checks
from baton.services.health.core.choosing import PUT_OFF
from baton.services.health.core.model import State
from baton.services.health.core.moving import Output
from baton.services.health.core.nodes import OUT, NodeRecord

log = structlog.get_logger("baton.health")
_reasons_shown: set[str] = set()  # reasons given a gauge value once: set to 0 when gone
ACTIONS = (MarkNode, CreatePod, DeletePod, Evict)
_KIND: dict[type[Any], str] = {
    StateChanged: health.STATE,
    Withheld: health.WITHHELD,
    Remediate: health.REMEDIATE,
}


def _decision(cluster: str, event: Any) -> tuple[str, str]:
    kind = _KIND[type(event)]
    what = getattr(event, "state", "") or getattr(event, "rail", "") or getattr(event, "remedy", "")
    return health.subject(cluster, kind, event.node), f"{kind}:{event.node}:{event.at!r}:{what}"


ROUTES = (
    Route(ACTIONS, to=action_route, action=True),
    Route((StateChanged, Withheld, Remediate), to=_decision),
)


def observe(state: State, outputs: Sequence[Output]) -> None:
    for output in outputs:
        match output:
            case StateChanged():
                metrics.CHANGES.labels(state=output.state).inc()
                counted(output)
                log.info("node state", node=output.node, state=output.state,
                         previous=output.previous, reason=output.reason)  # fmt: skip
            case Withheld():
                metrics.WITHHELD_TOTAL.labels(rail=output.rail, would=output.would).inc()
                log.warning("verdict withheld", node=output.node, would=output.would,
                            rail=output.rail, reason=output.reason)  # fmt: skip
            case Remediate():
                metrics.REMEDIATIONS.labels(remedy=output.remedy).inc()
                log.warning("remediation asked", node=output.node, remedy=output.remedy)
            case _:
                metrics.ACTIONS.labels(type=str(type(output).__struct_config__.tag)).inc()


def counted(change: StateChanged) -> None:
    """The dashboards' counters: quarantines by reason (and how long since the fault was
    first read), returns after a fault."""
    if change.state == "quarantined" and change.previous in ("healthy", "suspect", "withheld"):
        first = min(change.evidence, key=lambda e: e.since, default=None)
        metrics.QUARANTINES.labels(reason=first.rule if first else "unknown").inc()
        if first is not None:
            metrics.FAULT_TO_TAINT.observe(max(0.0, time.time() - first.since))
    elif (change.state, change.previous) == ("healthy", "validating") and change.reason != PUT_OFF:
        metrics.RELEASES.inc()


def reason(rec: NodeRecord) -> str:
    first = min(rec.signals.values(), key=lambda s: (s.since, s.key), default=None)
    return first.rule.name if first is not None else "unknown"


def gauges(state: State) -> None:
    states = Counter(rec.state for rec in state.nodes.values() if rec.seen)
    for name in ("healthy", "suspect", "withheld", "quarantined", "draining", "remediating",
                 "validating", "opted-out"):  # fmt: skip
        metrics.NODES.labels(state=name).set(states.get(name, 0))
    rails = Counter(rec.rail for rec in state.nodes.values() if rec.withheld)
    for rail in ("rack", "block", "pool", "cluster", "paused"):
        metrics.WITHHELD.labels(rail=rail).set(rails.get(rail, 0))
    metrics.PAUSED.set(1 if state.paused else 0)
    held = Counter(reason(r) for r in state.nodes.values() if r.state in OUT)
    for why in set(held) | _reasons_shown:
        metrics.QUARANTINED.labels(reason=why).set(held.get(why, 0))
    _reasons_shown.update(held)
    fullest: dict[str, float] = {}
    for key, (out, allowed, _size) in state.rails.levels().items():
        level = key.partition(":")[0]
        fullest[level] = max(fullest.get(level, 0.0), out / allowed if allowed else 0.0)
    for level, share in fullest.items():
        metrics.OUT.labels(level=level).set(share)
    now = time.time()
    metrics.OVERDUE.set(
        sum(1 for r in state.nodes.values()
            if r.seen and r.state == "healthy" and checks.due_at(r, state.policy) < now)
    )  # fmt: skip


async def last_control(bus: Bus) -> Control | None:
    """The pause switch as last set (the last ``health.control``), for the policy at start."""
    stream = subjects.stream_name(bus.cluster, EVENTS)
    try:
        raw = await bus.js.get_last_msg(stream, health.control_subject(bus.cluster))
    except nats.js.errors.NotFoundError:
        return None
    try:
        return decode(raw.data or b"", Control)
    except Undecodable as exc:
        log.warning("last health.control unreadable; starting unpaused", error=str(exc))
        return None
