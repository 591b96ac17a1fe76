"""The actuator's decisions, pure: what to apply next, when, and what each outcome means.

Events come in with the time (``now``); outputs say what the shell must do. The state
is one object the step owns (a queue per priority class and a few dicts, updated in
place so ten thousand queued actions cost O(1) each); nothing here reads a clock, does
I/O or draws an unseeded random number, so a recorded event sequence replays to the
same outputs.

The cycle for every event, as numbered steps in ``step``:
1. admit an arrived action (or recognise it as a duplicate, or push back when full),
2. settle a finished one (ack, nak with backoff, or term after the last attempt),
3. dispatch: while a slot is free, take the highest-priority action whose token cost
   the bucket can pay, unless validation's head has tokens of its assured share
   (``pacing.ASSURED``); otherwise say when to wake.
"""

from __future__ import annotations

import random
from collections import OrderedDict, deque
from typing import Literal

import msgspec

from baton.proto.actions import (
    PRIORITY_ORDER,
    ActionResult,
    AnyAction,
    BindGang,
    EvictGang,
    Outcome,
    RecordEvent,
    RecreatePod,
    SetPodCondition,
)
from baton.proto.k8s import MAX_GANG_MEMBERS
from baton.services.actuator.core.coalescing import STALE, Latest
from baton.services.actuator.core.eventing import EventLimits, Events, EventWrite
from baton.services.actuator.core.pacing import ASSURED, Bucket, assured
from baton.services.actuator.core.retrying import backoff


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    qps: float = 200.0  # sustained API writes per second; 0 or less means unlimited
    burst: int = 400
    # Of qps, what validation (preflight pods and marks: new capacity) is assured ahead
    # of binds and admission marks while it has work queued (pacing.ASSURED); 0: none
    validation_share: float = 0.4
    concurrency: int = 32  # actions applied at once
    queue_limit: int = 20_000  # actions held in memory; more are nak'ed with a delay
    max_attempts: int = 5
    backoff_base: float = 0.2
    backoff_cap: float = 30.0
    seen_limit: int = 100_000  # action ids remembered (LRU) ...
    seen_ttl: float = 3600.0  # ... for at most this long
    seed: int = 0
    # Members (pods) one action may name: a bind of more is refused, not charged, so a
    # forged or runaway 10,000-member action cannot take the rate budget of every other.
    max_members: int = MAX_GANG_MEMBERS
    events: EventLimits = EventLimits()  # Kubernetes Events: series and budgets


# -- events in ------------------------------------------------------------------------


class Arrived(msgspec.Struct, frozen=True, kw_only=True, tag="actuator.arrived.v1"):
    """An action delivered from the ACTIONS stream; ``ticket`` names the delivery.

    The shell looks three things up before it hands an action over: ``done``, the outcome
    recorded for this id by an earlier run (exactly once across restarts), ``fenced``,
    why this copy must not be applied (its producer's epoch is not the current one),
    ``refused``, why it must not be (past ``expires``), and ``untrusted``, why it must
    never be (its subject, body and producer's lease disagree: ``trusting``).
    """

    action: AnyAction
    ticket: int
    delivered: int = 1  # JetStream's delivery count, when the bus knows it
    seq: int = 0  # its ACTIONS stream sequence (0: unknown): which of two came first
    done: str = ""
    refused: str = ""
    fenced: str = ""
    untrusted: str = ""


class Finished(msgspec.Struct, frozen=True, kw_only=True, tag="actuator.finished.v1"):
    """The shell applied an action: an outcome, or ``retry`` for a retryable failure."""

    action_id: str
    outcome: Outcome | Literal["retry"]
    error: str = ""
    # API writes made (None: not counted): the bucket is charged what it made beyond the
    # estimate, and given back what it did not make (a pod condition already so)
    calls: int | None = None


class Tick(msgspec.Struct, frozen=True, kw_only=True, tag="actuator.tick.v1"):
    """Time passed (a wake-up the core asked for)."""


Event = Arrived | Finished | Tick

