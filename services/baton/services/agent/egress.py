"""Egress limits, live: follow this node's ``NodeLimits``, apply them with tc, count bytes.

A real node (``Egress``):

1. **follow**: a plain NATS subscription on ``baton.<c>.bandwidth.limits.<node>`` (this
   node's subject only) and, at start, after a reconnect and every ``refresh_s``, the
   subject's last message from the LIMITS stream (JetStream direct get of that one
   subject). No consumer is created; the newest ``generation`` wins.
2. **apply**: ``shaping.Shaper.apply`` reconciles the kernel with the newest limits
   (read, plan, change only the difference), in a worker thread; a failure is logged
   and tried again.
3. **count**: every ``egress_s`` the pods' class counters (``counting.sample``) become a
   ``NodeEgress`` on ``baton.<c>.telemetry.egress.<node>``: the demand the service reads,
   published only when a rate moved, a pod came or went, or as a keep-alive
   (``counting.Changed``).

``--fleet`` (``FleetEgress``) has no kernel to shape: it follows every node's limits
and publishes what each pod would send (``traffic.demand_bps``) held to its limit, so
a simulated cluster's shares move like a real one's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
import structlog
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from baton.libs.bus import Bus, Outgoing, PublishError
from baton.libs.bus.streams import LIMITS
from baton.libs.runtime.stopping import checkpoint
from baton.proto import subjects
from baton.proto.bandwidth import (
    NodeEgress,
    NodeLimits,
    PodEgress,
    PodLimit,
    egress_subject,
    limits_subject,
)
from baton.proto.codec import Undecodable, decode
from baton.services.agent import counting, metrics
from baton.services.agent.core import traffic
from baton.services.agent.core.tc import Layout
from baton.services.agent.shaping import Shaper, ShapingError

log = structlog.get_logger("baton.agent")
T = TypeVar("T")


class Follower:
    """The newest ``NodeLimits`` of one node: a subscription plus a last-value fetch."""

    def __init__(self, bus: Bus, node: str, *, refresh_s: float = 60.0) -> None:
        self.bus, self.node, self.refresh_s = bus, node, refresh_s
        self.subject = limits_subject(bus.cluster, node)
        self.latest: NodeLimits | None = None
        self.arrived = asyncio.Event()

    def offer(self, limits: NodeLimits) -> None:
        if limits.node != self.node:
            return
        if self.latest is None or limits.generation > self.latest.generation:
            self.latest = limits
            self.arrived.set()

    async def run(self) -> None:
        async def on_msg(msg: Msg) -> None:
            self._take(msg.data, where=msg.subject)

        sub = await self.bus.nc.subscribe(self.subject, cb=on_msg)
        try:
            reconnects = -1
            fetched = 0.0
            while True:
                now = time.monotonic()
                seen = self.bus.nc.stats["reconnects"]
                due = seen != reconnects or now - fetched >= self.refresh_s
                if due and await self.fetch():
                    reconnects, fetched = seen, now
                checkpoint()  # nats-py may have swallowed a cancel in fetch
                await asyncio.sleep(1.0)
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()

    async def fetch(self) -> bool:
        """The subject's last stored message (direct get); False when NATS did not answer."""
        stream = subjects.stream_name(self.bus.cluster, LIMITS)
        try:
            raw = await self.bus.js.get_last_msg(stream, self.subject, direct=True)
        except nats.js.errors.NotFoundError:
            return True  # nothing published for this node yet
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("limits not fetched, will retry", subject=self.subject, error=repr(exc))
            return False
        if raw.data:
            self._take(raw.data, where=self.subject)
        return True

    def _take(self, data: bytes, *, where: str) -> None:
        try:
            limits: NodeLimits = decode(data, NodeLimits)
        except Undecodable as exc:
            log.error("limits not readable, ignored", subject=where, error=str(exc))
            return
        self.offer(limits)


