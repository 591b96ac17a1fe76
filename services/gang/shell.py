"""The gang service's I/O: bus in, core, bus out, and a cycle timer.

Inputs: ``baton.<c>.k8s.>`` (bootstrapped with ``last_per_subject``, then live) and
``baton.<c>.result.bind-gang.>`` (new results only: a placement whose result was
missed while down is forgotten after ``assume_timeout_s``). One loop feeds every
event to the core in arrival order; a timer adds a ``Tick`` every
``cycle_interval`` seconds once the K8S bootstrap has caught up (placing on a half
known cluster would double-book nodes). Outputs are published with their ids as
``Nats-Msg-Id`` before the input is acked.

With ``record_ticks`` (the default) a tick that produced an output or changed the
core's state is published as a ``RecordedTick`` on ``baton.<c>.placement.tick``,
so ``baton replay`` can feed the same ticks to a fresh core (``docs/replay.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import msgspec
import structlog

from libs.bus import Bus, Message, Outgoing, Subscription
from proto import subjects
from proto.actions import ActionResult, BindGang, CreatePod, EvictGang
from proto.k8s import K8sEvent
from proto.placement import GangPlaced, GangRestarted, GangUnschedulable
from proto.ticks import RecordedPolicy, RecordedTick
from services.gang import core, metrics

log = structlog.get_logger("baton.gang")

_KIND = {GangPlaced: "placed", GangUnschedulable: "unschedulable", GangRestarted: "restarted"}


def route(cluster: str, output: core.Output) -> tuple[str, str]:
    """(subject, msg id) for one output of the core."""
    if isinstance(output, BindGang | EvictGang):
        ns, _, name = output.gang.partition("/")
        kind = "bind-gang" if isinstance(output, BindGang) else "evict-gang"
        return subjects.subject(cluster, subjects.ACTION, kind, ns, name), output.id
    if isinstance(output, CreatePod):
        pod = output.pod
        return subjects.subject(
            cluster, subjects.ACTION, "create-pod", pod.namespace, pod.name
        ), output.id
    ns, _, name = output.gang.partition("/")
    subject = subjects.subject(cluster, subjects.PLACEMENT, _KIND[type(output)], ns, name)
    if isinstance(output, GangPlaced):
        return subject, f"{output.action_id}:placed"
    return subject, f"{subject}:{output.at}"


def tick_marks(state: core.State) -> list[tuple[object, ...]]:
    """What a cycle may change without an output: expiry (``assumed``, ``retry_after``)
    and the verdict-refresh clock (``checked_at``). Assumptions and verdict changes
    always come with an output."""
    return [(g.checked_at, g.retry_after, g.assumed is None) for g in state.cluster.gangs.values()]


class GangShell:
    def __init__(
        self,
        bus: Bus,
        *,
        state: core.State,
        interval: float = 0.5,
        dry_run: bool = False,
        clock: Callable[[], float] = time.time,
        record_ticks: bool = True,
    ) -> None:
        self.bus = bus
        self.state = state
        self.interval = interval
        self.dry_run = dry_run
        self.clock = clock
        self.caught_up = False
        self.record_ticks = record_ticks
        self._seqs = {"k8s": 0, "result": 0}  # last applied input per stream, for RecordedTick
        self._queue: asyncio.Queue[Message[Any] | None] = asyncio.Queue(maxsize=1024)

    @property
    def ready(self) -> bool:
        return self.caught_up

    async def run(self) -> None:
        cluster = self.bus.cluster
        k8s = self.bus.consume(subjects.wildcard(cluster, subjects.K8S, ">"), type_=K8sEvent,
                               deliver="last_per_subject", batch=512)  # fmt: skip
        results = self.bus.consume(
            subjects.wildcard(cluster, subjects.RESULT, "bind-gang", ">"), type_=ActionResult,
            deliver="new",
        )  # fmt: skip
        try:
            if self.record_ticks:  # replay needs the policy these decisions were made under
                await self._publish_policy()
            await k8s.start()
            await results.start()
            self.caught_up = k8s.initial_pending == 0
            async with asyncio.TaskGroup() as group:
                group.create_task(self._pump(k8s))
                group.create_task(self._pump(results))
                group.create_task(self._tick())
                await self._loop()
        finally:
            await k8s.close()
            await results.close()

    async def _publish_policy(self) -> None:
        at = self.clock()
        record = RecordedPolicy(at=at, policy=self.state.policy)
        subject = subjects.subject(self.bus.cluster, subjects.PLACEMENT, "policy")
        await self.bus.publish(subject, record, msg_id=f"policy:{at}")

    async def _pump(self, sub: Subscription[Any]) -> None:
        async for msg in sub:
            await self._queue.put(msg)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            if self.caught_up and self._queue.empty():
                await self._queue.put(None)
            elif self.caught_up:
                with contextlib.suppress(asyncio.QueueFull):
                    self._queue.put_nowait(None)

    async def _loop(self) -> None:
        while True:
            msg = await self._queue.get()
            event: Any = core.Tick(at=self.clock()) if msg is None else msg.event
            now = float(getattr(event, "at", 0.0) or self.clock())
            marks = tick_marks(self.state) if msg is None and self.record_ticks else None
            started = time.perf_counter()
            self.state, outputs = core.step(self.state, event, now)
            record = None
            if msg is None:
                metrics.CYCLE_SECONDS.observe(time.perf_counter() - started)
                self._gauge()
                if marks is not None and (outputs or marks != tick_marks(self.state)):
                    record = self._tick_record(now)
            else:
                stream = "result" if isinstance(event, ActionResult) else "k8s"
                self._seqs[stream] = max(self._seqs[stream], msg.seq)
            await self._publish(outputs, record=record)
            if msg is not None:
                with contextlib.suppress(Exception):  # a lost ack is a redelivery: idempotent
                    await msg.ack()
                if not self.caught_up and msg.pending == 0 and isinstance(event, K8sEvent):
                    self.caught_up = True
                    log.info("caught up", nodes=len(self.state.cluster.nodes),
                             pods=len(self.state.cluster.pods))  # fmt: skip

    def _tick_record(self, at: float) -> Outgoing:
        tick = RecordedTick(at=at, k8s_seq=self._seqs["k8s"], result_seq=self._seqs["result"])
        subject = subjects.subject(self.bus.cluster, subjects.PLACEMENT, "tick")
        return Outgoing(subject, tick, f"tick:{at}")

    async def _publish(
        self, outputs: tuple[core.Output, ...], *, record: Outgoing | None = None
    ) -> None:
        items = [record] if record is not None else []
        for output in outputs:
            is_action = isinstance(output, BindGang | EvictGang | CreatePod)
            if is_action:
                metrics.ACTIONS.labels(type=type(output).__name__).inc()
            else:
                metrics.DECISIONS.labels(kind=_KIND[type(output)]).inc()
            self._log(output)
            if is_action and self.dry_run:
                continue
            subject, msg_id = route(self.bus.cluster, output)
            items.append(Outgoing(subject, output, msg_id))
        delay = 0.2
        while items:
            try:
                await self.bus.publish_many(items)
                return
            except Exception as exc:  # NATS down: the state has moved, so keep trying
                log.warning("publish failed, retrying", error=repr(exc), outputs=len(items))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _log(self, output: core.Output) -> None:
        if isinstance(output, GangPlaced):
            log.info("placed", gang=output.gang, members=len(output.bindings), level=output.level,
                     domains=output.domains, action_id=output.action_id)  # fmt: skip
        elif isinstance(output, GangUnschedulable):
            log.info("unschedulable", gang=output.gang, reason=output.reason,
                     need=msgspec.to_builtins(output.need))  # fmt: skip
        elif isinstance(output, GangRestarted):
            log.warning("restarting gang", gang=output.gang, node=output.node, reason=output.reason)

    def _gauge(self) -> None:
        cluster = self.state.cluster
        pending = sum(1 for g in cluster.gangs.values() if g.pending and not g.bound)
        metrics.PENDING_GANGS.set(pending)
        usable = sum(1 for n in cluster.nodes.values() if n.usable)
        metrics.NODES.labels(usable="true").set(usable)
        metrics.NODES.labels(usable="false").set(len(cluster.nodes) - usable)
