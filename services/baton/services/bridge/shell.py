"""The bridge's edges: its feed (one list+watch per kind) and where its outputs go.

On start the feed reads what the K8S stream holds (last event per subject). That
becomes the core's first input (``Held``: skip what is already there) and each
kind's reflector seed (objects deleted while the bridge was down become deletions
after the first list). Then the reflectors' batches are the inputs. The runner
publishes each batch's outputs until JetStream stores them (msg ids make a retry
safe): a change is never dropped, and a stop finishes the batch in hand first.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import Sequence
from typing import Any

import msgspec
import structlog
from kubernetes_asyncio.client import ApiClient

from baton.libs.bus import Bus, Outgoing
from baton.libs.kube import KINDS, Kind, Options, Reflector
from baton.libs.runner import Cut, Item, Route
from baton.libs.runtime.stopping import checkpoint
from baton.proto import k8s, subjects
from baton.proto.deadletter import DeadLetter
from baton.services.bridge import core, metrics

log = structlog.get_logger("baton.bridge")

QUEUE_BATCHES = 64  # reflector batches buffered before the watches wait for NATS


class WatchFeed:
    """The bridge's inputs: ``Held``, then every reflector batch, as they come."""

    def __init__(
        self,
        bus: Bus,
        api: ApiClient,
        *,
        kinds: Sequence[Kind] = tuple(KINDS.values()),
        options: Options | None = None,
    ) -> None:
        self.bus, self.api, self.kinds, self.options = bus, api, kinds, options or Options()
        self.reflectors: list[Reflector] = []
        self._queue: asyncio.Queue[list[Any]] = asyncio.Queue(maxsize=QUEUE_BATCHES)
        self._tasks: list[asyncio.Task[None]] = []
        self._rest: deque[Any] = deque()  # a batch larger than the runner takes at once

    @property
    def caught_up(self) -> bool:
        """Every kind listed, and nothing listed waits to be published."""
        synced = bool(self.reflectors) and all(r.synced for r in self.reflectors)
        return synced and self._queue.empty() and not self._rest

    async def start(self) -> Cut | None:
        # What K8S holds as it is: an object whose latest message is poison counts as
        # missing, so the first list publishes it again and K8S holds it once more.
        held: list[k8s.K8sEvent] = await self.bus.snapshot(
            subjects.wildcard(self.bus.cluster, subjects.K8S, ">"), k8s.K8sEvent, recover=False
        )
        log.info("k8s stream state read", subjects=len(held))
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
        self._queue.put_nowait([core.Held(events=held)])
        for reflector in self.reflectors:
            name = f"watch-{reflector.kind.name}"
            self._tasks.append(asyncio.create_task(self._feed(reflector), name=name))
        return None

    async def _feed(self, reflector: Reflector) -> None:
        async for batch in reflector.batches():
            checkpoint()
            await self._queue.put(batch)

    async def take(self, limit: int) -> list[Item]:
        """At most ``limit`` events: a relist of 100k objects is one reflector batch, and a
        stop finishes only the batch in hand. Never none: a reflector's batch may be empty
        (a kind with no objects, or one the server does not serve)."""
        while not self._rest:
            self._rest.extend(await self._queue.get())
        while not self._queue.empty() and len(self._rest) < limit:
            self._rest.extend(self._queue.get_nowait())
        count = min(limit, len(self._rest))
        return [Item(event=self._rest.popleft()) for _ in range(count)]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(asyncio.gather(*self._tasks, return_exceptions=True), 5.0)


def _publish(cluster: str, output: core.Publish) -> Outgoing:
    return Outgoing(output.subject, output.event, output.msg_id, output.ttl)


def _dead_letter(cluster: str, rejected: core.Rejected) -> Outgoing:
    letter = DeadLetter(
        subject=subjects.wildcard(cluster, subjects.K8S, rejected.kind),
        stream="",
        seq=0,
        reason=rejected.reason,
        error_class="bad-input",
        payload=msgspec.json.encode(rejected).decode(),
        at=time.time(),
    )
    target = subjects.wildcard(cluster, subjects.DEADLETTER, subjects.K8S)
    return Outgoing(target, letter, f"dl:{rejected.kind}:{rejected.key}")


ROUTES = (Route(core.Publish, to=_publish), Route(core.Rejected, to=_dead_letter))


def observe(state: core.State, outputs: Sequence[core.Output]) -> None:
    """Counts and lag (API server change -> stored in JetStream), once stored."""
    now = time.time()
    counts: Counter[tuple[str, str]] = Counter()
    for output in outputs:
        if isinstance(output, core.Rejected):
            metrics.REJECTED.labels(kind=output.kind).inc()
            log.warning("object refused: dead-lettered", kind=output.kind, key=output.key,
                        reason=output.reason)  # fmt: skip
            continue
        counts[core.kind_of(output.event), output.event.op] += 1
        metrics.LAG.observe(max(0.0, now - output.event.at))
    for (kind, op), count in counts.items():
        metrics.EVENTS_PUBLISHED.labels(kind=kind, op=op).inc(count)
