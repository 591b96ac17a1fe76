"""Suite-wide rules: a test that leaves tasks running fails."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio


@pytest_asyncio.fixture(autouse=True)
async def no_leftover_tasks(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Fail an async test whose tasks outlive it (they would leak into the next test).

    Only for async tests; runs last at teardown, after the test's own fixtures
    (servers, buses) have closed. Stragglers get a moment to finish, then are
    cancelled so one leak does not cascade.
    """
    yield
    if not asyncio.iscoroutinefunction(request.function):
        return
    current = asyncio.current_task()
    left = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
    if left:
        _, left_set = await asyncio.wait(left, timeout=1.0)
        left = list(left_set)
    for task in left:
        task.cancel()
    if left:
        names = ", ".join(sorted(_describe(t) for t in left))
        pytest.fail(f"test left {len(left)} task(s) running: {names}")


def _describe(task: asyncio.Task[object]) -> str:
    coro = task.get_coro()
    return getattr(coro, "__qualname__", None) or task.get_name()
