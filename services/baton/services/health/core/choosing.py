"""Choosing a node's next move: one small function per state (``CHOOSERS``).

A chooser looks at the node's evidence and the cluster (rails, pods, the pause switch)
and answers a ``Move`` (to another state, with the reason in words), a ``Hold`` (a rail
holds the verdict back: published, never dropped) or nothing (the node rests). It
changes nothing but the slow-start allowance it spends when a node returns. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from baton.proto import keys
from baton.proto.health import NodeState
from baton.services.health.core import checks
from baton.services.health.core.model import State
from baton.services.health.core.nodes import NodeRecord, Signal

PUT_OFF = "periodic check put off: work landed on the node"


@dataclass(frozen=True, slots=True)
class Move:
    to: NodeState
    reason: str


@dataclass(frozen=True, slots=True)
class Hold:
    would: str  # quarantine | drain
    rail: str
    reason: str


Choice = Move | Hold | None


def summary(signals: Iterable[Signal]) -> str:
    found = sorted(signals, key=lambda s: (s.since, s.key))
    words = "; ".join(f"{s.rule.name}: {s.detail}" for s in found[:3])
    return words + (f" (+{len(found) - 3} more)" if len(found) > 3 else "")


# -- choosing: one function per state -------------------------------------------------


def _in_service(s: State, rec: NodeRecord, now: float) -> Choice:
    counting = rec.counting(now)
    if counting:
        rail, why = room(s, rec)
        if rail:
            return Hold("quarantine", rail, why)
        return Move("quarantined", summary(counting))
    if rec.signals:
        return None if rec.state == "suspect" else Move("suspect", summary(rec.signals.values()))
    if rec.state != "healthy":
        return Move("healthy", "the evidence went away before it counted")
    if rec.first_check:
        return Move("validating", "a new node: a preflight before any work lands")
    return None


def room(s: State, rec: NodeRecord) -> tuple[str, str]:
    if s.paused:
        return "paused", "health is paused" + (f" ({s.pause_reason})" if s.pause_reason else "")
    return s.rails.room(rec.name)


def drain_at(s: State, rec: NodeRecord, now: float) -> tuple[float, str]:
    if rec.drain_now(now):
        return rec.since, "the job there is already broken: " + summary(
            x for x in rec.counting(now) if x.rule.drain == "now"
        )
    if not checks.workload(s.view, rec.name):
        return rec.since, "no GPU pod runs there"
    return rec.since + s.policy.drain_grace_s, f"drain_grace_s ({s.policy.drain_grace_s:g} s) over"


def _quarantined(s: State, rec: NodeRecord, now: float) -> Choice:
    if rec.clear:
        return Move("validating", "every signal ended")
    at, why = drain_at(s, rec, now)
    if now < at:
        return None
    if s.paused:
        return Hold("drain", "paused", room(s, rec)[1])
    return Move("draining", why)


def _draining(s: State, rec: NodeRecord, now: float) -> Choice:
    if rec.clear:
        return Move("validating", "every signal ended")
    left = checks.workload(s.view, rec.name)
    if not left:
        return Move("remediating", "no GPU pod left on the node")
    if now >= rec.since + s.policy.drain_timeout_s:
        return Move("remediating", f"{len(left)} GPU pods still there after drain_timeout_s")
    return None


def _remediating(s: State, rec: NodeRecord, now: float) -> Choice:
    if rec.clear:
        return Move("validating", "every signal ended")
    if not rec.level_clear:
        return None
    if rec.fixed:
        return Move("validating", f"{keys.REMEDIATION} was taken off: remediated")
    if now >= rec.recheck_at:
        return Move("validating", "remediation_recheck_s passed: a preflight decides")
    return None


def _validating(s: State, rec: NodeRecord, now: float) -> Choice:
    new = [x for x in rec.counting(now) if not x.rule.latched or x.since >= rec.since]
    if new:
        return Move("quarantined", summary(new))
    check = rec.check
    if check is not None and check.put_off:
        return Move("healthy", PUT_OFF)
    passed = not s.policy.preflight or (check is not None and check.passed > 0)
    if not passed:
        return None
    if rec.returning and not s.slow.allow(now):
        return None  # its turn comes (slow start)
    return Move("healthy", "the preflight passed" if s.policy.preflight else "preflight is off")


def _opted_out(s: State, rec: NodeRecord, now: float) -> Choice:
    return None if rec.opt_out else Move("healthy", f"{keys.HEALTH_OPT_OUT} taken off")


CHOOSERS: dict[NodeState, Callable[[State, NodeRecord, float], Choice]] = {
    "healthy": _in_service,
    "suspect": _in_service,
    "withheld": _in_service,
    "quarantined": _quarantined,
    "draining": _draining,
    "remediating": _remediating,
    "validating": _validating,
    "opted-out": _opted_out,
}


def choose(s: State, rec: NodeRecord, now: float) -> Choice:
    if rec.opt_out and rec.state != "opted-out":
        return Move("opted-out", f"labelled {keys.HEALTH_OPT_OUT}=true")
    return CHOOSERS[rec.state](s, rec, now)