# -- outputs --------------------------------------------------------------------------


class Apply(msgspec.Struct, frozen=True, kw_only=True, tag="actuator.apply.v1"):
    action: AnyAction
    attempt: int
    event: EventWrite | None = None  # a RecordEvent: which Event object, which count


class Settle(msgspec.Struct, frozen=True, kw_only=True, tag="actuator.settle.v1"):
    tickets: tuple[int, ...]
    verdict: Literal["ack", "nak", "term"]
    delay: float = 0.0
    reason: str = ""
    error_class: Literal["bad-input", "dependency"] = "dependency"  # of a term's dead letter


class Report(msgspec.Struct, frozen=True, kw_only=True, tag="actuator.report.v1"):
    result: ActionResult
    action: AnyAction  # what it answers (its subject gives the result's subject)


class WakeAt(msgspec.Struct, frozen=True, kw_only=True, tag="actuator.wake.v1"):
    at: float


Output = Apply | Settle | Report | WakeAt
CLASSES = tuple(sorted(PRIORITY_ORDER, key=PRIORITY_ORDER.__getitem__))  # highest first

# -- state ----------------------------------------------------------------------------


class Entry:
    """A queued or in-flight action and the deliveries it answers (none: a series
    flush the actuator made itself, ``eventing``)."""

    __slots__ = ("action", "attempt", "cost", "tickets", "write")

    def __init__(
        self, action: AnyAction, *, ticket: int | None, attempt: int,
        write: EventWrite | None = None,
    ) -> None:  # fmt: skip
        self.action, self.attempt, self.write = action, attempt, write
        self.tickets = [ticket] if ticket is not None else []
        self.cost = cost_of(action)


class State:
    __slots__ = (
        "attempts", "bucket", "entries", "events", "in_flight", "latest", "limited_seconds",
        "limited_since", "limits", "queues", "rng", "seen", "share",
    )  # fmt: skip

    def __init__(self, limits: Limits, *, now: float) -> None:
        self.limits = limits
        self.bucket = Bucket(qps=limits.qps, burst=limits.burst, now=now)
        self.share = assured(qps=limits.qps, share=limits.validation_share, now=now)
        # ids by priority class, in arrival order; an id whose entry is gone is skipped
        self.queues: dict[str, deque[str]] = {p: deque() for p in CLASSES}
        self.entries: dict[str, Entry] = {}  # queued
        self.in_flight: dict[str, Entry] = {}
        self.seen: OrderedDict[str, tuple[float, str]] = OrderedDict()  # id -> (at, outcome)
        self.attempts: dict[str, int] = {}  # ids nak'ed for a retry -> attempts so far
        self.rng = random.Random(limits.seed)
        self.limited_since: float | None = None
        self.limited_seconds = 0.0  # total time the head of the queue waited for tokens
        self.events = Events(limits.events)  # Event series and budgets
        self.latest = Latest()  # only the latest status per object, one write at a time

    def depth(self) -> dict[str, int]:
        counts = dict.fromkeys(PRIORITY_ORDER, 0)
        for entry in self.entries.values():
            counts[entry.action.priority] += 1
        return counts


def initial(limits: Limits, *, now: float) -> State:
    return State(limits, now=now)


def cost_of(action: AnyAction) -> int:
    """Estimated API writes: one per gang member (a pod condition per pod) and per
    ResourceClaim a bind allocates, two (delete, create) for a RecreatePod, one for
    anything else."""
    if isinstance(action, BindGang):
        return max(len(action.bindings) + sum(len(b.claims) for b in action.bindings), 1)
    if isinstance(action, EvictGang):
        return max(len(action.pods), 1)
    if isinstance(action, SetPodCondition):
        return max(len(action.pods), 1)
    if isinstance(action, RecreatePod):
        return 2
    return 1


def members_of(action: AnyAction) -> int:
    """Pods one action names (0: an action about one object)."""
    if isinstance(action, BindGang):
        return len(action.bindings)
    if isinstance(action, EvictGang | SetPodCondition):
        return len(action.pods)
    return 0


