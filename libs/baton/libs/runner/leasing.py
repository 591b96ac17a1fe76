"""Leases: one leader per singleton service, fenced by an epoch.

A lease is a key in the cluster's ``BATON_<C>_LEASES`` KV bucket (the service's
name). Its value says who holds it, since when it was last renewed, and its *epoch*:
the KV revision at which the holder acquired it. Revisions only grow, so a new
leader's epoch is always above every older leader's.

- The holder renews every ``ttl/3`` with a compare-and-set on the revision it last
  wrote; a renewal that fails (someone else took it, or NATS is away past the TTL)
  loses the lease at once.
- A standby reads the key every ``ttl/6``; once the key's revision (the server's
  count) has not moved for ``ttl``, measured on the standby's own monotonic clock,
  it takes the key with a compare-and-set, so two standbys cannot both win.

No wall clock is compared with another machine's: a replica whose clock runs ahead
cannot take a fresh lease (it saw it move), and a holder whose clock runs ahead
cannot make its lease outlive its renewals. ``renewed_at`` in the value is the
holder's wall clock, for people only. A standby that starts beside a key whose holder
already died waits one TTL from its first read (it cannot know how long the key stood
still before it looked).

A lease alone is not enough (a paused leader that wakes up still believes it leads),
so every action a leader publishes carries its epoch and the actuator refuses actions
from an epoch older than the service's current one (``Fences``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import Callable

import msgspec
import nats.js.errors
import structlog
from nats.js.kv import KeyValue

from baton.libs.bus import Bus
from baton.libs.bus.streams import LEASES, leases_config
from baton.libs.runtime.stopping import checkpoint, stopping
from baton.proto import subjects

log = structlog.get_logger("baton.lease")


class Held(msgspec.Struct, kw_only=True):
    """The lease key's value."""

    holder: str
    renewed_at: float  # the holder's wall clock: for people, never compared
    ttl: float
    epoch: int = 0  # the revision the holder acquired at (0 until its first renewal)


def bucket_name(cluster: str) -> str:
    return subjects.stream_name(cluster, LEASES)


async def leases_bucket(bus: Bus) -> KeyValue:
    """The cluster's lease bucket, created on first use (one value per key, in memory is
    not enough: a restarted NATS must not hand out an epoch twice)."""
    name = bucket_name(bus.cluster)
    try:
        return await bus.js.key_value(name)
    except nats.js.errors.BucketNotFoundError:
        return await bus.js.create_key_value(leases_config(bus.cluster, replicas=bus.replicas))


