"""Run a service until SIGTERM or SIGINT, then stop it within a deadline.

The signal cancels the service's main task. A runner finishes the batch in hand
(store its outputs, settle its inputs) within its own stop grace; the caller closes
the bus afterwards. If the whole service has not ended ``deadline`` seconds after
the signal, something swallowed the cancel or waits on a dependency that is gone:
the process logs every task still running and where it waits, then exits with
status 1 (as Kubernetes would kill it after terminationGracePeriodSeconds, but
with a name on what was stuck).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import structlog

from baton.libs.runtime.heap import tune_gc
from baton.libs.runtime.stopping import stuck_tasks

T = TypeVar("T")
log = structlog.get_logger("baton.runtime")
EXIT_STUCK = 1


async def run_until_signalled(
    coro_factory: Callable[[], Coroutine[Any, Any, T]],
    *,
    signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT),
    deadline: float = 20.0,
) -> T | None:
    """Run ``coro_factory()``; returns its result, or None when stopped by a signal."""
    tune_gc()  # every service process starts here
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(coro_factory())
    stopped_by: list[str] = []

    def give_up() -> None:
        if task.done():
            return
        log.error("stop deadline passed: exiting", deadline_s=deadline,
                  stuck=stuck_tasks(besides=asyncio.current_task()))  # fmt: skip
        sys.stderr.flush()
        os._exit(EXIT_STUCK)

    def stop(sig: signal.Signals) -> None:
        if not stopped_by:
            log.info("stopping", signal=sig.name, deadline_s=deadline)
            loop.call_later(deadline, give_up)
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
