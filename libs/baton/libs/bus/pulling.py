"""A continuous pull: keep requests outstanding on a consumer, hand out messages one by one.

nats-py's ``fetch(batch)`` waits until the whole batch arrives or the timeout
passes when the stream is quiet, which adds up to the timeout to every live
event. The puller instead keeps ``batch`` messages of credit requested,
re-requests when half is used, and returns each message as soon as it lands,
so latency is one network hop while throughput keeps a full pipeline.

Cancellation: messages arrive through a subscription callback into our own
``asyncio.Queue``; ``next()`` waits on that queue under ``asyncio.timeout``. A
queue ``get`` that is cancelled takes nothing, and ``asyncio.timeout`` keeps a
cancel from outside distinct from its own expiry. nats-py's ``next_msg`` wraps the
get in ``asyncio.wait_for``, which on Python 3.11 can drop a cancel that lands in
the same loop turn as a message: a reader cancelled then reads on forever. No
private attribute of nats-py is used.
"""

from __future__ import annotations

import asyncio
import json

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

STATUS = "Status"
DESCRIPTION = "Description"
PENDING = "Nats-Pending-Messages"


class ConsumerGone(RuntimeError):
    """The consumer was deleted on the server while we were pulling from it."""


class Puller:
    def __init__(
        self,
        nc: Client,
        *,
        stream: str,
        consumer: str,
        batch: int,
        expires: float = 30.0,
        heartbeat: float = 5.0,
    ) -> None:
        self._nc = nc
        self._next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._batch = max(1, batch)
        self._expires = expires
        self._heartbeat = heartbeat
        self._credit = 0
        self._inbox = nc.new_inbox()
        self._sub: Subscription | None = None
        self._queue: asyncio.Queue[Msg] = asyncio.Queue()

    async def start(self) -> None:
        async def arrived(msg: Msg) -> None:
            self._queue.put_nowait(msg)

        self._sub = await self._nc.subscribe(
            self._inbox, cb=arrived, pending_msgs_limit=max(4 * self._batch, 65536)
        )

    async def stop(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            if not self._nc.is_closed:
                await sub.unsubscribe()

    async def next(self) -> Msg:
        """The next stream message (status messages are handled here)."""
        assert self._sub is not None, "Puller.start() first"
        while True:
            if self._credit <= self._batch // 2:
                await self._request(self._batch - self._credit)
            try:
                async with asyncio.timeout(2 * self._heartbeat + 1):
                    msg = await self._queue.get()
            except TimeoutError:
                self._credit = 0  # no heartbeat: our requests are gone (reconnect, restart)
                continue
            status = msg.headers.get(STATUS) if msg.headers else None
            if not status:
                self._credit = max(0, self._credit - 1)
                return msg
            self._on_status(status, msg)

    def next_ready(self) -> Msg | None:
        """The next stream message if one has already arrived, else None (no wait)."""
        while not self._queue.empty():
            msg = self._queue.get_nowait()
            status = msg.headers.get(STATUS) if msg.headers else None
            if not status:
                self._credit = max(0, self._credit - 1)
                return msg
            self._on_status(status, msg)
        return None

    def _on_status(self, status: str, msg: Msg) -> None:
        headers = msg.headers or {}
        description = headers.get(DESCRIPTION, "")
        if status == "100":
            return  # idle heartbeat
        if status == "409" and "Consumer Deleted" in description:
            raise ConsumerGone(f"{self._next_subject}: consumer deleted")
        if status == "503" or (status == "404" and "Consumer" in description):
            # No responders: the consumer is gone (an in-memory consumer does not survive
            # a NATS restart) or JetStream is not back yet. The owner makes it again.
            raise ConsumerGone(f"{self._next_subject}: {status} {description or 'no responders'}")
        unfilled = headers.get(PENDING)
        if unfilled is not None and unfilled.isdigit():
            self._credit = max(0, self._credit - int(unfilled))  # 408: one request expired
        else:
            self._credit = 0

    async def _request(self, n: int) -> None:
        body = {
            "batch": n,
            "expires": int(self._expires * 1e9),
            "idle_heartbeat": int(self._heartbeat * 1e9),
        }
        await self._nc.publish(self._next_subject, json.dumps(body).encode(), reply=self._inbox)
        self._credit += n
