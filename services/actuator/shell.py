"""The actuator's I/O: ACTIONS in, API calls out, a result event per action.

Tasks share one core state, which only the driver touches:
- the reader pulls actions from the durable ``actuator`` consumer and hands them
  to the driver as ``Arrived`` events (the message is kept, unacked, by ticket);
- the driver feeds events to ``core.step`` and carries out its outputs: start an
  apply task, settle deliveries, publish results, sleep until a wake-up;
- the outbox publishes result events (pipelined), then acks/naks/terms, so an
  action is acknowledged only after its result is stored;
- a keep-alive marks held deliveries in progress so they are not redelivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any, Literal

import structlog

from libs.bus import Bus, Message, Outgoing
from proto import subjects
from proto.actions import AnyAction, Outcome
from services.actuator import applying, core, metrics
from services.actuator.calling import Api, ApiError

log = structlog.get_logger("baton.actuator")
DURABLE = "actuator"


def result_subject(action_subject: str) -> str:
    """``baton.<c>.action.<kind>.<key...>`` -> ``baton.<c>.result.<kind>.<key...>``."""
    prefix, cluster, _, rest = action_subject.split(".", 3)
    return ".".join([prefix, cluster, subjects.RESULT, rest])


class Actuator:
    def __init__(
        self, bus: Bus, *, api: Api | None, limits: core.Limits, dry_run: bool = False,
        bind_concurrency: int = 64, ack_wait: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:  # fmt: skip
        if api is None and not dry_run:
            raise ValueError("an API client is needed unless dry_run")
        self.bus, self.api, self.limits, self.dry_run = bus, api, limits, dry_run
        self.bind_concurrency, self.ack_wait, self.clock = bind_concurrency, ack_wait, clock
        self.state = core.initial(limits, now=clock())
        self.events: asyncio.Queue[core.Event] = asyncio.Queue()
        self.outbox: asyncio.Queue[list[core.Output]] = asyncio.Queue()
        self.messages: dict[int, Message[Any]] = {}
        self.subjects: dict[str, str] = {}  # action id -> the subject it came on
        self.tickets = 0
        self.wake_at: float | None = None
        self.limited_reported = 0.0
        self.applying: set[asyncio.Task[None]] = set()
        self.ready = False

    async def run(self) -> None:
        """Run until cancelled; in-flight applies finish their current action first."""
        sub = self.bus.consume(
            subjects.wildcard(self.bus.cluster, subjects.ACTION, ">"), type_=AnyAction,
            durable=DURABLE, max_deliver=self.limits.max_attempts + 1, ack_wait=self.ack_wait,
        )  # fmt: skip
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._read(sub))
                group.create_task(self._drive())
                group.create_task(self._send())
                group.create_task(self._keep_alive())
        finally:
            await sub.close()
            if self.applying:
                await asyncio.wait(self.applying)

    async def _read(self, sub: Any) -> None:
        await sub.start()
        self.ready = True
        async for msg in sub:
            self.tickets += 1
            self.messages[self.tickets] = msg
            self.subjects[msg.event.id] = msg.subject
            event = core.Arrived(action=msg.event, ticket=self.tickets, delivered=msg.deliveries)
            self.events.put_nowait(event)

    async def _keep_alive(self) -> None:
        """Tell JetStream that held deliveries are still being worked on (waiting for
        tokens or a slot), so ack_wait does not expire and redeliver them."""
        while True:
            await asyncio.sleep(self.ack_wait / 3)
            for msg in list(self.messages.values()):
                with contextlib.suppress(Exception):
                    await msg.raw.in_progress()

    async def _drive(self) -> None:
        while True:
            event = await self._next_event()
            batch: list[core.Output] = []
            while True:
                self.state, outputs = core.step(self.state, event, self.clock())
                batch.extend(outputs)
                if self.events.empty():
                    break
                event = self.events.get_nowait()
            self._carry_out(batch)

    async def _next_event(self) -> core.Event:
        if self.wake_at is None:
            return await self.events.get()
        timeout = max(self.wake_at - self.clock(), 0.0)
        try:
            return await asyncio.wait_for(self.events.get(), timeout)
        except TimeoutError:
            return core.Tick()
        finally:
            self.wake_at = None

    def _carry_out(self, outputs: list[core.Output]) -> None:
        settling: list[core.Output] = []
        for out in outputs:
            if isinstance(out, core.Apply):
                task = asyncio.create_task(self._apply(out.action, out.attempt))
                self.applying.add(task)
                task.add_done_callback(self.applying.discard)
            elif isinstance(out, core.WakeAt):
                self.wake_at = out.at if self.wake_at is None else min(self.wake_at, out.at)
            else:
                settling.append(out)
        if settling:
            self.outbox.put_nowait(settling)
        for priority, depth in self.state.depth().items():
            metrics.QUEUE_DEPTH.labels(priority=priority).set(depth)
        metrics.IN_FLIGHT.set(len(self.state.in_flight))
        limited = self.state.limited_seconds
        if limited > self.limited_reported:
            metrics.RATE_LIMITED.inc(limited - self.limited_reported)
            self.limited_reported = limited

    async def _apply(self, action: AnyAction, attempt: int) -> None:
        bound = structlog.contextvars.bound_contextvars(
            action_id=action.id, action_type=core.action_type(action), attempt=attempt
        )
        with bound:
            finished = await self._outcome(action)
            if finished.outcome in ("failed", "rolled-back", "retry"):
                log.warning("action not applied", outcome=finished.outcome, error=finished.error)
            else:
                log.info("action done", outcome=finished.outcome)
        self.events.put_nowait(finished)

    async def _outcome(self, action: AnyAction) -> core.Finished:
        if self.dry_run or self.api is None:
            log.info("dry run: would apply", action=action)
            return core.Finished(action_id=action.id, outcome="would-do")
        session = self.api.session()
        outcome: Outcome | Literal["retry"]
        try:
            outcome, error = await applying.apply(
                session, action, bind_concurrency=self.bind_concurrency
            )
        except ApiError as exc:
            retry = exc.policy in ("backoff", "reread")
            outcome, error = ("retry" if retry else "failed"), str(exc)
        except Exception as exc:  # our bug: retried, then dead-lettered as one
            log.exception("applying raised")
            outcome, error = "retry", f"internal error: {type(exc).__name__}: {exc}"
        calls = session.writes
        return core.Finished(action_id=action.id, outcome=outcome, error=error, calls=calls)

    async def _send(self) -> None:
        while True:
            batch = await self.outbox.get()
            while not self.outbox.empty():
                batch.extend(self.outbox.get_nowait())
            reports = [o for o in batch if isinstance(o, core.Report)]
            await self._publish(reports)
            for out in batch:
                if isinstance(out, core.Settle):
                    await self._settle(out)

    async def _publish(self, reports: list[core.Report]) -> None:
        outgoing = []
        for report in reports:
            res = report.result
            metrics.ACTIONS.labels(type=res.action_type, outcome=res.outcome).inc()
            subject = self.subjects.pop(res.action_id, None)
            if subject is not None:
                outgoing.append(Outgoing(result_subject(subject), res, f"{res.action_id}:result"))
        while outgoing:
            try:
                await self.bus.publish_many(outgoing)
                return
            except Exception as exc:  # NATS down: results are idempotent, try again
                log.warning("publishing results failed, retrying", error=str(exc))
                await asyncio.sleep(1.0)

    async def _settle(self, out: core.Settle) -> None:
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
                    self.subjects.pop(msg.event.id, None)
                    await msg.nak(delay=out.delay)
                else:
                    await msg.term(out.reason, error_class="dependency")