class Lease:
    """Hold ``key`` while ``run()`` runs; ``leader``, ``epoch`` and ``changed`` tell the
    runner where it stands."""

    def __init__(
        self,
        bus: Bus,
        key: str,
        *,
        ttl: float = 3.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bus, self.key, self.ttl, self.clock = bus, key, ttl, clock
        self.monotonic = monotonic  # what every expiry is measured on
        self.holder = f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        self.epoch = 0
        self.leader = False
        self.changed = asyncio.Event()  # set on every gain or loss
        self._revision = 0
        self._renewed = 0.0  # monotonic time the last successful write was sent
        self._seen = (0, 0.0)  # a standby's view: the key's revision, since when (monotonic)

    async def run(self) -> None:
        kv = await leases_bucket(self.bus)
        try:
            while True:
                checkpoint()
                if self.leader:
                    await self._renew(kv)
                    await asyncio.sleep(self.ttl / 3)
                else:
                    await self._try(kv)
                    await asyncio.sleep(0 if self.leader else self.ttl / 6)
        finally:
            if self.leader and not stopping():
                self._lose("stopped")

    async def release(self) -> None:
        """Give the lease up at once (a clean stop): the standby need not wait a TTL."""
        if not self.leader:
            return
        self.leader = False
        try:
            kv = await leases_bucket(self.bus)
            await kv.delete(self.key, last=self._revision)
        except Exception as exc:
            log.warning("lease release failed; it expires", key=self.key, error=repr(exc))

    async def _try(self, kv: KeyValue) -> None:
        try:
            entry = await kv.get(self.key)
        except nats.js.errors.KeyNotFoundError:
            entry = None
        except nats.errors.Error as exc:
            log.warning("lease read failed", key=self.key, error=repr(exc))
            return
        now = self.monotonic()
        value = _read(entry.value if entry is not None else None)
        if entry is not None and value is not None and self._fresh(entry.revision or 0, value, now):
            return  # held, and renewed within a TTL as this replica measures it
        mine = msgspec.json.encode(Held(holder=self.holder, renewed_at=self.clock(), ttl=self.ttl))
        try:
            if entry is None or entry.value is None or entry.operation in ("DEL", "PURGE"):
                revision = await kv.create(self.key, mine)
            else:
                revision = await kv.update(self.key, mine, last=entry.revision)
        except (nats.js.errors.KeyWrongLastSequenceError, nats.js.errors.BadRequestError):
            return  # another standby won
        except nats.errors.Error as exc:
            log.warning("lease take failed", key=self.key, error=repr(exc))
            return
        self._revision, self.epoch, self.leader = revision, revision, True
        self._renewed = now
        log.info("lease acquired", key=self.key, epoch=self.epoch, holder=self.holder,
                 previous=value.holder if value else "")  # fmt: skip
        self.changed.set()
        await self._renew(kv)  # write the epoch into the value for readers (the actuator)

    def _fresh(self, revision: int, value: Held, now: float) -> bool:
        """Whether the holder renewed within its TTL: the revision moved since this
        replica last looked, or it looked first less than a TTL ago."""
        if revision != self._seen[0]:
            self._seen = (revision, now)
        return now - self._seen[1] < value.ttl

    async def _renew(self, kv: KeyValue) -> None:
        held = Held(holder=self.holder, renewed_at=self.clock(), ttl=self.ttl, epoch=self.epoch)
        sent = self.monotonic()
        try:
            self._revision = await kv.update(
                self.key, msgspec.json.encode(held), last=self._revision
            )
            self._renewed = sent  # a standby's TTL starts after this write: never before
        except nats.js.errors.KeyWrongLastSequenceError:
            self._lose("taken by another holder")
        except nats.errors.Error as exc:
            if self.monotonic() - self._renewed >= self.ttl:
                self._lose(f"could not renew within its TTL: {exc!r}")
            else:
                log.warning("lease renewal failed, retrying", key=self.key, error=repr(exc))

    def _lose(self, why: str) -> None:
        self.leader = False
        log.warning("lease lost", key=self.key, epoch=self.epoch, why=why)
        self.changed.set()


def _read(data: bytes | None) -> Held | None:
    if not data:
        return None
    try:
        return msgspec.json.decode(data, type=Held)
    except msgspec.DecodeError:
        return None


class Fences:
    """The current epoch of every service that holds a lease, kept from the bucket: the
    actuator refuses an action whose epoch is below its producer's current one."""

    def __init__(self) -> None:
        self.epochs: dict[str, int] = {}
        self.loaded = asyncio.Event()  # the bucket's current values are in
        self._moved = asyncio.Condition()  # notified when an epoch moves

    async def follow(self, bus: Bus) -> None:
        kv = await leases_bucket(bus)
        watcher = await kv.watchall()
        try:
            async for entry in watcher:
                checkpoint()
                if entry is None:  # the end of the current values
                    self.loaded.set()
                    continue
                held = _read(entry.value)
                if held is not None and held.epoch:
                    self.epochs[entry.key] = max(self.epochs.get(entry.key, 0), held.epoch)
                    async with self._moved:
                        self._moved.notify_all()
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]

    async def reach(self, producer: str, epoch: int, *, within: float) -> int:
        """``producer``'s epoch once the watch has brought one of at least ``epoch``, or
        the one it has after ``within`` seconds."""

        def reached() -> bool:
            return self.epochs.get(producer, 0) >= epoch

        async with self._moved:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._moved.wait_for(reached), within)
        return self.epochs.get(producer, 0)

    def stale(self, producer: str, epoch: int) -> str:
        """Why an action of ``producer`` at ``epoch`` must not be applied ('' if it may)."""
        current = self.epochs.get(producer, 0)
        if epoch and epoch < current:
            return f"stale: epoch {epoch} of {producer!r} is older than its leader's {current}"
        return ""
