"""Whether JetStream stores what Baton writes, and what Baton's streams reserve.

A full store stops everything: NATS refuses every write ("insufficient resources"),
and after a write error on a full disk the stream stops acknowledging writes (or
JetStream is disabled) until nats-server restarts. A service
that still answers ``/readyz`` 200 then hides the outage; ``problem`` is what
readiness asks instead (``libs.runner.serving``). A store too small for the streams'
reservations (HISTORY's ``max_bytes``) is ``StoreTooSmall`` at start-up, naming the
stream, what it reserves and how that was sized.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import nats.errors
import nats.js.errors
import structlog

from baton.libs.runtime.stopping import checkpoint

if TYPE_CHECKING:
    from baton.libs.bus.connection import Bus

INSUFFICIENT_STORAGE = 10047  # JetStream's err_code: a stream's reservation does not fit
INSUFFICIENT_RESOURCES = 10023  # JetStream's err_code: a write does not fit
log = structlog.get_logger("baton.bus")

ANSWER_S = 2.0  # JetStream that does not answer its account info this fast is down
# A refused write counts this long: a service retrying its writes refreshes it, and one
# lost write of a service that then idles (a webhook's record) does not keep it unready.
REFUSAL_S = 30.0


class StoreTooSmall(RuntimeError):
    """NATS's JetStream store cannot hold what Baton's streams reserve."""


def refused_for_space(exc: BaseException) -> bool:
    """Whether a failed write says the store is full, JetStream is disabled, or the stream
    stopped acknowledging (nats-server 2.15 after a write error on a full disk: a stream's
    publishes time out, even once space returns, until the server restarts)."""
    if isinstance(exc, nats.js.errors.APIError):
        return exc.err_code in (INSUFFICIENT_RESOURCES, INSUFFICIENT_STORAGE) or exc.code == 503
    return isinstance(exc, nats.errors.NoRespondersError | nats.errors.TimeoutError | TimeoutError)


def too_small(stream: str, max_bytes: int, why: str) -> StoreTooSmall:
    return StoreTooSmall(
        f"NATS's JetStream store cannot reserve {max_bytes / 1024**3:.2f} GiB for stream "
        f"{stream} ({why}): give the store more room (nats-server reserves at most 75% of "
        "the free disk, or jetstream.max_file_store), or size HISTORY for fewer nodes "
        "(BATON_CLUSTER_NODES; docs/bus.md, Storage)"
    )


async def problem(bus: Bus) -> str:
    """Why a write to JetStream would not be stored now ('' when it would): JetStream does
    not answer (disabled, or NATS away), or it refused or left unacknowledged this bus's
    last write, in the last ``REFUSAL_S`` (cleared by the next stored write)."""
    if not bus.nc.is_connected:
        return "not connected to NATS"
    try:
        async with asyncio.timeout(ANSWER_S):
            await bus.js.account_info()
    except (TimeoutError, nats.errors.Error) as exc:
        return f"JetStream does not answer ({exc!r}): disabled (a full store?) or down"
    if bus.write_refused and time.monotonic() - bus.write_refused_at < REFUSAL_S:
        return f"JetStream refused the last write: {bus.write_refused}"
    return ""


class Watch:
    """``problem`` asked every ``every`` seconds, for a synchronous readiness check."""

    def __init__(self, bus: Bus, *, every: float = 5.0) -> None:
        self.bus, self.every = bus, every
        self.problem = ""

    async def run(self) -> None:
        while True:
            found = await problem(self.bus)
            checkpoint()  # nats-py may have swallowed a cancel: without this, it runs on
            if found and found != self.problem:
                log.warning("jetstream stores nothing: not ready", why=found)
            elif self.problem and not found:
                log.info("jetstream stores again: ready")
            self.problem = found
            await asyncio.sleep(self.every)
