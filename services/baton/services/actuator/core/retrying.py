"""What an API error means for an action (one table, by HTTP status) and how long to
back off before the next attempt."""

from __future__ import annotations

import random
from typing import Literal

# What to do with an API error, by HTTP status (0: timeout or connection error).
Policy = Literal["backoff", "reread", "gone", "fail"]
RETRY_POLICY: dict[int, Policy] = {
    0: "backoff",  # timeout, connection reset: the API server may be overloaded
    429: "backoff",  # API priority and fairness, or a PodDisruptionBudget on eviction
    500: "backoff",
    502: "backoff",
    503: "backoff",
    504: "backoff",
    409: "reread",  # optimistic concurrency: read the object again and recompute
    404: "gone",  # the target vanished: the action cannot apply
    410: "gone",
}


def policy_for(status: int) -> Policy:
    """The retry policy for an HTTP status; other 5xx back off, other 4xx fail."""
    return RETRY_POLICY.get(status, "backoff" if status >= 500 else "fail")


def backoff(attempt: int, *, base: float, cap: float, rng: random.Random) -> float:
    """Exponential backoff with equal jitter: half fixed, half drawn from the seeded rng."""
    ceiling: float = min(cap, base * 2.0 ** max(attempt - 1, 0))
    return ceiling / 2 + rng.random() * ceiling / 2
