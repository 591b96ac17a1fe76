"""Read the current state: the latest event of every subject under a filter, then stop.

For a quick look or a bootstrap that does not need to follow live changes. A
service that must follow on without a gap consumes with
``deliver="last_per_subject"`` instead (same first part, then live).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy

from baton.libs.bus.pulling import Puller
from baton.proto.codec import Undecodable, decode

log = structlog.get_logger("baton.bus")


IDLE_S = 2.0  # no message this long: re-read how many are still pending
K8S_SUFFIX, HISTORY_SUFFIX = "_K8S", "_HISTORY"  # stream names: HISTORY copies K8S


async def snapshot(
    nc: Client,
    js: JetStreamContext,
    filter_subject: str,
    *,
    type_: Any,
    stream: str | None = None,
    batch: int = 1024,
    recover: bool = True,
) -> list[Any]:
    """Decoded latest event per subject, in stream order; poison is skipped (and logged),
    and on K8S replaced by the object's last good revision from HISTORY (``last_good``)."""
    if stream is None:
        stream = await js.find_stream_name_by_subject(filter_subject)
    info = await _reader(js, stream, filter_subject, DeliverPolicy.LAST_PER_SUBJECT)
    events: list[Any] = []
    pending = info.num_pending or 0
    puller = Puller(nc, stream=stream, consumer=info.name, batch=min(batch, max(pending, 1)))
    await puller.start()
    try:
        while pending > 0:
            try:
                async with asyncio.timeout(IDLE_S):
                    raw = await puller.next()
            except TimeoutError:
                # What was pending may be gone before it was delivered (a tombstone's TTL,
                # a newer version of the subject): ask the server what is still left.
                pending = (await js.consumer_info(stream, info.name)).num_pending or 0
                continue
            pending = int(raw.metadata.num_pending)
            try:
                events.append(decode(raw.data, type_))
            except Undecodable as exc:
                log.warning("snapshot skipped poison", subject=raw.subject, reason=str(exc))
                if recover and stream.endswith(K8S_SUFFIX):  # its last good revision instead
                    history = stream.removesuffix(K8S_SUFFIX) + HISTORY_SUFFIX
                    upto = int((await js.stream_info(history)).state.last_seq)
                    good = await last_good(nc, js, stream=history, subject=raw.subject,
                                           type_=type_, upto=upto)  # fmt: skip
                    if good is not None:
                        events.append(good[0])
    finally:
        await puller.stop()
        with contextlib.suppress(nats.js.errors.Error, nats.errors.Error):
            await js.delete_consumer(stream, info.name)
    return events


async def last_good(
    nc: Client, js: JetStreamContext, *, stream: str, subject: str, type_: Any, upto: int
) -> tuple[Any, Msg] | None:
    """The last message on ``subject`` in ``stream`` at or below sequence ``upto`` that
    decodes as ``type_`` (and is within bounds), with it; None when there is none.

    For a poison message on a latest-per-subject stream (K8S keeps one message per
    object): the object's history (HISTORY copies K8S) still holds the revision before
    the poison, which is the last good state a consumer should keep."""
    info = await _reader(js, stream, subject, DeliverPolicy.ALL)
    left, good = int(info.num_pending or 0), None
    puller = Puller(nc, stream=stream, consumer=info.name, batch=min(1024, max(left, 1)))
    await puller.start()
    try:
        while left > 0:
            async with asyncio.timeout(IDLE_S):  # what was pending may have aged out
                raw = await puller.next()
            left = int(raw.metadata.num_pending)
            if int(raw.metadata.sequence.stream) > upto:
                break
            with contextlib.suppress(Undecodable):
                good = (decode(raw.data, type_), raw)
    except TimeoutError:
        log.warning("history read stopped short", subject=subject, stream=stream)
    finally:
        await puller.stop()
        with contextlib.suppress(nats.js.errors.Error, nats.errors.Error):
            await js.delete_consumer(stream, info.name)
    return good


async def _reader(
    js: JetStreamContext, stream: str, subject: str, deliver: DeliverPolicy
) -> ConsumerInfo:
    """An ephemeral, unacknowledged consumer in memory that the server drops when idle."""
    return await js.add_consumer(
        stream,
        config=ConsumerConfig(
            deliver_policy=deliver, ack_policy=AckPolicy.NONE, filter_subject=subject,
            mem_storage=True, inactive_threshold=30.0,
        ),
    )  # fmt: skip