def action_type(action: AnyAction) -> str:
    tag = type(action).__struct_config__.tag
    return str(tag)


def result(
    action: AnyAction, *, outcome: Outcome, now: float, error: str = "", attempts: int = 1
) -> ActionResult:
    return ActionResult(
        action_id=action.id, action_type=action_type(action), by=action.by, at=now,
        outcome=outcome, error=error, attempts=attempts,
    )  # fmt: skip


# -- the step -------------------------------------------------------------------------


def step(state: State, event: Event, now: float) -> tuple[State, tuple[Output, ...]]:
    outputs: list[Output] = []
    _forget_expired(state, now)
    if isinstance(event, Arrived):  # 1. admit
        _admit(state, event, now, outputs)
    elif isinstance(event, Finished):  # 2. settle
        _settle(state, event, now, outputs)
    _flush_events(state, now)
    _dispatch(state, now, outputs)  # 3. dispatch
    due = state.events.next_due()
    if due is not None:
        outputs.append(WakeAt(at=due))
    return state, tuple(outputs)


def _admit(state: State, event: Arrived, now: float, outputs: list[Output]) -> None:
    action = event.action
    if event.untrusted:  # failed and dead-lettered; its id is not remembered, so a forged
        # action cannot take the id of a real one from the seen set
        res = result(action, outcome="failed", now=now, error=event.untrusted)
        outputs.append(Report(result=res, action=action))
        term = Settle(tickets=(event.ticket,), verdict="term", reason=event.untrusted,
                      error_class="bad-input")  # fmt: skip
        outputs.append(term)
        return
    if event.fenced or event.refused:  # answered stale, its id left free: the producer's
        # new leader decides the same (ids are made from the decision), and its copy applies
        res = result(action, outcome="stale", now=now, error=event.fenced or event.refused)
        res = msgspec.structs.replace(res, fenced=bool(event.fenced))
        outputs.append(Report(result=res, action=action))
        outputs.append(Settle(tickets=(event.ticket,), verdict="ack"))
        return
    seen = state.seen.get(action.id)
    if seen is None and event.done:  # an earlier run applied it: remember, answer already
        _remember(state, action.id, outcome=event.done, now=now)
        seen = (now, event.done)
    if seen is not None:
        error = f"duplicate: action id already handled with outcome {seen[1]!r}"
        report = Report(
            result=result(action, outcome="already", now=now, error=error), action=action
        )
        outputs.append(report)
        outputs.append(Settle(tickets=(event.ticket,), verdict="ack"))
        return
    members = members_of(action)
    if members > state.limits.max_members:
        why = (
            f"refused: {members} members in one {action_type(action)}, more than the "
            f"{state.limits.max_members} one action may name (BATON_ACTUATOR_MAX_MEMBERS)"
        )
        _remember(state, action.id, outcome="failed", now=now)
        outputs.append(Report(result=result(action, outcome="failed", now=now, error=why),
                              action=action))  # fmt: skip
        outputs.append(Settle(tickets=(event.ticket,), verdict="ack"))
        return
    held = state.entries.get(action.id) or state.in_flight.get(action.id)
    if held is not None:  # a redelivery of what we hold: settle both deliveries together
        held.tickets.append(event.ticket)
        return
    if len(state.entries) >= state.limits.queue_limit:
        delay = len(state.entries) / state.limits.qps if state.limits.qps > 0 else 1.0
        full = Settle(tickets=(event.ticket,), verdict="nak", delay=delay, reason="queue full")
        outputs.append(full)
        return
    write = None
    if isinstance(action, RecordEvent):
        planned = state.events.record(action, now)
        if isinstance(planned, str):  # joined a series, or over budget: nothing to write now
            _answer(state, action, event.ticket, planned, now, outputs)
            return
        write = planned
    if not _supersede(state, event, now, outputs):
        return
    attempt = max(event.delivered, state.attempts.get(action.id, 0) + 1)
    state.attempts[action.id] = attempt
    _queue(state, Entry(action, ticket=event.ticket, attempt=attempt, write=write))


