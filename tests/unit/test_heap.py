"""Every service process collects garbage with Baton's thresholds, not CPython's defaults."""

from __future__ import annotations

import asyncio
import gc

import pytest

from baton.libs.runtime import run_until_signalled
from baton.libs.runtime.heap import THRESHOLDS

pytestmark = pytest.mark.unit


def test_a_service_runs_with_the_tuned_collector() -> None:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # CPython's defaults

    async def service() -> tuple[int, ...]:
        return gc.get_threshold()

    try:
        seen = asyncio.run(run_until_signalled(service, deadline=5.0))
    finally:
        gc.set_threshold(*before)
    assert seen == THRESHOLDS
    assert THRESHOLDS[0] > 700  # the young generation is collected less often
