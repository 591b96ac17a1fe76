"""Consuming: pull consumers with explicit ack, typed messages, poison to dead-letter.

One outcome vocabulary for every message: done -> ``ack()``, retry later ->
``nak(delay)``, poison -> ``term(reason)`` (dead-letter). ``fail(reason)`` is
"retry with backoff, dead-letter on the last delivery" for a handler that raised.
Payloads that do not decode as the consumer's type never reach the caller.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import nats.js.errors
import structlog
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from baton.libs.bus.deadletter import dead_letter
from baton.libs.bus.pulling import ConsumerGone, Puller
from baton.libs.runtime.stopping import checkpoint, retry
from baton.proto.codec import Undecodable, decode
from baton.proto.deadletter import ErrorClass

if TYPE_CHECKING:
    from baton.libs.bus.connection import Bus

T = TypeVar("T")
Delivery = Literal["all", "last_per_subject", "new"]

DELIVER_POLICIES: dict[str, DeliverPolicy] = {
    "all": DeliverPolicy.ALL,
    "last_per_subject": DeliverPolicy.LAST_PER_SUBJECT,
    "new": DeliverPolicy.NEW,
}
MAX_BACKOFF = 60.0

log = structlog.get_logger("baton.bus")


class Message(Generic[T]):
    """A decoded message and its acknowledgement; handle it with exactly one outcome."""

    __slots__ = ("_bus", "_max_deliver", "event", "raw")

    def __init__(self, raw: Msg, event: T, *, bus: Bus, max_deliver: int) -> None:
        self.raw = raw
        self.event = event
        self._bus = bus
        self._max_deliver = max_deliver

    @property
    def subject(self) -> str:
        return self.raw.subject

    @property
    def seq(self) -> int:
        return int(self.raw.metadata.sequence.stream)

    @property
    def deliveries(self) -> int:
        """How many times this message was delivered, this time included (1 = first)."""
        return int(self.raw.metadata.num_delivered)

    @property
    def pending(self) -> int:
        """Messages left in the consumer after this one (0 = caught up)."""
        return int(self.raw.metadata.num_pending)

    @property
    def headers(self) -> dict[str, str]:
        return dict(self.raw.headers or {})

    async def ack(self) -> None:
        await self.raw.ack()

    async def nak(self, delay: float | None = None) -> None:
        await self.raw.nak(delay=delay)

    async def term(self, reason: str, *, error_class: ErrorClass = "bad-input") -> None:
        """Give up on this message: dead-letter it with the reason, never redeliver."""
        await dead_letter(
            self._bus.js,
            self.raw,
            cluster=self._bus.cluster,
            reason=reason,
            error_class=error_class,
        )

    async def fail(self, reason: str, *, error_class: ErrorClass = "bug") -> bool:
        """Nak with exponential backoff; on the last allowed delivery, dead-letter instead.

        Returns True when the message was dead-lettered.
        """
        if 0 < self._max_deliver <= self.deliveries:
            await self.term(
                f"gave up after {self.deliveries} deliveries: {reason}", error_class=error_class
            )
            return True
        await self.nak(delay=min(MAX_BACKOFF, 2.0 ** (self.deliveries - 1)))
        return False


class Subscription(Generic[T]):
    """``async for msg in bus.consume(...)``; the consumer is created on first use."""

    def __init__(
        self,
        bus: Bus,
        filter_subject: str | tuple[str, ...],
        *,
        type_: Any,
        config: ConsumerConfig,
        batch: int,
        stream: str | None = None,
    ) -> None:
        self._bus = bus
        self.filter_subject = filter_subject
        self._type = type_
        self._config = config
        self._batch = batch
        self.stream = stream
        self.consumer: str | None = None
        self._puller: Puller | None = None
        self._max_deliver = -1
        self.initial_pending = 0  # messages the consumer held when it was created or bound
        self._closed = False

    async def start(self) -> None:
        if self._puller is not None:
            return
        js = self._bus.js
        if self.stream is None:
            subject = self.filter_subject
            first = subject if isinstance(subject, str) else subject[0]
            self.stream = await js.find_stream_name_by_subject(first)
        info = await _create_or_bind(js, self.stream, self._config)
        self.consumer = info.name
        self._max_deliver = int(info.config.max_deliver or -1)
        self.initial_pending = int(info.num_pending or 0)
        # A pull request outlives a stopped reader (the server cannot be told to forget
        # it): what it delivers to the gone inbox comes back only after ack_wait, so keep
        # requests short-lived next to ack_wait.
        expires = min(30.0, max(1.0, float(self._config.ack_wait or 30.0) / 2))
        self._puller = Puller(
            self._bus.nc, stream=self.stream, consumer=info.name, batch=self._batch,
            expires=expires, heartbeat=min(5.0, expires / 2),
        )  # fmt: skip
        await self._puller.start()

    def __aiter__(self) -> Subscription[T]:
        return self

    async def __anext__(self) -> Message[T]:
        if self._closed:
            raise StopAsyncIteration
        await self.start()
        while True:
            checkpoint()  # a cancel swallowed while dead-lettering the last message
            assert self._puller is not None
            try:
                raw = await self._puller.next()
            except ConsumerGone as exc:  # NATS restarted, or the consumer was deleted
                log.warning("consumer gone; binding again", subject=self.filter_subject,
                            error=str(exc))  # fmt: skip
                await self._puller.stop()
                self._puller = None
                await retry(self.start, what="binding the consumer again", max_delay=2.0)
                continue
            try:
                event: T = decode(raw.data, self._type)
            except Undecodable as exc:
                await dead_letter(
                    self._bus.js,
                    raw,
                    cluster=self._bus.cluster,
                    reason=str(exc),
                    error_class="bad-input",
                )
                continue
            return Message(raw, event, bus=self._bus, max_deliver=self._max_deliver)

    async def close(self) -> None:
        """Stop pulling; an ephemeral consumer is deleted, a durable one kept."""
        if self._closed:
            return
        self._closed = True
        self._bus.forget(self)
        if self._puller is not None:
            await self._puller.stop()
        if self._config.durable_name is None and self.consumer and not self._bus.nc.is_closed:
            with contextlib.suppress(nats.js.errors.Error, nats.errors.Error):
                await self._bus.js.delete_consumer(self.stream or "", self.consumer)

    async def __aenter__(self) -> Subscription[T]:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()


def consumer_config(
    filter_subject: str | tuple[str, ...],
    *,
    durable: str | None,
    deliver: Delivery,
    batch: int,
    max_deliver: int,
    ack_wait: float,
) -> ConsumerConfig:
    return ConsumerConfig(
        durable_name=durable,
        name=durable,
        deliver_policy=DELIVER_POLICIES[deliver],
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait,
        max_deliver=max_deliver,
        max_ack_pending=max(1000, 4 * batch),
        filter_subject=filter_subject if isinstance(filter_subject, str) else None,
        filter_subjects=None if isinstance(filter_subject, str) else list(filter_subject),
        inactive_threshold=None if durable else 300.0,
    )


async def _create_or_bind(js: Any, stream: str, config: ConsumerConfig) -> Any:
    """Create the consumer, or update a durable one; bind as-is if it cannot change."""
    try:
        return await js.add_consumer(stream, config=config)
    except nats.js.errors.BadRequestError as exc:
        if config.durable_name is None:
            raise
        log.warning(
            "consumer kept as it is", stream=stream, durable=config.durable_name, error=str(exc)
        )
        return await js.consumer_info(stream, config.durable_name)
