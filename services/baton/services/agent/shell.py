"""The agent's I/O: run the backends, step each node's core, publish to NATS.

Every backend is a *source*: a coroutine that calls ``emit(node, reading)`` as readings
arrive (pollers in a worker thread every interval; NVML Xid events; the simulated
hardware watch). One loop takes what was emitted, steps that node's core (one state
per node: one on a real node, thousands with ``--fleet``), ticks every core once a
second (heartbeats) and publishes the outputs with ``publish_many`` on each node's own
subjects. If NATS is down, outputs wait (up to ``pending_max``, oldest dropped first)
and go out with the next batch; msg ids make the retry safe.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import msgspec
import nats.errors
import structlog

from baton.libs.bus import Bus, Outgoing, PublishError
from baton.libs.runtime.stopping import checkpoint
from baton.proto import subjects, telemetry
from baton.proto.telemetry import GpuReport, Heartbeat, NodeReport
from baton.services.agent import core, metrics
from baton.services.agent.backends import Poller
from baton.services.agent.core.readings import AnyReading, Tick
from baton.services.agent.nvml import Nvml

log = structlog.get_logger("baton.agent")

Emit = Callable[[str, AnyReading], None]
Source = Callable[[Emit], Coroutine[Any, Any, None]]
_TICK = ""  # the queue's node for a tick of every core


class Agent:
    def __init__(
        self,
        *,
        config: core.Config,
        cluster: str,
        nodes: Sequence[str] = (),
        clock: Callable[[], float] = time.time,
        tick_s: float = 1.0,
        pending_max: int = 10_000,
    ) -> None:
        self.config, self.cluster, self.clock = config, cluster, clock
        self.tick_s, self.pending_max = tick_s, pending_max
        started = clock()
        self.states = {n: core.initial(self._config(n), started=started) for n in nodes}
        self.pending: list[Outgoing] = []
        self.rejected: set[str] = set()  # simulated nodes whose names cannot be subject tokens
        self.ready = False  # published at least once

    def _config(self, node: str) -> core.Config:
        return msgspec.structs.replace(self.config, node=node)

    def feed(self, node: str, reading: AnyReading) -> list[core.Publish]:
        """Step the node's core (made on its first reading) and keep the new state."""
        now = self.clock()
        state = self.states.get(node)
        if state is None:
            if node in self.rejected or not self._valid(node):
                return []
            state = core.initial(self._config(node), started=now)
            metrics.NODES.set(len(self.states) + 1)
        state, outputs = core.step(state, reading, now)
        self.states[node] = state
        return outputs

    def _valid(self, node: str) -> bool:
        try:
            subjects.encode_name(node)
        except subjects.InvalidName as exc:
            self.rejected.add(node)
            log.error("node name cannot be a subject token, node ignored", error=str(exc))
            return False
        return True

    def outgoing(self, outputs: Sequence[core.Publish]) -> list[Outgoing]:
        return [
            Outgoing(
                telemetry.subject(self.cluster, telemetry.KIND_OF[type(o.event)], o.event.node),
                o.event,
                o.msg_id,
            )
            for o in outputs
        ]

    async def run(self, bus: Bus, sources: Sequence[Source]) -> None:
        queue: asyncio.Queue[tuple[str, AnyReading]] = asyncio.Queue()

        def emit(node: str, reading: AnyReading) -> None:
            queue.put_nowait((node, reading))

        async def ticks() -> None:
            while True:
                emit(_TICK, Tick(at=self.clock()))
                await asyncio.sleep(self.tick_s)

        tasks = [asyncio.create_task(source(emit)) for source in sources]
        tasks.append(asyncio.create_task(ticks()))
        try:
            while True:
                batch = [await queue.get()]
                while not queue.empty() and len(batch) < 4096:
                    batch.append(queue.get_nowait())
                outputs = [o for node, reading in batch for o in self._step(node, reading)]
                await self.publish(bus, latest_reports(outputs))
                checkpoint()  # nats-py may have swallowed a cancel in the publish
                for task in tasks:
                    if task.done():
                        task.result()  # a source that stopped: raise its error
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _step(self, node: str, reading: AnyReading) -> list[core.Publish]:
        if node != _TICK:
            return self.feed(node, reading)
        return [o for n in list(self.states) for o in self.feed(n, reading)]

    async def publish(self, bus: Bus, outputs: Sequence[core.Publish]) -> None:
        """Publish what is pending; while NATS is away keep it (heartbeats go first when
        the backlog is full, then the oldest) and go on reading."""
        self.pending += self.outgoing(outputs)
        if len(self.pending) > self.pending_max:
            before = len(self.pending)
            self.pending = [o for o in self.pending if not isinstance(o.event, Heartbeat)]
            del self.pending[: max(0, len(self.pending) - self.pending_max)]
            metrics.DROPPED.inc(before - len(self.pending))
            log.warning("telemetry backlog full, dropped", dropped=before - len(self.pending))
        metrics.PENDING.set(len(self.pending))
        if not self.pending or not bus.nc.is_connected:
            return
        try:
            await bus.publish_many(self.pending)
        except (PublishError, nats.errors.Error, TimeoutError) as exc:
            log.warning(
                "telemetry not published, will retry", error=str(exc), pending=len(self.pending)
            )
            return
        for item in self.pending:
            metrics.PUBLISHED.labels(kind=item.subject.split(".")[3]).inc()
        self.pending = []
        metrics.PENDING.set(0)
        self.ready = True


def latest_reports(outputs: Sequence[core.Publish]) -> list[core.Publish]:
    """Of a batch's GPU and node reports, only each node's last of each kind: a report is
    the node's whole state, and one read (a simulated hardware document: pods, then GPUs)
    steps the core reading by reading, so an earlier report of the batch can be half of
    the change (a starting pod's GPU memory before its pod is listed: a phantom zombie)."""
    last: dict[tuple[str, type], int] = {}
    for i, o in enumerate(outputs):
        if isinstance(o.event, GpuReport | NodeReport):
            last[(o.event.node, type(o.event))] = i
    return [o for i, o in enumerate(outputs)
            if not isinstance(o.event, GpuReport | NodeReport)
            or last[(o.event.node, type(o.event))] == i]  # fmt: skip


def polling(poller: Poller, *, node: str, interval_s: float, clock: Callable[[], float]) -> Source:
    """A source that polls ``poller`` in a worker thread every ``interval_s``."""

    async def run(emit: Emit) -> None:
        while True:
            try:
                for reading in await asyncio.to_thread(poller.poll, clock()):
                    emit(node, reading)
            except Exception as exc:  # a backend bug must not stop the others
                metrics.BACKEND_ERRORS.labels(backend=poller.name).inc()
                log.exception("backend poll failed", backend=poller.name, error=repr(exc))
            await asyncio.sleep(interval_s)

    return run


def nvml_events(nvml: Nvml, *, node: str, idle_s: float, clock: Callable[[], float]) -> Source:
    """A source of NVML Xid events: waits (1 s at a time) in a worker thread."""

    async def run(emit: Emit) -> None:
        while True:
            seen: Any = await asyncio.to_thread(nvml.wait_xids, timeout_ms=1000, at=clock)
            if seen is None:
                await asyncio.sleep(idle_s)  # NVML not started (yet)
                continue
            for reading in seen:
                emit(node, reading)

    return run