def _queue(state: State, entry: Entry) -> None:
    state.entries[entry.action.id] = entry
    _push(state, entry)


def _push(state: State, entry: Entry) -> None:
    state.queues[entry.action.priority].append(entry.action.id)


def _answer(
    state: State, action: AnyAction, ticket: int, why: str, now: float, outputs: list[Output],
    *, outcome: Outcome | None = None,
) -> None:  # fmt: skip
    """An action that needs no write of its own: an Event ``already`` counted in its
    series or ``dropped`` over budget; a status ``stale`` behind a newer one."""
    outcome = outcome or ("dropped" if why.startswith("dropped") else "already")
    _remember(state, action.id, outcome=outcome, now=now)
    outputs.append(
        Report(result=result(action, outcome=outcome, now=now, error=why), action=action)
    )
    outputs.append(Settle(tickets=(ticket,), verdict="ack"))


def _supersede(state: State, event: Arrived, now: float, outputs: list[Output]) -> bool:
    """A newer status for the same object replaces the one still queued: only the latest
    per object matters (the older is answered ``stale`` and acked). False: the arriving
    one is itself older than one already sent (a redelivery), and answered so."""
    action = event.action
    superseded = state.latest.arrive(action, event.seq)
    if superseded == STALE:
        why = "stale: a newer status of the same object was already sent"
        _answer(state, action, event.ticket, why, now, outputs, outcome="stale")
        return False
    older = state.entries.pop(superseded, None)
    if older is None:
        return True
    why = f"superseded by {action.id} before it was applied"
    _remember(state, older.action.id, outcome="stale", now=now)
    res = result(older.action, outcome="stale", now=now, error=why, attempts=older.attempt)
    outputs.append(Report(result=res, action=older.action))
    if older.tickets:
        outputs.append(Settle(tickets=tuple(older.tickets), verdict="ack"))
    return True


def _flush_events(state: State, now: float) -> None:
    """Series with repeats not yet written get a write of their own (no delivery)."""
    for event, write in state.events.flush(now):
        _queue(state, Entry(event, ticket=None, attempt=1, write=write))


def _settle(state: State, event: Finished, now: float, outputs: list[Output]) -> None:
    entry = state.in_flight.pop(event.action_id, None)
    if entry is None:
        return
    parked = state.entries.get(state.latest.finished(entry.action))
    if parked is not None:  # the next write of the same object may go now
        _push(state, parked)
    if event.calls is not None and event.calls != entry.cost:
        state.bucket.charge(event.calls - entry.cost)
    tickets = tuple(entry.tickets)
    limits = state.limits
    if event.outcome == "retry" and entry.attempt < limits.max_attempts:
        delay = backoff(
            entry.attempt, base=limits.backoff_base, cap=limits.backoff_cap, rng=state.rng
        )
        outputs.append(Settle(tickets=tickets, verdict="nak", delay=delay, reason=event.error))
        return
    outcome: Outcome = "failed" if event.outcome == "retry" else event.outcome
    error = event.error
    if event.outcome == "retry":
        error = f"gave up after {entry.attempt} attempts: {event.error}"
    state.attempts.pop(event.action_id, None)
    _remember(state, event.action_id, outcome=outcome, now=now)
    if not tickets:  # a series flush the actuator made itself: nobody waits for a result
        return
    res = result(entry.action, outcome=outcome, now=now, error=error, attempts=entry.attempt)
    outputs.append(Report(result=res, action=entry.action))
    if event.outcome == "retry":
        outputs.append(Settle(tickets=tickets, verdict="term", reason=error))
    else:
        outputs.append(Settle(tickets=tickets, verdict="ack"))


