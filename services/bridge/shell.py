"""The bridge's I/O: one list+watch per kind, the core, and pipelined publishes to JetStream.

On start it reads what the K8S stream holds (last event per subject). That seeds
the core (skip what is already there) and each kind's reflector cache (so objects
deleted while the bridge was down become deletions after the first list). Then
the reflectors feed one queue; the publisher drains it in batches, runs the core
and publishes with ``Bus.publish_many``, retrying a failed batch until it is
stored (msg ids make a retry safe). A change is never dropped.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence

import msgspec
import nats.errors
import structlog
from kubernetes_asyncio.client import ApiClient

from libs.bus import Bus, Outgoing, PublishError
from libs.kube import KINDS, Kind, Options, Reflector
from proto import k8s, subjects
from proto.deadletter import DeadLetter
from services.bridge import core, metrics

log = structlog.get_logger("baton.bridge")

CHUNK = 4096  # publishes in flight per publish_many call
QUEUE_BATCHES = 64  # reflector batches buffered before the watches wait for NATS


class Bridge:
    def __init__(
        self,
        *,
        bus: Bus,
        api: ApiClient,
        cluster: str,
        kinds: Sequence[Kind] = tuple(KINDS.values()),
        options: Options | None = None,
        tombstone_ttl: str = core.DEFAULT_TOMBSTONE_TTL,
    ) -> None:
        self.bus, self.api, self.cluster = bus, api, subjects.check_cluster(cluster)
        self.kinds, self.options, self.tombstone_ttl = kinds, options or Options(), tombstone_ttl
        self.reflectors: list[Reflector] = []
        self._queue: asyncio.Queue[list[k8s.K8sEvent]] = asyncio.Queue(maxsize=QUEUE_BATCHES)
        self._published_once = False

    @property
    def ready(self) -> bool:
        """Every kind listed and the first lists published."""
        return (
            bool(self.reflectors)
            and all(r.synced for r in self.reflectors)
            and self._published_once
        )

    async def run(self) -> None:
        await self.bus.ensure_streams()
        held: list[k8s.K8sEvent] = await self.bus.snapshot(
            subjects.wildcard(self.cluster, subjects.K8S, ">"), k8s.K8sEvent
        )
        log.info("k8s stream state read", subjects=len(held))
        state = core.initial(cluster=self.cluster, held=held, tombstone_ttl=self.tombstone_ttl)
        self.reflectors = [
            Reflector(
                self.api,
                kind,
                seed=core.seeds(held, kind.name),
                options=self.options,
                observer=metrics.Observer(),
            )
            for kind in self.kinds
        ]
        del held
        async with asyncio.TaskGroup() as tasks:
            for reflector in self.reflectors:
                tasks.create_task(self._feed(reflector), name=f"watch-{reflector.kind.name}")
            tasks.create_task(self._publish_loop(state), name="publish")

    async def _feed(self, reflector: Reflector) -> None:
        async for batch in reflector.batches():
            await self._queue.put(batch)

    async def _publish_loop(self, state: core.State) -> None:
        while True:
            events = list(await self._queue.get())
            while not self._queue.empty() and len(events) < CHUNK:
                events.extend(self._queue.get_nowait())
            outputs: list[core.Output] = []
            for event in events:
                state, produced = core.step(state, event, event.at)
                if not produced:
                    metrics.EVENTS_SKIPPED.labels(kind=core.kind_of(event)).inc()
                outputs.extend(produced)
            for start in range(0, len(outputs), CHUNK):
                await self._publish(outputs[start : start + CHUNK])
            self._published_once = self._published_once or all(r.synced for r in self.reflectors)

    async def _publish(self, outputs: Sequence[core.Output]) -> None:
        items: list[Outgoing] = []
        published: list[core.Publish] = []
        for output in outputs:
            if isinstance(output, core.Rejected):
                items.append(self._dead_letter(output))
                continue
            items.append(Outgoing(output.subject, output.event, output.msg_id, output.ttl))
            published.append(output)
        await self._publish_until_stored(items)
        now = time.time()
        counts: Counter[tuple[str, str]] = Counter()
        for output in published:
            counts[core.kind_of(output.event), output.event.op] += 1
            metrics.LAG.observe(max(0.0, now - output.event.at))
        for (kind, op), count in counts.items():
            metrics.EVENTS_PUBLISHED.labels(kind=kind, op=op).inc(count)

    async def _publish_until_stored(self, items: list[Outgoing]) -> None:
        delay = 0.1
        while True:
            try:
                await self.bus.publish_many(items)
                return
            except (PublishError, nats.errors.Error, TimeoutError) as exc:  # NATS down: retry
                log.warning(
                    "publish failed, retrying", error=repr(exc), items=len(items), retry_in=delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    def _dead_letter(self, rejected: core.Rejected) -> Outgoing:
        metrics.REJECTED.labels(kind=rejected.kind).inc()
        log.warning(
            "object name cannot be a subject",
            kind=rejected.kind,
            key=rejected.key,
            reason=rejected.reason,
        )
        letter = DeadLetter(
            subject=subjects.wildcard(self.cluster, subjects.K8S, rejected.kind),
            stream="",
            seq=0,
            reason=rejected.reason,
            error_class="bad-input",
            payload=msgspec.json.encode(rejected).decode(),
            at=time.time(),
        )
        target = subjects.wildcard(self.cluster, subjects.DEADLETTER, subjects.K8S)
        return Outgoing(target, letter, f"dl:{rejected.kind}:{rejected.key}")
