"""tests.pipeline.until, the one wait of the test suite: it returns what the check found,
fails naming what it waited for, and a guard ends it at once."""

from __future__ import annotations

import pytest

from tests.pipeline import until

pytestmark = pytest.mark.unit


async def test_it_returns_the_first_truthy_value_of_a_plain_or_async_check() -> None:
    seen = iter([0, 0, 7])
    assert await until(lambda: next(seen), what="seven", step=0) == 7

    async def ready() -> str:
        return "yes"

    assert await until(ready, what="ready") == "yes"


async def test_a_timeout_names_what_it_waited_for_and_the_last_value() -> None:
    with pytest.raises(AssertionError, match=r"waiting for the moon \(last: 0\)"):
        await until(lambda: 0, what="the moon", within=0.05, step=0.01)


async def test_a_guard_fails_the_wait_at_once() -> None:
    looks = []

    def exited() -> None:
        if len(looks) == 2:
            raise AssertionError("the child exited")

    with pytest.raises(AssertionError, match="the child exited"):
        await until(lambda: looks.append(1), what="never", within=60, step=0, guard=exited)
    assert len(looks) == 2
