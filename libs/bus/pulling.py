"""A continuous pull: keep requests outstanding on a consumer, hand out messages one by one.

nats-py's ``fetch(batch)`` waits until the whole batch arrives or the timeout
passes when the stream is quiet, which adds up to the timeout to every live
event. The puller instead keeps ``batch`` messages of credit requested,
re-requests when half is used, and returns each message as soon as it lands,
so latency is one network hop while throughput keeps a full pipeline.
"""

from __future__ import annotations

import json

import nats.errors
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

    async def start(self) -> None:
        self._sub = await self._nc.subscribe(
            self._inbox, pending_msgs_limit=max(4 * self._batch, 65536)
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
                msg = await self._receive(self._sub)
            except nats.errors.TimeoutError:
                self._credit = 0  # no heartbeat: our requests are gone (reconnect, restart)
                continue
            status = msg.headers.get(STATUS) if msg.headers else None
            if not status:
                self._credit = max(0, self._credit - 1)
                return msg
            self._on_status(status, msg)

    async def _receive(self, sub: Subscription) -> Msg:
        """Take a buffered message directly: ``next_msg`` costs a task per call."""
        queue = sub._pending_queue
        if queue.empty():
            return await sub.next_msg(timeout=2 * self._heartbeat + 1)
        msg = queue.get_nowait()
        sub._pending_size -= len(msg.data)
        queue.task_done()
        return msg

    def _on_status(self, status: str, msg: Msg) -> None:
        headers = msg.headers or {}
        if status == "100":
            return  # idle heartbeat
        if status == "409" and "Consumer Deleted" in headers.get(DESCRIPTION, ""):
            raise ConsumerGone(f"{self._next_subject}: consumer deleted")
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
