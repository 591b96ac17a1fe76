"""``bounded``: at most ``limit`` at once; the first failure stops the others and is
raised, and the calling task is not left looking cancelled (a TaskGroup on Python 3.11
leaves it so, and the action's retries then give up without a result)."""

from __future__ import annotations

import asyncio

import pytest

from baton.services.actuator.binding import bounded

pytestmark = pytest.mark.unit


async def test_runs_every_item_at_most_limit_at_once_and_keeps_order() -> None:
    running, most = 0, 0

    async def double(n: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0)
        running -= 1
        return 2 * n

    assert await bounded(list(range(10)), double, limit=3) == [2 * n for n in range(10)]
    assert most == 3


async def test_the_first_failure_is_raised_the_rest_stopped_and_the_caller_not_cancelled() -> None:
    started: list[int] = []
    finished: list[int] = []

    async def fail_on_two(n: int) -> int:
        started.append(n)
        if n == 2:
            raise ValueError("node n2 is gone")
        await asyncio.sleep(0.05)
        finished.append(n)
        return n

    with pytest.raises(ValueError, match="n2 is gone"):
        await bounded([1, 2, 3, 4], fail_on_two, limit=4)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    assert finished == []  # the others were stopped, not left running
    async with asyncio.timeout(1):  # the caller goes on: a retry can wait and try again
        await asyncio.sleep(0.01)
