"""Pacing API writes: a token bucket in which each priority class leaves a reserve for the
classes above it, so under load health actions find tokens that balloons could not take."""

from __future__ import annotations

# Share of the burst a priority class must leave in the bucket for the classes above
# it: under load, health actions always find tokens that balloons could not take.
RESERVE: dict[str, float] = {
    "health": 0.0,
    "placement": 0.0,
    "admission": 0.1,
    "validation": 0.15,  # preflight pods and the marks around them
    "scaling": 0.25,
    "balloon": 0.5,
    "status": 0.6,  # what Baton tells users: never at the expense of a decision
}


class Bucket:
    """A token bucket; each priority class keeps its reserve untouched (see RESERVE)."""

    __slots__ = ("at", "burst", "qps", "tokens")

    def __init__(self, *, qps: float, burst: int, now: float) -> None:
        self.qps, self.burst, self.tokens, self.at = qps, float(burst), float(burst), now

    def take(self, *, priority: str, cost: int, now: float) -> float:
        """Take ``cost`` tokens and return 0, or return the seconds until it could.

        A cost larger than the burst is granted when the bucket is full and leaves a
        debt, so one 1,000-pod gang goes through and the next action waits it off.
        """
        if self.qps <= 0:
            return 0.0
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.qps)
        self.at = now
        floor = self.burst * RESERVE[priority]
        need = floor + min(cost, self.burst - floor)
        if self.tokens >= need:
            self.tokens -= cost
            return 0.0
        return (need - self.tokens) / self.qps

    def charge(self, extra: int) -> None:
        if self.qps > 0:
            self.tokens -= extra
