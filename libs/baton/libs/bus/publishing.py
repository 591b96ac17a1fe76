"""Publishing to JetStream with ``Nats-Msg-Id`` dedup, one at a time or pipelined."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import NamedTuple

import msgspec
from nats.js import JetStreamContext
from nats.js.api import PubAck
from prometheus_client import Counter

from baton.proto.codec import encode

MSG_ID = "Nats-Msg-Id"
TTL = "Nats-TTL"
WINDOW = 1024  # unacknowledged publishes per publish_many call
MAX_PENDING = 16384  # nats-py's own limit (JetStreamContext publish_async_max_pending)

PUBLISHED = Counter("baton_bus_published_total", "Messages published to JetStream", ["outcome"])


class Outgoing(NamedTuple):
    """One message for ``publish_many``; a plain ``(subject, event, msg_id)`` tuple also works."""

    subject: str
    event: msgspec.Struct
    msg_id: str | None = None
    ttl: str | None = None  # e.g. "1h": JetStream removes the message then (Nats-TTL)


class PublishError(RuntimeError):
    """Some messages of a batch were not stored; ``failed`` says which and why."""

    def __init__(self, failed: list[tuple[str, BaseException]]) -> None:
        self.failed = failed
        first_subject, first_error = failed[0]
        super().__init__(
            f"{len(failed)} message(s) not stored, first {first_subject!r}: {first_error!r}"
        )


def headers_for(msg_id: str | None, ttl: str | None) -> dict[str, str] | None:
    if msg_id is None and ttl is None:
        return None
    headers: dict[str, str] = {}
    if msg_id is not None:
        headers[MSG_ID] = msg_id
    if ttl is not None:
        headers[TTL] = ttl
    return headers


async def publish(
    js: JetStreamContext,
    subject: str,
    event: msgspec.Struct,
    *,
    msg_id: str | None = None,
    ttl: str | None = None,
) -> int:
    """Publish and wait for the stream's ack; returns the stream sequence.

    A duplicate (same ``msg_id`` within the stream's duplicate window) is not
    stored again; the sequence of the original is returned.
    """
    ack: PubAck = await js.publish(subject, encode(event), headers=headers_for(msg_id, ttl))
    PUBLISHED.labels(outcome="duplicate" if ack.duplicate else "stored").inc()
    return ack.seq


async def publish_many(
    js: JetStreamContext,
    items: Iterable[tuple[str, msgspec.Struct, str | None] | Outgoing],
    *,
    ack_wait: float = 10.0,
    window: int = WINDOW,
) -> None:
    """Pipeline the publishes (up to ``window`` unacknowledged at once, acks come back in
    order) and wait for every ack.

    The window stays below nats-py's own limit of pending async publishes, so nats-py
    never has to wait for room; that wait would turn a cancel into its own
    ``TooManyStalledMsgsError``. Raises ``PublishError`` listing the failures after all
    have been tried; the caller can simply publish the batch again (msg ids make that
    safe).
    """
    futures: list[tuple[str, asyncio.Future[PubAck]]] = []
    failed: list[tuple[str, BaseException]] = []
    pending = list(items)
    unacked = 0  # index of the oldest publish not known to be acknowledged
    for index, item in enumerate(pending):
        while unacked < len(futures) and futures[unacked][1].done():
            unacked += 1
        if len(futures) - unacked >= window:
            # Wait for half the window at once: waiting per message would hand the loop
            # (and nats-py's flusher, one small socket write each time) a turn per publish.
            half = futures[unacked + window // 2][1]
            done, _ = await asyncio.wait([half], timeout=ack_wait)
            if not done:  # JetStream is not answering: stop here, the caller retries
                unsent = TimeoutError("not sent: JetStream stopped acknowledging")
                failed += [(later[0], unsent) for later in pending[index:]]
                break
        ttl = item[3] if len(item) > 3 else None
        headers = headers_for(item[2], ttl)
        future = await js.publish_async(item[0], encode(item[1]), headers=headers)
        futures.append((item[0], future))
    results = await _settle([f for _, f in futures], ack_wait=ack_wait)
    stored = duplicates = 0
    for (subject, _), result in zip(futures, results, strict=True):
        if isinstance(result, BaseException):
            failed.append((subject, result))
        elif result.duplicate:
            duplicates += 1
        else:
            stored += 1
    PUBLISHED.labels(outcome="stored").inc(stored)
    PUBLISHED.labels(outcome="duplicate").inc(duplicates)
    if failed:
        PUBLISHED.labels(outcome="failed").inc(len(failed))
        raise PublishError(failed)


async def _settle(
    futures: list[asyncio.Future[PubAck]], *, ack_wait: float
) -> list[PubAck | BaseException]:
    """Wait for every ack up to ``ack_wait`` seconds; a missing ack counts as a TimeoutError."""
    if futures:
        _, late = await asyncio.wait(futures, timeout=ack_wait)
        for future in late:
            future.cancel()
    results: list[PubAck | BaseException] = []
    for future in futures:
        if future.cancelled():
            results.append(TimeoutError("no ack from JetStream"))
        elif (error := future.exception()) is not None:
            results.append(error)
        else:
            results.append(future.result())
    return results
