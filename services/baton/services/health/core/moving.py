"""Moving a node through the state machine: choose the next move, enter it, mark the node.

``decide(state, node, now)`` runs after anything touched the node: it asks the chooser
of the node's state (``choosing.CHOOSERS``, one function per state) for a move, enters
it (``states.check_move`` refuses a move the table does not have), and repeats until
the node rests (a node idle when quarantined goes on to draining and remediating in
one decision). Then the node's marks are brought to what its state wants (taints and
label, a diff against what was last asked, and the ``baton.io/health`` annotation:
who, why and when) in one ``MarkNode``: a decision costs the API server one write. A
verdict a rail holds back is published (``Withheld``) instead of being dropped. Pure.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from baton.proto import ids, keys
from baton.proto.actions import CreatePod, DeletePod, Evict, MarkNode
from baton.proto.health import NodeState, Remediate, StateChanged, Withheld
from baton.services.health.core import checks, states
from baton.services.health.core.choosing import Hold, Move, choose, drain_at
from baton.services.health.core.model import State
from baton.services.health.core.nodes import INF, OUT, Check, NodeRecord

Output = StateChanged | Withheld | Remediate | MarkNode | CreatePod | DeletePod | Evict
POLL_S = 5.0  # a check waiting for a slot or for pods to leave looks again this often


# -- deciding -------------------------------------------------------------------------


def decide(s: State, rec: NodeRecord, now: float) -> list[Output]:
    if not rec.seen:
        return []
    out: list[Output] = []
    moved: list[NodeState] = []
    for _ in range(len(states.MARKS)):
        choice = choose(s, rec, now)
        if choice is None:
            break
        if isinstance(choice, Hold):
            out += hold(s, rec, choice, now)
            rec.deadline = INF if choice.would == "drain" else deadline(s, rec, now)
            return out
        moved.append(rec.state)
        out += enter(s, rec, choice, now)
    else:
        raise RuntimeError(f"health: node {rec.name} did not come to rest: {moved}")
    if moved:
        out += mark(s, rec, now, noted=any(m not in states.IN_SERVICE for m in moved))
    rec.deadline = deadline(s, rec, now)
    return out


def hold(s: State, rec: NodeRecord, h: Hold, now: float) -> list[Output]:
    out: list[Output] = []
    if h.would == "quarantine" and rec.state != "withheld":
        out += enter(s, rec, Move("withheld", f"would quarantine: {h.reason}"), now)
    if rec.withheld != h.reason:
        rec.withheld, rec.rail = h.reason, h.rail
        out.append(Withheld(node=rec.name, at=now, would=h.would, rail=h.rail, reason=h.reason,
                            evidence=rec.evidence()))  # fmt: skip
    return out


def move(s: State, rec: NodeRecord, to: NodeState, reason: str, now: float) -> list[Output]:
    """One move from outside the choosers (a periodic check starting), marked."""
    out = enter(s, rec, Move(to, reason), now)
    out += mark(s, rec, now, noted=True)
    rec.deadline = deadline(s, rec, now)
    return out


def enter(s: State, rec: NodeRecord, m: Move, now: float) -> list[Output]:
    previous = rec.state
    states.check_move(previous, m.to)
    out: list[Output] = []
    if previous == "validating":
        out += checks.cleanup(rec, s.policy, now)
        _forget_check(s, rec)
    if m.to != "withheld":
        rec.withheld = rec.rail = ""
    rec.state, rec.since, rec.reason = m.to, now, m.reason
    if previous in OUT and m.to not in OUT:
        s.freed = True
    s.rails.set_out(rec.name, m.to in OUT)
    out += ENTRY.get(m.to, _nothing)(s, rec, previous, now)
    changed = StateChanged(node=rec.name, at=now, state=m.to, previous=previous,
                           reason=m.reason, evidence=rec.evidence(), remedy=rec.remedy)  # fmt: skip
    out.append(changed)
    return out


def _forget_check(s: State, rec: NodeRecord) -> None:
    if rec.check is not None:
        s.asks.pop(rec.check.action, None)


def _nothing(s: State, rec: NodeRecord, previous: NodeState, now: float) -> list[Output]:
    return []


def _enter_quarantined(s: State, rec: NodeRecord, previous: NodeState, now: float) -> list[Output]:
    if previous in states.IN_SERVICE and now - rec.released < s.policy.probation_s:
        s.slow.reset()  # back out within its probation: return nodes one at a time again
    rec.returning = True
    return []


def _enter_remediating(s: State, rec: NodeRecord, previous: NodeState, now: float) -> list[Output]:
    rec.remedy = rec.worst_remedy()
    rec.reboots += rec.remedy == "reboot"
    rec.recheck_at = now + s.policy.remediation_recheck_s
    rec.fixed = rec.label_seen = False
    return [Remediate(node=rec.name, at=now, remedy=rec.remedy,  # type: ignore[arg-type]
                      evidence=rec.evidence())]  # fmt: skip


def _enter_validating(s: State, rec: NodeRecord, previous: NodeState, now: float) -> list[Output]:
    why = "returning" if previous in OUT else ("recheck" if rec.validated else "first check")
    rec.check = Check(why=why)
    rec.first_check = False
    rec.remedy = ""
    return []


def _enter_healthy(s: State, rec: NodeRecord, previous: NodeState, now: float) -> list[Output]:
    if previous == "validating":
        check = rec.check
        if check is not None and check.passed:
            rec.validated = check.passed
        elif not s.policy.preflight:
            rec.validated = now
        if check is None or not check.put_off:
            rec.forget_latched()
            rec.reboots = 0
            if rec.returning:
                rec.released = now
            rec.returning = False
        rec.check = None
    rec.recheck_at = checks.due_at(rec, s.policy)
    return []


def _enter_opted_out(s: State, rec: NodeRecord, previous: NodeState, now: float) -> list[Output]:
    rec.remedy, rec.check, rec.returning, rec.first_check = "", None, False, False
    return []


ENTRY: dict[NodeState, Callable[[State, NodeRecord, NodeState, float], list[Output]]] = {
    "quarantined": _enter_quarantined,
    "remediating": _enter_remediating,
    "validating": _enter_validating,
    "healthy": _enter_healthy,
    "opted-out": _enter_opted_out,
}


# -- marks: Baton's taints and label, and the annotation ---------------------------------


REMARK_AFTER_S = 30.0  # a MarkNode failed (after the actuator's own retries): again then


def mark(
    s: State, rec: NodeRecord, now: float, *, noted: bool, again: bool = False
) -> list[Output]:
    """Bring Baton's marks on the node to what its state wants, in one ``MarkNode`` (one
    API write): taints and label as a diff against what was last asked, and the note.
    ``again`` (the last one failed): taints against what the node shows, the label always."""
    want = states.MARKS[rec.state]
    had = rec.shown if again else rec.asked
    adds = [states.TAINTS[k] for k in states.TAINTS if k in want.taints and k not in had]
    removes = [states.TAINTS[k] for k in states.TAINTS if k in had and k not in want.taints]
    label = rec.remedy if want.remedy_label else ""
    changed = label != rec.label or again
    labels: dict[str, str | None] = {keys.REMEDIATION: label or None} if changed else {}
    rec.asked, rec.label = want.taints, label
    if not (adds or removes or labels or noted):
        return []
    note = msgspec.json.encode(rec.note()).decode()
    action = MarkNode(
        id=ids.make("mark", rec.uid, rec.state, repr(now)), by="health", at=now,
        priority="health" if rec.state in OUT else "validation",
        reason=f"{rec.state}: {rec.reason}"[:300], node=rec.name,
        taints=tuple(adds), untaint=tuple(removes), labels=labels,
        annotations={keys.HEALTH: note},
    )  # fmt: skip
    for old in [i for i, name in s.marks.items() if name == rec.name]:
        del s.marks[old]  # only the newest one's result matters
    s.marks[action.id] = rec.name
    rec.remark_at = INF
    return [action]


def marked(s: State, action_id: str, outcome: str, now: float) -> None:
    """The result of a MarkNode: a failed one is asked again, whole, ``REMARK_AFTER_S``
    later (a stale one was superseded by a newer one, which has its own result). Without
    it a node whose preflight taint never got on would wait in validating for ever."""
    name = s.marks.pop(action_id, None)
    rec = s.nodes.get(name) if name else None
    if rec is not None and outcome == "failed":
        rec.remark_at = now + REMARK_AFTER_S
        rec.deadline = min(rec.deadline, rec.remark_at)


# -- when time alone changes something -----------------------------------------------------


def deadline(s: State, rec: NodeRecord, now: float) -> float:
    return min(_state_deadline(s, rec, now), rec.remark_at)


def _state_deadline(s: State, rec: NodeRecord, now: float) -> float:
    match rec.state:
        case "suspect" | "withheld":
            return min((x.counts_at for x in rec.waiting(now)), default=INF)
        case "quarantined":
            return drain_at(s, rec, now)[0]
        case "draining":
            return rec.since + s.policy.drain_timeout_s
        case "remediating":
            return rec.recheck_at
        case "validating":
            return _validating_deadline(s, rec, now)
        case "healthy":
            due = rec.recheck_at if s.policy.preflight and not rec.opt_out else INF
            return min(due, min((x.counts_at for x in rec.waiting(now)), default=INF))
    return INF


def _validating_deadline(s: State, rec: NodeRecord, now: float) -> float:
    check = rec.check
    if check is None:
        return INF
    if check.passed:
        return s.slow.next_at()
    if not check.pod and not checks.tainted(rec):
        return INF  # asked once the node shows its preflight taint (a node event)
    if not check.pod:  # the first ask at the next tick; asked again backing off
        return now if check.tries == 0 else max(now + POLL_S, checks.retry_at(check))
    return checks.check_deadline(rec, s.policy)