class Netlink:
    """One netlink socket (pyroute2's ``IPRoute``) and the agent's ``Shaper`` on it, used
    from one worker thread: pyroute2 runs an event loop of its own in the thread that
    calls it, which cannot be the agent's, and one socket takes one request at a time."""

    def __init__(self, layout: Layout, *, netns: str = "") -> None:
        self.layout, self.netns = layout, netns
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="netlink")
        self._ipr: Any = None
        self._shaper: Shaper | None = None

    @property
    def shaper(self) -> Shaper:
        assert self._shaper is not None, "Netlink.open() first"
        return self._shaper

    async def open(self) -> Netlink:
        from pyroute2 import IPRoute  # only a shaping node needs netlink

        self._ipr = await self.call(lambda: IPRoute(netns=self.netns) if self.netns else IPRoute())
        self._shaper = Shaper(self._ipr, self.layout)
        return self

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def close(self) -> None:
        if self._ipr is not None:
            await self.call(self._ipr.close)
        self._pool.shutdown(wait=False)


class Egress:
    """One node: apply the newest limits with tc, publish what each pod sent."""

    def __init__(
        self,
        bus: Bus,
        node: str,
        *,
        netlink: Netlink,
        egress_s: float = 5.0,
        retry_s: float = 5.0,
        changed: counting.Changed | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.bus, self.node, self.netlink = bus, node, netlink
        self.egress_s, self.retry_s, self.clock = egress_s, retry_s, clock
        self.changed = changed or counting.Changed()
        self.follower = Follower(bus, node)
        self.applied: NodeLimits | None = None

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.follower.run(), name="egress-follow")
            group.create_task(self._apply(), name="egress-apply")
            group.create_task(self._count(), name="egress-count")

    async def _apply(self) -> None:
        while True:
            await self.follower.arrived.wait()
            self.follower.arrived.clear()
            limits = self.follower.latest
            if limits is None or (self.applied and limits.generation <= self.applied.generation):
                continue
            if not await self.apply(limits):
                await asyncio.sleep(self.retry_s)
                self.follower.arrived.set()  # try the newest again

    async def apply(self, limits: NodeLimits) -> bool:
        started = time.perf_counter()
        try:
            done = await self.netlink.call(self.netlink.shaper.apply, limits)
        except ShapingError as exc:
            metrics.SHAPING_ERRORS.inc()
            log.error("limits not applied", generation=limits.generation, error=str(exc))
            return False
        self.applied = limits
        seconds = time.perf_counter() - started
        metrics.APPLY_SECONDS.observe(seconds)
        metrics.APPLIED_GENERATION.set(limits.generation)
        for problem in done.problems:
            log.warning("shaping problem", problem=problem)
        log.info("limits applied", generation=limits.generation, pods=len(limits.limits),
                 changes=len(done.changes), ms=round(seconds * 1e3, 1))  # fmt: skip
        return True

    async def _count(self) -> None:
        previous: counting.Sample | None = None
        while True:
            checkpoint()  # nats-py may have swallowed a cancel in the last publish
            await asyncio.sleep(self.egress_s)
            limits = self.applied
            if limits is None:
                continue
            shaper = self.netlink.shaper
            current = await self.netlink.call(counting.sample, shaper, at=time.monotonic())
            report = counting.egress(limits, previous=previous, current=current, at=self.clock())
            previous = current
            record(report)
            if report.pods:
                await publish(self.bus, self.changed.due([report]))


