"""Pacing API writes: a token bucket in which each priority class leaves a reserve for the
classes above it, so under load health actions find tokens that balloons could not take;
and an assured share of the rate for validation, which strict priority would starve."""

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

# The class that may take an assured share of the rate (``Limits.validation_share``)
# ahead of the classes above it, as a level's nominal share in Kubernetes' API Priority
# and Fairness, lent to the others while it has nothing queued. Validation is the one
# class that makes capacity: on a new cluster no bind can land before a node passes its
# preflight, yet by strict priority it gets what a steady stream of binds and admission
# marks leaves. In the 7,500-node LLM mix every node was validated at 255 s without a
# share and at 196-213 s with 0.4 (docs/benchmarks.md).
ASSURED = "validation"


class Bucket:
    """A token bucket; each priority class keeps its reserve untouched (see RESERVE)."""

    __slots__ = ("at", "burst", "qps", "tokens")

    def __init__(self, *, qps: float, burst: int, now: float) -> None:
        self.qps, self.burst, self.tokens, self.at = qps, float(burst), float(burst), now

    def wait(self, *, priority: str, cost: int, now: float, reserve: float | None = None) -> float:
        """Seconds until ``cost`` tokens could be taken by ``priority`` (0: now), taking
        none. ``reserve`` overrides the class's (an assured draw leaves none)."""
        if self.qps <= 0:
            return 0.0
        self._refill(now)
        floor = self.burst * (RESERVE[priority] if reserve is None else reserve)
        need = floor + min(cost, self.burst - floor)
        return 0.0 if self.tokens >= need else (need - self.tokens) / self.qps

    def take(self, *, priority: str, cost: int, now: float, reserve: float | None = None) -> float:
        """Take ``cost`` tokens and return 0, or return the seconds until it could.

        A cost larger than the burst is granted when the bucket is full and leaves a
        debt, so one 1,000-pod gang goes through and the next action waits it off.
        """
        wait = self.wait(priority=priority, cost=cost, now=now, reserve=reserve)
        if wait == 0.0:
            self.charge(cost)
        return wait

    def charge(self, extra: int) -> None:
        if self.qps > 0:
            self.tokens -= extra

    def spend(self, cost: int, now: float) -> None:
        """Take ``cost`` tokens now, into debt if need be (an assured draw: the others
        wait it off, and what they refill for is never taken from under them)."""
        if self.qps > 0:
            self._refill(now)
            self.tokens -= cost

    def _refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.qps)
        self.at = now


def assured(*, qps: float, share: float, now: float) -> Bucket | None:
    """The assured class's own bucket: ``share`` of the rate, a tenth of a second's worth
    of burst (an idle spell does not buy it a run ahead of the binds: with a second's
    worth, a bind waited behind the first 200 preflight writes). None: no share."""
    if qps <= 0 or share <= 0:
        return None
    return Bucket(qps=qps * share, burst=max(1, round(qps * share / 10)), now=now)
