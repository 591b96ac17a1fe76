"""The actuator's edges: ACTIONS in, API calls out, a result event per action.

``Desk`` is both the actuator's feed and the handler of its effects, because they
share the deliveries in hand:
- its readers pull actions from four durable consumers, ``actuator-placing`` (binds,
  gang evictions, pod recreations: ``PLACING``), ``actuator-marking`` (admission marks,
  team labels and taints, annotations: ``MARKING``), ``actuator`` (the rest that changes
  the cluster: preflight pods, node marks, evictions, scaling...) and
  ``actuator-telling`` (status, conditions, Events: ``TELLING``), and hand them to the
  core as ``Arrived`` events (the message is kept, unacked, by ticket). Several,
  because a consumer delivers in stream order with a bounded window of unacked
  messages: with one, a bind waited behind every status write published before it
  (minutes, at 1,000 nodes with thousands of waiting gangs), at 7,500 nodes behind
  ~20,000 preflight writes, and preflight pods behind thousands of admission marks;
  the core's priorities never saw it;
- ``apply`` runs an API call in a task and hands its ``Finished`` back as an input;
- ``wake`` brings a ``Tick`` at the time the core asked for (rate limiting);
- ``settle`` acks, naks or terms deliveries; the runner stores the results (the
  ``Report`` route) before it runs any effect, so an action is acknowledged only
  after its result is stored;
- a keep-alive marks held deliveries in progress so they are not redelivered.

Exactly once, across restarts and takeovers: before it hands an action to the core the
Desk looks its id up in the ``BATON_<C>_DONE`` KV bucket (written after every apply,
before the result and the ack), and judges whom it came from (``trusting``): an
action whose subject, body and producer disagree, or whose epoch is not its producer's
current lease epoch (``libs.runner.leasing.Fences``, the lease bucket when in doubt),
is failed and dead-lettered; one of an older epoch, or whose ``expires`` has passed, is
answered ``stale``. Neither is applied.

On stop, applies in flight finish their current action (within the stop grace).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Literal

import msgspec
import nats.errors
import nats.js.errors
import structlog
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from baton.libs.bus import Bus, Message, Outgoing, Subscription
from baton.libs.runner import Cut, Item, Route
from baton.libs.runner.leasing import Fences, Held, leases_bucket
from baton.libs.runtime.stopping import checkpoint, retry, where
from baton.proto import subjects
from baton.proto.actions import (
    ACTION_SUBJECTS,
    ASKS,
    MARKING,
    PLACING,
    TELLING,
    AnyAction,
    Outcome,
    action_subject,
    result_subject,
)
from baton.services.actuator import applying, core, metrics
from baton.services.actuator.calling import Api, ApiError
from baton.services.actuator.core import trusting
from baton.services.actuator.core.eventing import EventWrite

log = structlog.get_logger("baton.actuator")
DURABLE = "actuator"  # what changes the cluster, but for ...
DURABLE_PLACING = "actuator-placing"  # ... what starts or restarts gangs (``PLACING``)
DURABLE_MARKING = "actuator-marking"  # ... what records decisions on objects (``MARKING``)
DURABLE_TELLING = "actuator-telling"  # what only tells people (``TELLING``)
LOOKUPS = 256  # done-records looked up at once while deliveries arrive
WATCH_WAIT_S = 2.0  # how long an epoch the lease bucket's read missed is awaited on its watch


class Desk:
    def __init__(
        self, bus: Bus, *, api: Api | None, limits: core.Limits, clock: Callable[[], float],
        dry_run: bool = False, bind_concurrency: int = 64, ack_wait: float = 60.0,
        stop_grace: float = 10.0,
    ) -> None:  # fmt: skip
        if api is None and not dry_run:
            raise ValueError("an API client is needed unless dry_run")
        self.bus, self.api, self.limits, self.clock = bus, api, limits, clock
        self.dry_run, self.bind_concurrency, self.ack_wait = dry_run, bind_concurrency, ack_wait
        self.stop_grace = stop_grace
        self.caught_up = False
        self.inbox: asyncio.Queue[Any] = asyncio.Queue()
        self.messages: dict[int, Message[Any]] = {}
        self.tickets = 0
        self.applying: set[asyncio.Task[None]] = set()
        self._subs: list[Subscription[Any]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._wake: asyncio.TimerHandle | None = None
        self._wake_at = 0.0
        self._limited_since: float | None = None
        self.fences = Fences()
        self._awaited: dict[str, int] = {}  # producer -> the highest epoch awaited on the watch
        self._done: KeyValue | None = None

    # -- the feed ---------------------------------------------------------------------

    async def start(self) -> Cut | None:
        self._done = await done_bucket(self.bus)
        self._tasks.append(asyncio.create_task(self.fences.follow(self.bus), name="fences"))
        try:
            await asyncio.wait_for(self.fences.loaded.wait(), 10)
        except TimeoutError:
            log.warning("lease epochs not loaded in 10 s; fencing from what arrives")
        for durable, kinds in consumers().items():
            filters = tuple(subjects.wildcard(self.bus.cluster, subjects.ACTION, kind, ">")
                            for kind in kinds)  # fmt: skip
            sub = self.bus.consume(
                filters, type_=AnyAction, durable=durable,
                max_deliver=self.limits.max_attempts + 1, ack_wait=self.ack_wait,
            )  # fmt: skip
            await sub.start()
            self._subs.append(sub)
            self._tasks.append(asyncio.create_task(self._read(sub), name=f"read-{durable}"))
        self.caught_up = True
        self._tasks.append(asyncio.create_task(self._keep_alive(), name="actuator-keep-alive"))
        return None

    async def _read(self, sub: Subscription[Any]) -> None:
        """Deliveries to the core in the order they came. Each one's done-record (a KV
        read, a round trip to NATS) is looked up as it arrives, up to ``LOOKUPS`` at
        once: one at a time, a burst of 150 health verdicts waited 150 round trips in a
        row on a busy loop before the last of them reached the core."""
        looking: asyncio.Queue[tuple[Message[Any], int, asyncio.Future[str]]]
        looking = asyncio.Queue(maxsize=LOOKUPS)
        forwarding = asyncio.create_task(self._forward(looking), name="actuator-forward")
        try:
            async for msg in sub:
                checkpoint()
                self.tickets += 1
                self.messages[self.tickets] = msg
                lookup = asyncio.ensure_future(self._done_outcome(msg.event.id))
                await looking.put((msg, self.tickets, lookup))
                if forwarding.done():
                    forwarding.result()  # raise what stopped it
        finally:
            forwarding.cancel()
            await asyncio.gather(forwarding, return_exceptions=True)
            while not looking.empty():
                looking.get_nowait()[2].cancel()

    async def _forward(
        self, looking: asyncio.Queue[tuple[Message[Any], int, asyncio.Future[str]]]
    ) -> None:
        while True:
            checkpoint()  # a cancel nats-py swallowed in the last turn's lookups ends it here
            msg, ticket, lookup = await looking.get()
            action = msg.event
            verdict, why = await self._judge(msg.subject, action)
            expired = ""
            if verdict == "ok" and action.expires and self.clock() > action.expires:
                ago = self.clock() - action.expires
                expired = f"stale: expired {ago:.1f} s ago (at {action.expires})"
            event = core.Arrived(
                action=action, ticket=ticket, delivered=msg.deliveries, seq=msg.seq,
                done=await lookup, fenced=why if verdict == "stale" else "", refused=expired,
                untrusted=why if verdict == "refused" else "",
            )  # fmt: skip
            if verdict == "refused":
                log.warning("action refused", subject=msg.subject, action_id=action.id, why=why)
            self.inbox.put_nowait(event)

    async def _judge(self, subject: str, action: AnyAction) -> tuple[trusting.Verdict, str]:
        """``trusting.judge`` against the lease epochs followed; an epoch ahead of the one
        known (or a producer not yet seen) is checked again against the bucket itself
        first: a new leader's first action may arrive before its lease's watch update;
        then, if the read misses it too, on the watch for up to ``WATCH_WAIT_S``."""
        cluster = self.bus.cluster
        epochs = self.fences.epochs
        verdict, why = trusting.judge(cluster=cluster, subject=subject, action=action,
                                      epochs=epochs)  # fmt: skip
        if verdict == "refused" and action.epoch > epochs.get(action.by, 0):
            known = epochs.get(action.by, 0)
            current = await self._lease_epoch(action.by)
            if current < action.epoch and action.epoch > self._awaited.get(action.by, 0):
                # The bucket read did not show the epoch claimed (seen under load in CI,
                # cause unknown; or the action came before its lease was written). The
                # watch brings every lease write: wait for it, once per epoch claimed.
                self._awaited[action.by] = action.epoch
                log.warning("lease not read; waiting for its watch", producer=action.by,
                            claimed=action.epoch, read=current)  # fmt: skip
                reached = await self.fences.reach(action.by, action.epoch, within=WATCH_WAIT_S)
                current = max(current, reached)
            if current > epochs.get(action.by, 0):
                epochs[action.by] = current
            if epochs.get(action.by, 0) != known:
                verdict, why = trusting.judge(cluster=cluster, subject=subject, action=action,
                                              epochs=epochs)  # fmt: skip
        return verdict, why

    async def _lease_epoch(self, producer: str) -> int:
        """``producer``'s current lease epoch as the bucket has it now (0: none). The value
        written when a lease is taken carries no epoch yet: its revision is the epoch."""
        if producer not in ASKS:
            return 0

        async def read() -> KeyValue.Entry | None:
            kv = await leases_bucket(self.bus)
            try:
                return await kv.get(producer)
            except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
                return None

        # A read that fails (NATS slow or away) is tried again: refusing on it would
        # dead-let a real leader's action.
        entry = await retry(read, what="reading a lease", max_delay=1.0,
                            retry_on=(nats.errors.Error,))  # fmt: skip
        if entry is None:
            return 0
        try:
            held = msgspec.json.decode(entry.value or b"", type=Held)
        except msgspec.DecodeError:
            return 0
        return held.epoch or int(entry.revision or 0)

    async def _done_outcome(self, action_id: str) -> str:
        """The outcome an earlier run recorded for this id ('' if none, or unreadable)."""
        if self._done is None:
            return ""
        try:
            entry = await self._done.get(_done_key(action_id))
        except nats.js.errors.KeyNotFoundError:
            return ""
        except nats.errors.Error as exc:
            log.warning("done-record read failed", action_id=action_id, error=repr(exc))
            return ""
        return (entry.value or b"").decode()

    async def _record_done(self, action_id: str, outcome: str) -> None:
        """Before the result and the ack: a later run that meets the id again answers
        "already". (Lost here, the API state check still makes a repeat harmless.)"""
        done = self._done
        if done is None or outcome in ("retry", "would-do"):
            return
        key, value = _done_key(action_id), outcome.encode()
        await retry(lambda: done.put(key, value), what="recording an action done", max_delay=1.0)

    async def _keep_alive(self) -> None:
        """Tell JetStream that held deliveries are still being worked on (waiting for
        tokens or a slot), so ack_wait does not expire and redeliver them."""
        while True:
            await asyncio.sleep(self.ack_wait / 3)
            checkpoint()
            for msg in list(self.messages.values()):
                with contextlib.suppress(Exception):
                    await msg.raw.in_progress()

    async def take(self, limit: int) -> list[Item]:
        events = [await self.inbox.get()]
        while not self.inbox.empty() and len(events) < limit:
            events.append(self.inbox.get_nowait())
        return [Item(event=e) for e in events]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._wake is not None:
            self._wake.cancel()
        if self.applying:  # in-flight applies finish their current action
            _, stuck = await asyncio.wait(self.applying, timeout=self.stop_grace)
            for task in stuck:
                log.error("apply still running at stop: cancelled", task=where(task))
                task.cancel()
        for sub in self._subs:
            await sub.close()

    # -- effects ----------------------------------------------------------------------

    def apply(self, out: core.Apply) -> None:
        task = asyncio.create_task(
            self._apply(out.action, out.attempt, out.event), name=f"apply-{out.action.id}"
        )
        self.applying.add(task)
        task.add_done_callback(self.applying.discard)

    def wake(self, out: core.WakeAt) -> None:
        """The head of the queue waits for rate-limit tokens until ``out.at``."""
        if self._limited_since is None:
            self._limited_since = self.clock()
        if self._wake is not None and self._wake_at <= out.at:
            return
        if self._wake is not None:
            self._wake.cancel()
        delay = max(out.at - self.clock(), 0.0)
        self._wake_at = out.at
        self._wake = asyncio.get_running_loop().call_later(delay, self._woken)

    def _woken(self) -> None:
        self._wake = None
        if self._limited_since is not None:
            metrics.RATE_LIMITED.inc(max(0.0, self.clock() - self._limited_since))
            self._limited_since = None
        self.inbox.put_nowait(core.Tick())

    async def settle(self, out: core.Settle) -> None:
        for ticket in out.tickets:
            msg = self.messages.pop(ticket, None)
            if msg is None:
                continue
            with contextlib.suppress(Exception):  # a lost ack means a redelivery: dedup'd
                if out.verdict == "ack":
                    await msg.ack()
                elif out.verdict == "nak":
                    full = out.reason == "queue full"
                    metrics.RETRIES.labels(reason="queue-full" if full else "retryable").inc()
                    await msg.nak(delay=out.delay)
                else:
                    await msg.term(out.reason, error_class=out.error_class)

    def effects(self) -> dict[type[Any], Any]:
        return {core.Apply: self.apply, core.WakeAt: self.wake, core.Settle: self.settle}

    async def _apply(self, action: AnyAction, attempt: int, event: EventWrite | None) -> None:
        bound = structlog.contextvars.bound_contextvars(
            action_id=action.id, action_type=core.action_type(action), attempt=attempt
        )
        with bound:
            finished = await self._outcome(action, event)
            if finished.outcome in ("failed", "rolled-back", "retry"):
                log.warning("action not applied", outcome=finished.outcome, error=finished.error)
            else:
                log.info("action done", outcome=finished.outcome)
            await self._record_done(action.id, finished.outcome)
        self.inbox.put_nowait(finished)

    async def _outcome(self, action: AnyAction, event: EventWrite | None) -> core.Finished:
        if self.dry_run or self.api is None:
            log.info("dry run: would apply", action=action)
            return core.Finished(action_id=action.id, outcome="would-do")
        session = self.api.session()
        outcome: Outcome | Literal["retry"]
        try:
            outcome, error = await applying.apply(
                session, action, bind_concurrency=self.bind_concurrency, event=event
            )
        except ApiError as exc:
            retry = exc.policy in ("backoff", "reread")
            outcome, error = ("retry" if retry else "failed"), str(exc)
        except Exception as exc:  # our bug: retried, then dead-lettered as one
            log.exception("applying raised")
            outcome, error = "retry", f"internal error: {type(exc).__name__}: {exc}"
        calls = session.writes
        return core.Finished(action_id=action.id, outcome=outcome, error=error, calls=calls)


DONE = "done"


def consumers() -> dict[str, tuple[str, ...]]:
    """The actuator's durable consumers and the action kinds each reads: every kind
    ``ACTION_SUBJECTS`` knows is read by exactly one."""
    kinds = sorted({kind for kind, _ in ACTION_SUBJECTS.values()})
    return {
        DURABLE_PLACING: tuple(k for k in kinds if k in PLACING),
        DURABLE_MARKING: tuple(k for k in kinds if k in MARKING),
        DURABLE: tuple(k for k in kinds if k not in TELLING | PLACING | MARKING),
        DURABLE_TELLING: tuple(k for k in kinds if k in TELLING),
    }


async def done_bucket(bus: Bus) -> KeyValue:
    """Action ids applied, with their outcome, for a day (longer than ACTIONS keeps them)."""
    name = subjects.stream_name(bus.cluster, DONE)
    try:
        return await bus.js.key_value(name)
    except nats.js.errors.BucketNotFoundError:
        config = KeyValueConfig(
            bucket=name, history=1, ttl=24 * 3600.0, storage=StorageType.FILE,
            replicas=bus.replicas,
        )  # fmt: skip
        return await bus.js.create_key_value(config)


def _done_key(action_id: str) -> str:
    """KV keys allow ``[-/_=.a-zA-Z0-9]``; action ids are ``<what>-<hex>`` already."""
    return "".join(c if c.isalnum() or c in "-_=" else "_" for c in action_id)


def _report(cluster: str, report: core.Report) -> Outgoing:
    """One result per copy of an action (its id and its producer's epoch, as the action's
    own msg id): a deposed leader's fenced copy and the new leader's applied copy of the
    same decision are two answers, and the second must not be dropped as a duplicate."""
    res = report.result
    subject = result_subject(action_subject(cluster, report.action))
    return Outgoing(subject, res, f"{res.action_id}:{report.action.epoch}:result")


ROUTES = (Route(core.Report, to=_report),)


def observe(state: core.State, outputs: Any) -> None:
    for out in outputs:
        if isinstance(out, core.Report):
            metrics.ACTIONS.labels(type=out.result.action_type, outcome=out.result.outcome).inc()


def gauges(state: core.State) -> None:
    for priority, depth in state.depth().items():
        metrics.QUEUE_DEPTH.labels(priority=priority).set(depth)
    metrics.IN_FLIGHT.set(len(state.in_flight))
