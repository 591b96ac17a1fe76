"""The runner: the one loop every Baton service runs its core in.

For each batch of inputs from its feed:

1. decide: ``spec.step(state, event, now)`` per input, ``now`` the event's own time
   (``at``), so replay decides at the same instants; a raise is our bug: the input is
   dead-lettered with the traceback's message and the loop goes on;
2. route: every output through ``spec.routes`` (subject, msg id) or to an effect the
   shell handles (the actuator's API calls); actions are withheld in dry run, and
   stamped with who asks (``by``: the service's name, the NATS user whose subjects it
   may publish on) and its lease ``epoch``, which the actuator checks;
3. commit: publish the routed outputs until JetStream stores them (msg ids make a
   retry safe), then run effects, then settle the inputs (ack where the feed acks).

Start: take the feed's cut (snapshot + where live inputs follow), publish ``Started``
with the policy, then feed. Time: a ``Timer`` publishes ``Tick``s, which come back
through the feed in order (``proto.runner``). Stop: a cancel lets the batch in hand
finish storing its outputs for up to ``stop_grace`` seconds, then gives up naming
what was stuck; a cancel is never swallowed (``libs.runtime.stopping``).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import msgspec
import nats.errors
import structlog

from baton.libs.bus import Bus, Outgoing
from baton.libs.bus.deadletter import publish_dead_letter
from baton.libs.runner import metrics
from baton.libs.runner.feeding import BusFeed, Cut, Feed, Item
from baton.libs.runner.leasing import Lease
from baton.libs.runner.spec import SOON_S, Spec
from baton.libs.runtime.process import instance
from baton.libs.runtime.stopping import checkpoint, finish_within, retry
from baton.proto import subjects
from baton.proto.runner import Started, Tick

S = TypeVar("S")
Effect = Callable[[Any], Awaitable[None] | None]

log = structlog.get_logger("baton.runner")


class Runner(Generic[S]):
    def __init__(
        self,
        spec: Spec[S],
        *,
        bus: Bus,
        settings: msgspec.Struct,
        feed: Feed | None = None,
        effects: Mapping[type[Any], Effect] | None = None,
        dry_run: bool = False,
        stop_grace: float = 10.0,
        batch: int = 256,
        clock: Callable[[], float] = time.time,
        lease: Lease | None = None,
        recent: int = 4096,
    ) -> None:
        self.spec, self.bus, self.settings = spec, bus, settings
        self.feed: Feed = feed if feed is not None else BusFeed(bus, spec)
        self.effects = dict(effects or {})
        self.dry_run, self.stop_grace, self.batch, self.clock = dry_run, stop_grace, batch, clock
        self._children: dict[tuple[Any, str, str], Any] = {}  # labelled metric children
        self.policy = spec.policy_of(settings)
        self.state: S = spec.initial(self.policy)
        self.handled = 0
        self.started: Cut | None = None
        self._now = 0.0  # the last input's time, for an input that carries none
        self._tick_sent: float | None = None  # a tick published and not yet read back
        self.lease = lease
        # A standby decides like its leader but publishes nothing; it keeps its recent
        # outputs, published (msg ids drop the ones the old leader stored) on takeover.
        self._recent: deque[Any] = deque(maxlen=recent)
        # The actions it published as leader: one sent just as its lease ran out was
        # fenced, and its state still holds the decision, so if it leads again they go
        # out again under the new epoch (those applied are answered ``already``).
        self._sent: deque[Any] = deque(maxlen=recent)

    @property
    def leader(self) -> bool:
        return self.lease is None or self.lease.leader

    @property
    def ready(self) -> bool:
        """Caught up with its inputs; or a standby whose feed waits for the lease (the
        bridge's and actuator's): healthy and ready to take over."""
        if self.lease is not None and not self.lease.leader and not isinstance(self.feed, BusFeed):
            return True
        return self.started is not None and self.feed.caught_up

    async def run(self) -> None:
        """Run until cancelled. With a lease: a bus-fed service follows its inputs as a hot
        standby and acts once it leads; another feed starts only once it leads, and the
        process ends when the lease is lost (a restart makes it a standby)."""
        name = self.spec.name
        try:
            async with asyncio.TaskGroup() as group:
                if self.lease is not None:
                    group.create_task(self.lease.run(), name=f"{name}-lease")
                    group.create_task(self._follow_lease(), name=f"{name}-leadership")
                    if not isinstance(self.feed, BusFeed):
                        await self._until_leader()
                self.started = await self.feed.start() or Cut(0, 0)
                if isinstance(self.feed, BusFeed) and self.leader:
                    await self._publish_started(self.started)
                if self.spec.timer is not None and isinstance(self.feed, BusFeed):
                    group.create_task(self._tick(), name=f"{name}-timer")
                if self.spec.gauges is not None:
                    group.create_task(self._gauges(), name=f"{name}-gauges")
                group.create_task(self._loop(), name=f"{name}-loop")
        finally:
            await self.feed.close()
            if self.lease is not None:
                await self.lease.release()

    async def _until_leader(self) -> None:
        assert self.lease is not None
        while not self.lease.leader:
            self.lease.changed.clear()
            await self.lease.changed.wait()

    async def _follow_lease(self) -> None:
        """On takeover: record the start and publish what was decided as a standby. On a
        loss: a bus-fed runner goes back to standby; another must stop."""
        assert self.lease is not None
        was = self.lease.leader
        while True:
            self.lease.changed.clear()
            await self.lease.changed.wait()
            checkpoint()
            now = self.lease.leader
            if now == was:
                continue
            was = now
            metrics.LEADER.labels(service=self.spec.name).set(1 if now else 0)
            if not isinstance(self.feed, BusFeed):
                if not now:
                    raise LeaseLost(f"{self.spec.name}: lease lost; stopping")
                continue
            if now and self.started is not None:
                await self._take_over()

    async def _take_over(self) -> None:
        assert self.started is not None
        await self._publish_started(self.started)
        outgoing: list[Outgoing] = []
        held = [*self._sent, *self._recent]
        self._recent.clear()
        self._sent.clear()
        for output in held:
            self._route(output, outgoing, [])
        if outgoing:
            await retry(lambda: self.bus.publish_many(outgoing), what="publishing on takeover")
        log.info(
            "took over", epoch=self.lease.epoch if self.lease else 0, republished=len(outgoing)
        )

    async def _loop(self) -> None:
        while True:
            items = await self.feed.take(self.batch)
            checkpoint()
            handling = asyncio.ensure_future(self._handle(items))
            try:
                await asyncio.shield(handling)
            except asyncio.CancelledError:
                # Finish the batch in hand (store its outputs), then stop.
                last = _label(items[-1]) if items else "none"
                what = f"{self.spec.name}: outputs of {len(items)} input(s) up to {last}"
                await finish_within(handling, self.stop_grace, what=what)
                raise

    async def _handle(self, items: list[Item]) -> None:
        started = time.perf_counter()
        outgoing: list[Outgoing] = []
        effects: list[tuple[Effect, Any]] = []
        made: list[Any] = []
        leading = self.leader
        for item in items:
            outputs = await self._decide(item)
            if leading:
                for output in outputs:
                    self._route(output, outgoing, effects)
            else:
                self._recent.extend(outputs)
            made.extend(outputs)
        if outgoing:
            await retry(lambda: self.bus.publish_many(outgoing), what="publishing outputs")
        if self.spec.observe is not None and made:
            self.spec.observe(self.state, made)  # logs and metrics, once the outputs are stored
        for effect, output in effects:
            result = effect(output)
            if result is not None:
                await result
        for item in items:
            if item.settle is not None:
                await item.settle()
        self.handled += len(items)
        self._lag(items)
        metrics.BATCH_SECONDS.labels(service=self.spec.name).observe(time.perf_counter() - started)

    def _lag(self, items: list[Item]) -> None:
        """How far behind its input the core is: from the newest input's time on the bus
        (its JetStream timestamp) to now, its outputs stored. Only once caught up: the
        snapshot read at the start is old by design."""
        newest = next((i.raw for i in reversed(items) if i.raw is not None), None)
        if newest is None or not self.feed.caught_up:
            return
        try:
            stored = newest.metadata.timestamp.timestamp()
        except (AttributeError, ValueError, TypeError, nats.errors.Error):
            return  # not a JetStream message (a test's feed)
        lag = max(0.0, time.time() - stored)
        metrics.LAG.labels(service=self.spec.name).set(lag)
        metrics.BEHIND.labels(service=self.spec.name).observe(lag)

    async def _decide(self, item: Item) -> Sequence[Any]:
        event = item.event
        at = self.clock() if self.spec.clock else getattr(event, "at", None)
        now = self._now = float(at) if isinstance(at, int | float) else self._now
        if isinstance(event, Tick) and event.service == self.spec.name:
            self._tick_sent = None
        type_name = _type_name(event)
        try:  # cores do not log: the input is named here, only when one raises
            self.state, outputs = self.spec.step(self.state, event, now)
        except Exception as exc:
            log.exception("core raised: input dead-lettered", type=type_name,
                          subject=item.subject, seq=item.seq)  # fmt: skip
            self._count(metrics.HANDLED, type_name, "bug").inc()
            if item.raw is not None:
                raw, reason = item.raw, f"{self.spec.name} core raised {type(exc).__name__}: {exc}"
                await retry(
                    lambda: publish_dead_letter(self.bus.js, raw, cluster=self.bus.cluster,
                                                reason=reason, error_class="bug"),
                    what="dead-lettering",
                )  # fmt: skip
            return ()
        self._count(metrics.HANDLED, type_name, "ok").inc()
        return outputs

    def _count(self, family: Any, type_name: str, third: str) -> Any:
        """The labelled child of a per-type counter, looked up once (labels() per input
        costs the bridge a few percent of a relist)."""
        key = (family, type_name, third)
        child = self._children.get(key)
        if child is None:
            if family is metrics.HANDLED:
                child = family.labels(service=self.spec.name, type=type_name, outcome=third)
            else:
                child = family.labels(service=self.spec.name, type=type_name, kind=third)
            self._children[key] = child
        return child

    def _route(
        self, output: Any, outgoing: list[Outgoing], effects: list[tuple[Effect, Any]]
    ) -> None:
        effect = self.effects.get(type(output))
        if effect is not None:
            effects.append((effect, output))
            return
        route = self.spec.route(output)
        if route is None:
            raise TypeError(f"{self.spec.name}: no route for output {type(output).__name__}")
        kind = "action" if route.action else "decision"
        self._count(metrics.OUTPUTS, _type_name(output), kind).inc()
        if route.action and self.dry_run:
            log.info(
                "dry run: action withheld", type=_type_name(output), id=getattr(output, "id", "")
            )
            return
        if route.action:  # who asks, and under which lease: the actuator checks both
            if self.lease is not None:
                self._sent.append(output)
            epoch = self.lease.epoch if self.lease is not None else 0
            output = msgspec.structs.replace(output, by=self.spec.name, epoch=epoch)
        target = route.to(self.bus.cluster, output)
        if isinstance(target, Outgoing):
            outgoing.append(target)
        elif target is not None:
            outgoing.append(Outgoing(target[0], output, target[1]))

    async def _publish_started(self, cut: Cut) -> None:
        at = self.clock()
        policy = msgspec.to_builtins(self.policy) if self.policy is not None else {}
        record = Started(
            service=self.spec.name, at=at, k8s_seq=cut.k8s_seq, history_seq=cut.history_seq,
            telemetry_seq=cut.telemetry_seq,
            policy=policy if isinstance(policy, dict) else {"value": policy},
            instance=instance(),
        )  # fmt: skip
        subject = subjects.runner(self.bus.cluster, "started", self.spec.name)
        msg_id = f"started:{self.spec.name}:{at}"
        await retry(
            lambda: self.bus.publish(subject, record, msg_id=msg_id), what="publishing start"
        )

    async def _tick(self) -> None:
        """Publish a tick every interval while the core wants one and none is in flight;
        within ``SOON_S`` when the core says new work waits (``Timer.soon``)."""
        assert self.spec.timer is not None
        timer = self.spec.timer
        interval = float(timer.every(self.settings))
        poll = min(interval, SOON_S) if timer.soon is not None else interval
        subject = subjects.runner(self.bus.cluster, "tick", self.spec.name)
        last = -math.inf
        while True:
            await asyncio.sleep(poll)
            checkpoint()
            now = self.clock()
            soon = timer.soon is not None and timer.soon(self.state)
            due = soon or now - last >= interval - poll / 2
            in_flight = self._tick_sent is not None and now - self._tick_sent < 10 * interval
            if not due or in_flight or not self.leader or not self.feed.caught_up:
                continue
            if not timer.wants(self.state, now):
                continue
            self._tick_sent = last = now
            await self._publish_tick(subject, Tick(service=self.spec.name, at=now))

    async def _publish_tick(self, subject: str, tick: Tick) -> None:
        msg_id = f"tick:{tick.service}:{tick.at}"
        await retry(
            lambda: self.bus.publish(subject, tick, msg_id=msg_id), what="publishing a tick"
        )

    async def _gauges(self) -> None:
        assert self.spec.gauges is not None
        while True:
            checkpoint()
            self.spec.gauges(self.state)
            metrics.CAUGHT_UP.labels(service=self.spec.name).set(1 if self.ready else 0)
            await asyncio.sleep(2.0)


class LeaseLost(RuntimeError):
    """A runner whose feed acts (the bridge's watches, the actuator's deliveries) lost its
    lease: it stops, and its restart waits as a standby."""


def _type_name(event: Any) -> str:
    if isinstance(event, msgspec.Struct):
        tag = type(event).__struct_config__.tag
        if isinstance(tag, str):
            return tag
    return type(event).__name__


def _label(item: Item) -> str:
    return f"{item.subject} #{item.seq}" if item.subject else _type_name(item.event)
