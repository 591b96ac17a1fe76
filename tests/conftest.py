"""Suite-wide rules: a test that leaves tasks running fails; in CI, so does a skipped one."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator

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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under ``CI=true`` a skip is a failure that names why the test could not run.

    A test skipped for a missing tool (iperf3, promtool, kubectl, root for network
    namespaces) did not run; CI installs every tool the suite needs (.ci/run), so a skip
    there means an install step is missing, and a green run would hide it.
    """
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.skipped and os.environ.get("CI", "").lower() == "true":
        report.outcome = "failed"
        report.longrepr = f"CI=true, and this test would be skipped: {_skip_reason(report)}"


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)
