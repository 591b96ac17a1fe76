"""Simulated pod egress for ``--fleet``: each pod's demand from a seeded distribution.

Pure and deterministic: a pod's demand depends on the seed, its uid and the period it
is in (``at // period_s``), so a rerun with the same seed sends the same, and demand
moves every period (a pod starts or finishes a download) so the shares move too.

| share of pods (each period) | demand |
|---|---|
| 70% | idle: 0 to 2% of ``mean_bps`` (package checks, logs) |
| 20% | steady: 10% to 100% of ``mean_bps`` |
| 10% | downloading: 2x to 20x ``mean_bps`` (a data set, a checkpoint) |
"""

from __future__ import annotations

import hashlib

_TABLE = ((0.70, 0.0, 0.02), (0.90, 0.10, 1.0), (1.00, 2.0, 20.0))  # (up to, low, high) x mean


def demand_bps(uid: str, *, seed: int, at: float, period_s: float, mean_bps: float) -> int:
    """What the pod would send to the internet now, unshaped (bits per second)."""
    phase = int(at // period_s)
    digest = hashlib.blake2b(f"{seed}:{uid}:{phase}".encode(), digest_size=16).digest()
    kind = int.from_bytes(digest[:8], "big") / 2**64
    where = int.from_bytes(digest[8:], "big") / 2**64
    for up_to, low, high in _TABLE:
        if kind < up_to:
            return int(mean_bps * (low + (high - low) * where))
    return 0  # unreachable: the table ends at 1.0


def sent_bps(demand: int, limit: int) -> int:
    """A shaped pod sends what it wants up to its limit (0: not shaped yet, unlimited)."""
    return min(demand, limit) if limit > 0 else demand
