"""Weighted max-min fair shares (water-filling), pure arithmetic.

Every claimant ``i`` has a weight ``w``, a guaranteed low ``lo`` and a want ``hi``
(``lo <= hi``; ``hi`` may be ``inf``). Its share is ``clamp(level * w, lo, hi)``, with
the one ``level`` at which the shares add up to the capacity; if the lows alone do not
fit, they are scaled down together; if every want fits, everyone gets its want.
That is weighted max-min fairness: nobody can get more without taking from someone
who has no more than their weighted share.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

INF = math.inf


def water_fill(
    capacity: float, *, weights: Sequence[float], lows: Sequence[float], highs: Sequence[float]
) -> list[float]:
    """Shares for a handful of claimants (tiers, teams): O(n log n)."""
    n = len(weights)
    if n == 0:
        return []
    low_total = math.fsum(lows)
    if low_total >= capacity:
        scale = capacity / low_total if low_total > 0 else 0.0
        return [lo * scale for lo in lows]
    if all(hi < INF for hi in highs) and math.fsum(highs) <= capacity:
        return list(highs)
    level, room, growing, active = _level(capacity, weights=weights, lows=lows, highs=highs)
    # A growing claimant's share is its part of the room left, (w / growing) * room: no
    # overflow where level * w would be inf * tiny (weights 1e300 apart, found by hypothesis).
    return [
        room * (w / growing) if i in active else lo if w <= 0 else min(max(level * w, lo), hi)
        for i, (w, lo, hi) in enumerate(zip(weights, lows, highs, strict=True))
    ]


def _level(
    capacity: float, *, weights: Sequence[float], lows: Sequence[float], highs: Sequence[float]
) -> tuple[float, float, float, set[int]]:
    """The level where sum(clamp(level * w, lo, hi)) == capacity (a sweep over breakpoints),
    with the room the growing claimants share, their total weight, and which they are.

    Below the first breakpoint every share sits at its low; each claimant starts
    growing at ``lo / w`` and stops at ``hi / w``.
    """
    events: list[tuple[float, bool, int]] = []  # (level, is a stop, claimant)
    for i, (w, lo, hi) in enumerate(zip(weights, lows, highs, strict=True)):
        if w <= 0:
            continue  # never grows (a weight that underflowed): it keeps its low
        events.append((lo / w, False, i))
        if hi < INF:
            events.append((hi / w, True, i))
    events.sort()  # at a tie, starts before stops
    fixed, growing, active = math.fsum(lows), 0.0, set[int]()
    for at, stop, i in events:
        if active and growing <= 0:  # weights of very different sizes cancelled out
            growing = math.fsum(weights[j] for j in active)
        if active and fixed + growing * at >= capacity:
            break
        if stop:
            fixed, growing = fixed + highs[i], growing - weights[i]
            active.discard(i)
        else:
            fixed, growing = fixed - lows[i], growing + weights[i]
            active.add(i)
    if not active:
        return INF, 0.0, 1.0, active  # cannot happen when the wants exceed capacity
    if growing <= 0:
        growing = math.fsum(weights[j] for j in active)
    return (capacity - fixed) / growing, capacity - fixed, growing, active


def equal_level(capacity: float, wants: Sequence[float]) -> float:
    """Equal-weight water level: shares ``min(want, level)`` add up to ``capacity``.

    The fast path for the many pods of one team (one sort of floats). Returns ``inf``
    when every want fits.
    """
    return sorted_level(capacity, sorted(wants))


def sorted_level(capacity: float, ordered: Sequence[float]) -> float:
    """``equal_level`` of wants already in ascending order."""
    left, remaining = capacity, len(ordered)
    for want in ordered:
        if want * remaining > left:
            return left / remaining
        left -= want
        remaining -= 1
    return INF
