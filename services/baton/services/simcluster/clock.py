"""Simulated time: delays in simulated seconds, run ``speed`` times faster than real.

Object timestamps stay real wall-clock time (UTC, RFC 3339, second precision as the
API server writes them), so they compare with the ``creationTimestamp`` the store
sets; only waiting is compressed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any


class Clock:
    def __init__(self, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError(f"speed: expected > 0, got {speed}")
        self.speed = speed
        self._start = time.monotonic()

    def now(self) -> float:
        """Simulated seconds since this clock started."""
        return (time.monotonic() - self._start) * self.speed

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of simulated time."""
        await asyncio.sleep(max(0.0, seconds) / self.speed)

    def call_later(
        self, seconds: float, fn: Callable[..., None], *args: Any
    ) -> asyncio.TimerHandle:
        """Call ``fn(*args)`` after ``seconds`` of simulated time (a loop callback, no task)."""
        return asyncio.get_running_loop().call_later(max(0.0, seconds) / self.speed, fn, *args)

    async def sleep_until(self, at: float) -> None:
        await self.sleep(at - self.now())


def timestamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
