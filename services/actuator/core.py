"""The actuator's decisions, pure: what to apply next, when, and what each outcome means.

Events come in with the time (``now``); outputs say what the shell must do. The state
is one object the step owns (a heap and a few dicts, updated in place so ten thousand
queued actions cost O(log n) each); nothing here reads a clock, does I/O or draws an
unseeded random number, so a recorded event sequence replays to the same outputs.

The cycle for every event, as numbered steps in ``step``:
1. admit an arrived action (or recognise it as a duplicate, or push back when full),
2. settle a finished one (ack, nak with backoff, or term after the last attempt),
3. dispatch: while a slot is free, take the highest-priority action whose token cost
   the bucket can pay; otherwise say when to wake.
"""

from __future__ import annotations

import heapq
import random
from collections import OrderedDict
from typing import Literal

import msgspec

from proto.actions import (
    PRIORITY_ORDER,
    ActionResult,
    AnyAction,
    BindGang,
    EvictGang,
    Outcome,
)
from services.actuator.pacing import Bucket
from services.actuator.retrying import backoff


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    qps: float = 200.0  # sustained API writes per second; 0 or less means unlimited
    burst: int = 400
    concurrency: int = 32  # actions applied at once
    queue_limit: int = 20_000  # actions held in memory; more are nak'ed with a delay
    max_attempts: int = 5
    backoff_base: float = 0.2
    backoff_cap: float = 30.0
    seen_limit: int = 100_000  # action ids remembered (LRU) ...
    seen_ttl: float = 3600.0  # ... for at most this long
    seed: int = 0


# -- events in ------------------------------------------------------------------------


class Arrived(msgspec.Struct, frozen=True, kw_only=True, tag="actuator.arrived.v1"):
    """An action delivered from the ACTIONS stream; ``ticket`` names the delivery."""

    action: AnyAction
    ticket: int
    delivered: int = 1  # JetStream's delivery count, when the bus knows it


class Finished(msgspec.Struct, frozen=True, kw_only=True, tag="actuator.finished.v1"):
    """The shell applied an action: an outcome, or ``retry`` for a retryable failure."""

    action_id: str
    outcome: Outcome | Literal["retry"]
    error: str = ""
    calls: int = 0  # API writes made, to charge the bucket for more than estimated


class Tick(msgspec.Struct, frozen=True, kw_only=True, tag="actuator.tick.v1"):
    """Time passed (a wake-up the core asked for)."""


Event = Arrived | Finished | Tick

# -- outputs --------------------------------------------------------------------------


class Apply(msgspec.Struct, frozen=True, kw_only=True, tag="actuator.apply.v1"):
    action: AnyAction
    attempt: int


class Settle(msgspec.Struct, frozen=True, kw_only=True, tag="actuator.settle.v1"):
    tickets: tuple[int, ...]
    verdict: Literal["ack", "nak", "term"]
    delay: float = 0.0
    reason: str = ""


class Report(msgspec.Struct, frozen=True, kw_only=True, tag="actuator.report.v1"):
    result: ActionResult


class WakeAt(msgspec.Struct, frozen=True, kw_only=True, tag="actuator.wake.v1"):
    at: float


Output = Apply | Settle | Report | WakeAt

# -- state ----------------------------------------------------------------------------


class Entry:
    __slots__ = ("action", "attempt", "cost", "tickets")

    def __init__(self, action: AnyAction, *, ticket: int, attempt: int) -> None:
        self.action, self.tickets, self.attempt = action, [ticket], attempt
        self.cost = cost_of(action)


class State:
    __slots__ = (
        "attempts", "bucket", "entries", "heap", "in_flight",
        "limited_seconds", "limited_since", "limits", "rng", "seen", "seq",
    )  # fmt: skip

    def __init__(self, limits: Limits, *, now: float) -> None:
        self.limits = limits
        self.bucket = Bucket(qps=limits.qps, burst=limits.burst, now=now)
        self.heap: list[tuple[int, int, str]] = []  # (priority order, arrival seq, id)
        self.entries: dict[str, Entry] = {}  # queued
        self.in_flight: dict[str, Entry] = {}
        self.seen: OrderedDict[str, tuple[float, str]] = OrderedDict()  # id -> (at, outcome)
        self.attempts: dict[str, int] = {}  # ids nak'ed for a retry -> attempts so far
        self.rng = random.Random(limits.seed)
        self.seq = 0
        self.limited_since: float | None = None
        self.limited_seconds = 0.0  # total time the head of the queue waited for tokens

    def depth(self) -> dict[str, int]:
        counts = dict.fromkeys(PRIORITY_ORDER, 0)
        for entry in self.entries.values():
            counts[entry.action.priority] += 1
        return counts


def initial(limits: Limits, *, now: float) -> State:
    return State(limits, now=now)


def cost_of(action: AnyAction) -> int:
    """Estimated API writes: one per gang member, one for anything else."""
    if isinstance(action, BindGang):
        return max(len(action.bindings), 1)
    if isinstance(action, EvictGang):
        return max(len(action.pods), 1)
    return 1


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
    _dispatch(state, now, outputs)  # 3. dispatch
    return state, tuple(outputs)


def _admit(state: State, event: Arrived, now: float, outputs: list[Output]) -> None:
    action = event.action
    seen = state.seen.get(action.id)
    if seen is not None:
        error = f"duplicate: action id already handled with outcome {seen[1]!r}"
        outputs.append(Report(result=result(action, outcome="already", now=now, error=error)))
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
    attempt = max(event.delivered, state.attempts.get(action.id, 0) + 1)
    state.attempts[action.id] = attempt
    state.entries[action.id] = Entry(action, ticket=event.ticket, attempt=attempt)
    state.seq += 1
    heapq.heappush(state.heap, (PRIORITY_ORDER[action.priority], state.seq, action.id))


def _settle(state: State, event: Finished, now: float, outputs: list[Output]) -> None:
    entry = state.in_flight.pop(event.action_id, None)
    if entry is None:
        return
    if event.calls > entry.cost:
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
    res = result(entry.action, outcome=outcome, now=now, error=error, attempts=entry.attempt)
    outputs.append(Report(result=res))
    if event.outcome == "retry":
        outputs.append(Settle(tickets=tickets, verdict="term", reason=error))
    else:
        outputs.append(Settle(tickets=tickets, verdict="ack"))


def _dispatch(state: State, now: float, outputs: list[Output]) -> None:
    while state.heap and len(state.in_flight) < state.limits.concurrency:
        _, _, action_id = state.heap[0]
        entry = state.entries[action_id]
        wait = state.bucket.take(priority=entry.action.priority, cost=entry.cost, now=now)
        if wait > 0:
            if state.limited_since is None:
                state.limited_since = now
            outputs.append(WakeAt(at=now + wait))
            return
        if state.limited_since is not None:
            state.limited_seconds += now - state.limited_since
            state.limited_since = None
        heapq.heappop(state.heap)
        del state.entries[action_id]
        state.in_flight[action_id] = entry
        outputs.append(Apply(action=entry.action, attempt=entry.attempt))


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
