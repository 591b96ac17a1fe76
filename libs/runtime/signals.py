"""Run a service until SIGTERM or SIGINT, then stop it gracefully.

The signal cancels the service's main task. A service built on
``libs.service.run_core`` finishes the message in hand (handle, publish, ack)
before the cancellation takes effect; the caller closes the bus afterwards.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import structlog

T = TypeVar("T")
log = structlog.get_logger("baton.runtime")


async def run_until_signalled(
    coro_factory: Callable[[], Coroutine[Any, Any, T]],
    *,
    signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT),
) -> T | None:
    """Run ``coro_factory()``; returns its result, or None when stopped by a signal."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(coro_factory())
    stopped_by: list[str] = []

    def stop(sig: signal.Signals) -> None:
        if not stopped_by:
            log.info("stopping", signal=sig.name)
        stopped_by.append(sig.name)
        task.cancel()

    for sig in signals:
        loop.add_signal_handler(sig, stop, sig)
    try:
        return await task
    except asyncio.CancelledError:
        if not stopped_by:
            raise  # cancelled by our caller, not by a signal
        return None
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