def _dispatch(state: State, now: float, outputs: list[Output]) -> None:
    while len(state.in_flight) < state.limits.concurrency:
        picked = _pick(state, now, outputs)
        if picked is None:
            return
        priority, entry, wait = picked
        if wait > 0:
            if state.limited_since is None:
                state.limited_since = now
            outputs.append(WakeAt(at=now + wait))
            return
        if state.limited_since is not None:
            state.limited_seconds += now - state.limited_since
            state.limited_since = None
        state.queues[priority].popleft()
        if not state.latest.may_start(entry.action):
            continue  # its object's previous write is in flight: it waits aside
        del state.entries[entry.action.id]
        state.in_flight[entry.action.id] = entry
        outputs.append(Apply(action=entry.action, attempt=entry.attempt, event=entry.write))


def _pick(state: State, now: float, outputs: list[Output]) -> tuple[str, Entry, float] | None:
    """The next head to apply and the seconds it must wait for tokens (0: taken): the
    highest class's, unless validation, lower, has tokens of its assured share for its
    own head. Health is never passed. Waiting, it wakes for whichever can go first."""
    top: tuple[str, Entry] | None = None
    below: Entry | None = None  # the assured class's head, behind ``top``
    for priority in CLASSES:
        if top is not None and PRIORITY_ORDER[priority] > PRIORITY_ORDER[ASSURED]:
            break  # nothing lower is taken before the highest head
        entry = _head(state, priority, now, outputs)
        if entry is None:
            continue
        if top is None:
            top = (priority, entry)
        elif priority == ASSURED and top[0] != "health":
            below = entry
    if top is None:
        return None
    share, bucket = state.share, state.bucket
    if (
        below is not None
        and share is not None
        and share.take(priority=ASSURED, cost=below.cost, now=now, reserve=0.0) == 0.0
    ):
        # charged to the main bucket too, into debt if need be: the classes above
        # get the rest of the rate, and a large bind refilling for its turn is
        # not nibbled away one preflight write at a time
        bucket.spend(below.cost, now)
        return ASSURED, below, 0.0
    priority, entry = top
    wait = bucket.take(priority=priority, cost=entry.cost, now=now)
    if wait > 0 and below is not None and share is not None:
        wait = min(wait, share.wait(priority=ASSURED, cost=below.cost, now=now, reserve=0.0))
    return priority, entry, wait


def _head(state: State, priority: str, now: float, outputs: list[Output]) -> Entry | None:
    """The first entry queued in a class, dropping ids superseded while queued and
    answering those whose ``expires`` passed."""
    queue = state.queues[priority]
    while queue:
        entry = state.entries.get(queue[0])
        if entry is None:  # superseded while queued
            queue.popleft()
            continue
        if entry.action.expires and now > entry.action.expires:
            queue.popleft()
            _expire(state, state.entries.pop(entry.action.id), now, outputs)
            continue
        return entry
    return None


def _expire(state: State, entry: Entry, now: float, outputs: list[Output]) -> None:
    """An action whose ``expires`` passed while it waited for tokens: its producer has
    forgotten it and decided again (gang re-places a gang whose pods did not show up
    bound), so applying it now would act on capacity promised to someone else. It was
    checked on arrival too; a queue behind the rate limit can outlast the deadline."""
    action = entry.action
    why = f"stale: expired {now - action.expires:.1f} s ago while queued (at {action.expires})"
    _remember(state, action.id, outcome="stale", now=now)
    res = result(action, outcome="stale", now=now, error=why, attempts=entry.attempt)
    outputs.append(Report(result=res, action=action))
    if entry.tickets:
        outputs.append(Settle(tickets=tuple(entry.tickets), verdict="ack"))


def _remember(state: State, action_id: str, *, outcome: str, now: float) -> None:
    state.seen[action_id] = (now, outcome)
    state.seen.move_to_end(action_id)
    while len(state.seen) > state.limits.seen_limit:
        state.seen.popitem(last=False)


def _forget_expired(state: State, now: float) -> None:
    horizon = now - state.limits.seen_ttl
    while state.seen:
        oldest = next(iter(state.seen.values()))
        if oldest[0] >= horizon:
            return
        state.seen.popitem(last=False)
