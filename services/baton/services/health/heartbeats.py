"""Heartbeats, read beside the runner: a node whose agent went quiet becomes an event.

Heartbeats are not copied into HISTORY (7,500 nodes beating every minute would still
crowd out everything else), so the core cannot read them. The health process reads
them here, from the TELEMETRY stream (the last beat of every node first, then live),
and publishes ``health.silence.<node>`` when a node's last beat is older than
``silence_beats`` of the keep-alive period its agent announces (``every_s``, 60 s by
default), never less than ``silence_after_s``, and ``health.heard.<node>`` when it
beats again. Those events go through HISTORY like any input, so the core (and a
replay of it) sees exactly when a node was declared silent. A beat counts at the time
NATS stored it, so an agent whose clock is off is not taken for silent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec
import structlog
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from baton.libs.bus import Bus, Outgoing
from baton.libs.runtime.stopping import checkpoint, retry
from baton.proto import health, subjects, telemetry
from baton.proto.health import Heard, Silence
from baton.proto.telemetry import Heartbeat
from baton.services.health import metrics

log = structlog.get_logger("baton.health")


@dataclass(slots=True)
class Beats:
    """The last beat of every node, and which nodes are silent. No I/O."""

    after_s: float  # the least silence that counts
    beats: float = 3.0  # keep-alives a node may miss: it is silent after beats x its every_s
    last: dict[str, float] = field(default_factory=dict)
    every: dict[str, float] = field(default_factory=dict)  # node -> its announced period
    silent: set[str] = field(default_factory=set)
    heard: list[tuple[str, float]] = field(default_factory=list)  # came back, not yet published

    def beat(self, node: str, at: float, every_s: float = 0.0) -> None:
        if at <= self.last.get(node, -1.0):
            return
        self.last[node] = at
        self.every[node] = every_s
        if node in self.silent:
            self.silent.discard(node)
            self.heard.append((node, at))

    def due(self, now: float) -> list[tuple[str, float]]:
        """Nodes silent from now on: (node, last beat)."""
        found = [(n, t) for n, t in self.last.items()
                 if now - t > self.after(n) and n not in self.silent]  # fmt: skip
        self.silent.update(n for n, _ in found)
        return found

    def after(self, node: str) -> float:
        """How long ``node`` may be quiet: ``beats`` of the keep-alive period its agent
        announces, never less than ``after_s`` (an older agent announces none)."""
        return max(self.after_s, self.beats * self.every.get(node, 0.0))

    def take_heard(self) -> list[tuple[str, float]]:
        found, self.heard = self.heard, []
        return found


def outgoing(cluster: str, beats: Beats, now: float) -> list[Outgoing]:
    out = [
        Outgoing(health.subject(cluster, health.SILENCE, node),
                 Silence(node=node, at=now, last_beat=last, after_s=beats.after(node)),
                 f"silence:{node}:{last!r}")
        for node, last in beats.due(now)
    ]  # fmt: skip
    out += [
        Outgoing(health.subject(cluster, health.HEARD, node), Heard(node=node, at=now,
                 last_beat=last), f"heard:{node}:{last!r}")
        for node, last in beats.take_heard()
    ]  # fmt: skip
    return out


async def watch(
    bus: Bus,
    *,
    after_s: float,
    beats_missed: float = 3.0,
    check_s: float = 1.0,
    clock: Callable[[], float] = time.time,
    ready: Callable[[], bool] = lambda: True,
) -> None:
    """Follow heartbeats and publish silences and returns until cancelled. Publishes only
    while ``ready()`` (the runner leads and has started), so a standby stays quiet."""
    beats = Beats(after_s=after_s, beats=beats_missed)
    decoder = msgspec.json.Decoder(Heartbeat)

    async def on_beat(msg: Msg) -> None:
        try:
            beat = decoder.decode(msg.data)
        except msgspec.DecodeError:
            return
        metrics.HEARTBEATS.inc()
        stored = msg.metadata.timestamp.timestamp() if msg.metadata.timestamp else clock()
        beats.beat(beat.node, min(stored, clock()), beat.every_s)

    filter_ = telemetry.wildcard(bus.cluster, telemetry.HEARTBEAT)
    sub = await bus.js.subscribe(
        filter_, cb=on_beat, ordered_consumer=True, deliver_policy=DeliverPolicy.LAST_PER_SUBJECT
    )
    log.info("following heartbeats", filter=filter_, silence_after_s=after_s,
             silence_beats=beats_missed)  # fmt: skip
    try:
        while True:
            await asyncio.sleep(check_s)
            checkpoint()
            metrics.SILENT.set(len(beats.silent))
            if not ready():
                continue
            await _publish(bus, outgoing(bus.cluster, beats, clock()))
    finally:
        await sub.unsubscribe()


async def _publish(bus: Bus, found: list[Outgoing]) -> None:
    if not found:
        return
    await retry(lambda: bus.publish_many(found), what="publishing silences")
    for item in found:
        log.info(subjects.parse(item.subject)[2], node=getattr(item.event, "node", ""))
