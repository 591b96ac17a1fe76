"""The shell every simple service shares: feed bus events to a pure core, publish its outputs.

A core is ``step(state, event, now) -> (state, outputs)``. For each message:

1. decide: ``core_step(state, msg.event, now(event))`` (a raise is our bug: retry, then dead-letter)
2. commit: publish every routed output with its msg id (NATS down: retry later)
3. keep the new state and ack; the state only moves once its outputs are stored

so a restart or redelivery repeats a decision at most, and msg ids drop the repeat.

Contract: ``core_step`` must not change the state it is given (return a new one, sharing
what did not change). When publishing fails the message is retried against the state
kept from before it; a core that changed that state in place would not decide again on
the retry, and the outputs lost with the failed publish would never be sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

import msgspec
import structlog
from prometheus_client import Counter, Histogram

from libs.bus import Bus, Delivery, Message, Outgoing, Subscription

S = TypeVar("S")
Step = Callable[[S, Any, float], tuple[S, Sequence[Any]]]
Route = Callable[[Any], tuple[str, str | None] | None]  # output -> (subject, msg_id), None: skip

log = structlog.get_logger("baton.service")

HANDLED = Counter(
    "baton_events_handled_total", "Bus events handled by a core", ["service", "type", "outcome"]
)
HANDLE_SECONDS = Histogram(
    "baton_handle_seconds", "Time to decide, publish and ack one event", ["service"]
)


class Input(NamedTuple):
    """What a core consumes; a plain ``(filter, type, deliver)`` tuple works too."""

    filter_subject: str
    type_: Any
    deliver: Delivery = "last_per_subject"
    durable: str | None = None  # None: an ephemeral consumer, rebuilt at every start
    max_deliver: int = 5  # then dead-letter


@dataclass
class CoreStatus(Generic[S]):
    """What ``run_core`` has done so far: for ``/readyz``, metrics and tests."""

    state: S
    handled: int = 0
    caught_up: bool = False  # every input has delivered what it held at start
    _behind: set[int] = field(default_factory=set)


def event_time(event: Any) -> float:
    """Time comes in with the event (``at``), so a replay decides exactly the same."""
    at = getattr(event, "at", None)
    return float(at) if isinstance(at, int | float) else time.time()


async def run_core(
    bus: Bus,
    *,
    name: str,
    core_step: Step[S],
    state: S,
    inputs: Sequence[Input | tuple[str, Any, Delivery]],
    route: Route,
    now: Callable[[Any], float] = event_time,
    status: CoreStatus[S] | None = None,
    batch: int = 256,
) -> None:
    """Run until cancelled; the message in hand is finished (published and acked) first."""
    status = status if status is not None else CoreStatus(state)
    status.state = state
    subs = [_subscribe(bus, Input(*i), batch=batch) for i in inputs]
    queue: asyncio.Queue[tuple[int, Message[Any]]] = asyncio.Queue(maxsize=batch)
    try:
        for sub in subs:
            await sub.start()
        status._behind = {i for i, sub in enumerate(subs) if sub.initial_pending > 0}
        status.caught_up = not status._behind
        async with asyncio.TaskGroup() as group:
            for index, sub in enumerate(subs):
                group.create_task(_pump(index, sub, queue))
            while True:
                index, msg = await queue.get()
                handling = asyncio.ensure_future(
                    _handle(
                        bus, msg, name=name, step=core_step, route=route, now=now, status=status
                    )
                )
                try:
                    await asyncio.shield(handling)
                except asyncio.CancelledError:
                    await handling  # finish the message in hand, then stop
                    raise
                _note_progress(status, index, msg)
    finally:
        await _release(queue)
        for sub in subs:
            await sub.close()


def _subscribe(bus: Bus, spec: Input, *, batch: int) -> Subscription[Any]:
    return bus.consume(
        spec.filter_subject,
        type_=spec.type_,
        durable=spec.durable,
        deliver=spec.deliver,
        batch=batch,
        max_deliver=spec.max_deliver,
    )


async def _pump(index: int, sub: Subscription[Any], queue: asyncio.Queue[Any]) -> None:
    async for msg in sub:
        await queue.put((index, msg))


async def _handle(
    bus: Bus,
    msg: Message[Any],
    *,
    name: str,
    step: Step[S],
    route: Route,
    now: Callable[[Any], float],
    status: CoreStatus[S],
) -> None:
    started = time.perf_counter()
    event = msg.event
    with structlog.contextvars.bound_contextvars(subject=msg.subject, seq=msg.seq, key=_key(msg)):
        try:
            new_state, outputs = step(status.state, event, now(event))
        except Exception as exc:
            log.exception("core raised", error=repr(exc))
            gave_up = await msg.fail(f"{type(exc).__name__}: {exc}", error_class="bug")
            outcome = "dead-lettered" if gave_up else "retried"
        else:
            outcome = await _commit(bus, msg, outputs, route=route)
            if outcome == "ok":
                status.state = new_state
                status.handled += 1
    HANDLED.labels(service=name, type=_type_name(event), outcome=outcome).inc()
    HANDLE_SECONDS.labels(service=name).observe(time.perf_counter() - started)


async def _commit(bus: Bus, msg: Message[Any], outputs: Sequence[Any], *, route: Route) -> str:
    items = []
    for output in outputs:
        target = route(output)
        if target is not None:
            items.append(Outgoing(target[0], output, target[1]))
    try:
        if items:
            await bus.publish_many(items)
    except Exception as exc:
        log.warning("publish failed, will retry", error=repr(exc), outputs=len(items))
        gave_up = await msg.fail(f"publishing outputs: {exc!r}", error_class="dependency")
        return "dead-lettered" if gave_up else "retried"
    await msg.ack()
    return "ok"


def _note_progress(status: CoreStatus[Any], index: int, msg: Message[Any]) -> None:
    if index in status._behind and msg.pending == 0:
        status._behind.discard(index)
        status.caught_up = not status._behind
        if status.caught_up:
            log.info("caught up", handled=status.handled)


async def _release(queue: asyncio.Queue[tuple[int, Message[Any]]]) -> None:
    """Messages pulled but not handled go back at once (not after ack_wait)."""
    while not queue.empty():
        _, msg = queue.get_nowait()
        with contextlib.suppress(Exception):
            await msg.nak()


def _key(msg: Message[Any]) -> str:
    """``team-a/job7-w-0`` for ``baton.c1.k8s.pod.team-a.job7-w-0``."""
    return "/".join(msg.subject.split(".")[4:]).replace("_", ".")


def _type_name(event: Any) -> str:
    if isinstance(event, msgspec.Struct):
        tag = type(event).__struct_config__.tag
        if isinstance(tag, str):
            return tag
    return type(event).__name__
