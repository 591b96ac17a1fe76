"""Recent changes and the watchers that follow them.

Every write to the store is one :class:`Change` with the next resourceVersion, kept in
a bounded ring (the analogue of etcd's compaction window: a watch or a continue token
from before the ring's start gets 410 Expired). Each change is serialized once; all
watchers that want it share the same bytes. A watcher has a bounded queue: one that
falls that far behind is closed, as the API server closes a slow watch, and its client
re-watches from the last resourceVersion it saw.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

Predicate = Callable[[dict[str, Any]], bool]
_encode = msgspec.json.Encoder().encode


def frame(event_type: str, raw: bytes) -> bytes:
    """One watch event line: ``{"type": ..., "object": ...}`` and a newline."""
    return b'{"type":"' + event_type.encode() + b'","object":' + raw + b"}\n"


@dataclass(slots=True)
class Change:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    res: str
    namespace: str
    obj: dict[str, Any]
    raw: bytes
    prev: dict[str, Any] | None = None
    _line: bytes | None = field(default=None, repr=False)

    def line(self) -> bytes:
        """The event as watchers without a selector transition see it, built once."""
        if self._line is None:
            self._line = frame(self.type, self.raw)
        return self._line


class Expired(Exception):
    """The requested resourceVersion is older than the retained window."""


class Ring:
    """The last ``capacity`` changes, contiguous in resourceVersion."""

    def __init__(self, capacity: int) -> None:
        self._items: deque[Change] = deque(maxlen=max(1, capacity))
        self.evicted_upto = 0  # the highest resourceVersion no longer retained

    def append(self, change: Change) -> None:
        if len(self._items) == self._items.maxlen:
            self.evicted_upto = self._items[0].rv
        self._items.append(change)

    def check(self, rv: int) -> None:
        """Raise Expired when changes after ``rv`` are no longer all retained."""
        if rv < self.evicted_upto:
            raise Expired(f"too old resource version: {rv} ({self.evicted_upto + 1})")

    def since(self, rv: int) -> Iterator[Change]:
        """Changes with resourceVersion greater than ``rv``, oldest first."""
        self.check(rv)
        if not self._items:
            return iter(())
        start = max(0, rv + 1 - self._items[0].rv)
        return (self._items[i] for i in range(start, len(self._items)))


class Watcher:
    """One watch stream's filter and bounded queue of encoded event lines."""

    def __init__(
        self, *, res: str, namespace: str | None, predicate: Predicate | None, capacity: int
    ) -> None:
        self.res = res
        self.namespace = namespace
        self.predicate = predicate
        self.capacity = capacity
        self.lines: deque[bytes] = deque()
        self.last_rv = 0
        self.closed = False
        self.overflowed = False
        self._wake = asyncio.Event()

    def offer(self, change: Change) -> None:
        if self.closed or (self.namespace is not None and change.namespace != self.namespace):
            return
        line = self._line_for(change)
        if line is None:
            return
        if len(self.lines) >= self.capacity:
            self.overflowed = True
            self.close()
            return
        self.lines.append(line)
        self.last_rv = change.rv
        self._wake.set()

    def _line_for(self, change: Change) -> bytes | None:
        pred = self.predicate
        if pred is None:
            return change.line()
        now = pred(change.obj)
        if change.type == "MODIFIED":
            before = change.prev is not None and pred(change.prev)
            if now and not before:
                return frame("ADDED", change.raw)
            if before and not now:
                return frame("DELETED", change.raw)
        return change.line() if now else None

    def close(self) -> None:
        self.closed = True
        self._wake.set()

    async def wait(self, seconds: float) -> None:
        """Until there is something to send, the watcher closes, or ``seconds`` pass."""
        if self.lines or self.closed:
            return
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()

    def drain(self) -> bytes:
        out = b"".join(self.lines)
        self.lines.clear()
        return out