class FleetEgress:
    """Simulation (``--fleet``): every node's limits; each pod sends its seeded demand,
    held to its limit. Reads ``bandwidth.limits.*`` (all nodes): it stands in for them all."""

    def __init__(
        self,
        bus: Bus,
        *,
        seed: int,
        mean_bps: float,
        period_s: float = 60.0,
        egress_s: float = 5.0,
        changed: counting.Changed | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.bus, self.seed, self.mean_bps, self.period_s = bus, seed, mean_bps, period_s
        self.egress_s, self.clock = egress_s, clock
        self.changed = changed or counting.Changed()
        self.limits: dict[str, NodeLimits] = {}
        self.sent: dict[str, tuple[int, int]] = {}  # uid -> (internet bytes, internal bytes)
        self.following = False  # subscribed to the limits

    async def run(self) -> None:
        stream = subjects.stream_name(self.bus.cluster, LIMITS)
        pattern = limits_subject(self.bus.cluster, "x").rsplit(".", 1)[0] + ".*"

        async def on_msg(msg: Msg) -> None:
            with contextlib.suppress(Undecodable):
                limits: NodeLimits = decode(msg.data, NodeLimits)
                have = self.limits.get(limits.node)
                if have is None or limits.generation > have.generation:
                    self.limits[limits.node] = limits

        delay = 0.2
        while True:  # the agent declares no stream: wait for a service to
            checkpoint()
            try:
                sub = await self.bus.js.subscribe(
                    pattern, stream=stream, cb=on_msg, ordered_consumer=True,
                    deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
                )  # fmt: skip
                break
            except (nats.js.errors.NotFoundError, nats.errors.Error, TimeoutError) as exc:
                log.info("limits not followed yet, will retry", error=repr(exc))
                await asyncio.sleep(delay)
                delay = min(2 * delay, 5.0)
        self.following = True
        try:
            while True:
                checkpoint()  # nats-py may have swallowed a cancel in the last publish
                await asyncio.sleep(self.egress_s)
                reports = self.changed.due(self.reports(self.clock()))
                if reports:
                    await publish(self.bus, reports)
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()

    def reports(self, at: float) -> list[NodeEgress]:
        out = []
        for limits in self.limits.values():
            pods = [self._pod(p, at=at) for p in limits.limits]
            out.append(NodeEgress(node=limits.node, at=at, interval_s=self.egress_s,
                                  pods=tuple(pods), generation=limits.generation))  # fmt: skip
        return out

    def _pod(self, limit: PodLimit, *, at: float) -> PodEgress:
        want = traffic.demand_bps(limit.uid, seed=self.seed, at=at, period_s=self.period_s,
                                  mean_bps=self.mean_bps)  # fmt: skip
        internet = traffic.sent_bps(want, limit.ceil_bps)
        internal = want // 4  # some traffic to pods and services: never shaped
        before = self.sent.get(limit.uid, (0, 0))
        total = (before[0] + int(internet * self.egress_s / 8),
                 before[1] + int(internal * self.egress_s / 8))  # fmt: skip
        self.sent[limit.uid] = total
        return PodEgress(namespace=limit.namespace, pod=limit.pod, uid=limit.uid,
                         internet_bytes=total[0], internal_bytes=total[1], internet_bps=internet,
                         internal_bps=internal, limit_bps=limit.ceil_bps)  # fmt: skip


def record(report: NodeEgress) -> None:
    """Per-pod byte counters as metrics (a node's ~110 pods: bounded labels)."""
    metrics.POD_EGRESS.clear()
    for p in report.pods:
        metrics.POD_EGRESS.labels(namespace=p.namespace, pod=p.pod, to="internet").set(
            p.internet_bytes
        )
        metrics.POD_EGRESS.labels(namespace=p.namespace, pod=p.pod, to="internal").set(
            p.internal_bytes
        )


async def publish(bus: Bus, reports: list[NodeEgress]) -> None:
    """Measurements are perishable: one that cannot be published now is dropped."""
    items = [
        Outgoing(egress_subject(bus.cluster, r.node), r, f"egress:{r.node}:{r.at}") for r in reports
    ]
    try:
        await bus.publish_many(items)
    except (PublishError, nats.errors.Error, TimeoutError) as exc:  # the next one replaces it
        metrics.DROPPED.inc(len(items))
        log.warning("egress not published", error=repr(exc), nodes=len(items))
        return
    metrics.PUBLISHED.labels(kind="egress").inc(len(items))
