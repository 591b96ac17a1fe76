"""Stops that always end, and retries that never swallow a stop.

Two rules every long-running loop in Baton follows:

1. **A cancel is never swallowed.** nats-py turns a cancellation it receives while
   waiting into its own errors (``TooManyStalledMsgsError``, ``TimeoutError``), or
   loses it inside ``asyncio.wait_for``, so a retry loop that catches ``Exception``
   would carry on after SIGTERM. ``retry`` checks ``Task.cancelling()`` after every
   attempt, and every loop calls ``checkpoint()`` once per turn.
2. **A stop has a deadline and names what is stuck.** ``finish_within`` gives work in
   hand ``grace`` seconds to finish, then cancels it and logs the task and where it
   waits; ``stuck_tasks`` lists every task still running with its current line, for
   the last words of a process that has to exit anyway.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

T = TypeVar("T")
log = structlog.get_logger("baton.runtime")


def stopping() -> bool:
    """True when the current task has been asked to stop (a cancel is pending)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def checkpoint() -> None:
    """Raise the cancel a library swallowed. ``asyncio.wait_for`` on Python 3.11 (which
    nats-py uses for every request) returns the result instead of raising when the
    awaited future completes in the loop turn the cancel arrives in; the task's cancel
    count still says it was asked to stop. Every loop calls this once per turn."""
    if stopping():
        raise asyncio.CancelledError


async def retry(
    attempt: Callable[[], Awaitable[T]],
    *,
    what: str,
    first_delay: float = 0.1,
    max_delay: float = 5.0,
    retry_on: tuple[type[BaseException], ...] = (Exception,),
) -> T:
    """Await ``attempt()`` until it succeeds, backing off; a cancel always propagates."""
    delay = first_delay
    while True:
        checkpoint()
        try:
            result = await attempt()
            checkpoint()
            return result
        except retry_on as exc:
            if stopping():
                raise asyncio.CancelledError from exc
            log.warning(f"{what} failed, retrying", error=repr(exc), retry_in=round(delay, 2))
        await asyncio.sleep(delay)
        delay = min(delay * 2, max_delay)


def where(task: asyncio.Task[object]) -> str:
    """``name (coroutine) at file:line`` of the innermost frame the task waits in."""
    frames = task.get_stack()
    coro = task.get_coro()
    label = f"{task.get_name()} ({getattr(coro, '__qualname__', coro)})"
    if not frames:
        return label
    frame = frames[-1]
    return f"{label} at {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"


def stuck_tasks(*, besides: asyncio.Task[object] | None = None) -> list[str]:
    return sorted(where(t) for t in asyncio.all_tasks() if t is not besides and not t.done())


async def finish_within(task: asyncio.Task[T], grace: float, *, what: str) -> T | None:
    """Wait for ``task`` up to ``grace`` seconds; then cancel it and say where it was stuck.

    Returns its result, or None when it had to be cancelled. A cancel of the caller
    while waiting is passed on to ``task`` and re-raised."""
    done, _ = await asyncio.wait([task], timeout=grace)
    if done:
        return task.result()
    log.error("stop deadline passed: cancelling", what=what, grace_s=grace, stuck=where(task))
    task.cancel()
    await asyncio.wait([task], timeout=1.0)
    return None
