"""Kubernetes Events as the events API expects them, and never a storm: pure.

A repeat of an Event (same object, reason, type, action, note and controller: client-go's
"isomorphic" events) within ``window`` seconds of the last one joins its *series*: the
Event object is written once, then patched with ``series.count`` and
``series.lastObservedTime`` at most every ``series_every`` seconds; repeats in between
are counted in memory and written with the next patch, or when that interval is over
(``due``). A new Event is written only while both budgets have a token: one per object
(``object_burst``, refilled one per ``object_every`` seconds: client-go's spam filter,
25 and 5 minutes) and one for the whole cluster (``burst``, ``qps``). Over budget it is
dropped and counted, not queued: a storm of decisions cannot load the API server.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import msgspec

from baton.proto import ids
from baton.proto.actions import RecordEvent


class EventLimits(msgspec.Struct, frozen=True, kw_only=True):
    window: float = 360.0  # a repeat within this of the last occurrence joins the series
    series_every: float = 30.0  # a series is written at most this often
    object_burst: int = 25  # new Events per object ...
    object_every: float = 300.0  # ... refilled one per this many seconds
    burst: int = 500  # new Events in the whole cluster ...
    qps: float = 10.0  # ... refilled this many per second
    remembered: int = 10_000  # series and objects kept (oldest forgotten first)


class EventWrite(msgspec.Struct, frozen=True, kw_only=True):
    """What the applier writes: the Event ``name``; ``count`` 1 creates it, more patches
    its series (creating it when it is gone)."""

    name: str
    count: int
    first: float
    last: float


Key = tuple[str, ...]


@dataclass(slots=True)
class Series:
    name: str
    first: float
    last: float
    count: int
    written: int  # the count last written
    written_at: float
    template: RecordEvent  # the latest occurrence (its id names the flush)


@dataclass(slots=True)
class Tokens:
    tokens: float
    at: float

    def take(self, now: float, *, burst: int, per_second: float) -> bool:
        self.tokens = min(float(burst), self.tokens + (now - self.at) * per_second)
        self.at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


@dataclass(slots=True)
class Events:
    limits: EventLimits
    series: OrderedDict[Key, Series] = field(default_factory=OrderedDict)
    objects: OrderedDict[str, Tokens] = field(default_factory=OrderedDict)
    total: Tokens | None = None
    due: dict[Key, float] = field(default_factory=dict)  # series with unwritten repeats
    dropped: int = 0

    def record(self, event: RecordEvent, now: float) -> EventWrite | str:
        """The write this occurrence needs, or why none ("aggregated ...", "dropped ...")."""
        key = isomorphic(event)
        found = self.series.get(key)
        if found is not None and now - found.last <= self.limits.window:
            found.count, found.last, found.template = found.count + 1, now, event
            self.series.move_to_end(key)
            if now - found.written_at >= self.limits.series_every:
                return self._written(key, found, now)
            self.due[key] = found.written_at + self.limits.series_every
            return f"aggregated into Event {found.name} (x{found.count})"
        if not self._budget(event, now):
            self.dropped += 1
            return "dropped: over the Event budget (docs/actuator.md, Events)"
        name = f"{event.regarding.name[:200]}.{ids.digest(*key, f'{now:.6f}')[:16]}"
        self.series[key] = Series(
            name=name, first=now, last=now, count=1, written=1, written_at=now, template=event
        )
        self._forget_oldest()
        return EventWrite(name=name, count=1, first=now, last=now)

    def flush(self, now: float) -> list[tuple[RecordEvent, EventWrite]]:
        """Series whose counted repeats are due to be written."""
        out = []
        for key, at in sorted(self.due.items(), key=lambda item: item[1]):
            if at > now:
                continue
            del self.due[key]
            found = self.series.get(key)
            if found is not None and found.count > found.written:
                write = self._written(key, found, now)
                event = msgspec.structs.replace(
                    found.template, id=f"{found.template.id}~{found.count}"
                )
                out.append((event, write))
        return out

    def next_due(self) -> float | None:
        return min(self.due.values(), default=None)

    def _written(self, key: Key, found: Series, now: float) -> EventWrite:
        found.written, found.written_at = found.count, now
        self.due.pop(key, None)
        return EventWrite(name=found.name, count=found.count, first=found.first, last=found.last)

    def _budget(self, event: RecordEvent, now: float) -> bool:
        limits = self.limits
        if self.total is None:
            self.total = Tokens(tokens=float(limits.burst), at=now)
        ref = event.regarding
        who = f"{ref.kind}/{ref.namespace}/{ref.name}/{ref.uid}"
        mine = self.objects.get(who)
        if mine is None:
            mine = self.objects[who] = Tokens(tokens=float(limits.object_burst), at=now)
        self.objects.move_to_end(who)
        per_object = 1.0 / limits.object_every if limits.object_every > 0 else float("inf")
        if not mine.take(now, burst=limits.object_burst, per_second=per_object):
            return False
        return self.total.take(now, burst=limits.burst, per_second=limits.qps)

    def _forget_oldest(self) -> None:
        for kept in (self.series, self.objects):
            while len(kept) > self.limits.remembered:
                key, _ = kept.popitem(last=False)
                if kept is self.series:
                    self.due.pop(key, None)  # type: ignore[arg-type]


def isomorphic(event: RecordEvent) -> Key:
    """What makes two Events the same one repeated (client-go's event key)."""
    ref = event.regarding
    return (
        ref.api_version, ref.kind, ref.namespace, ref.name, ref.uid,
        event.controller, event.action, event.reason, event.event_type, event.note,
    )  # fmt: skip
