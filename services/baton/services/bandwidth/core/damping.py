"""Hysteresis: keep a published limit until the new one moves far enough, within capacity.

A limit is republished only when it moves by more than ``hysteresis`` (relative to
the published value) and by more than ``hysteresis_bps``; small moves keep the old
value, so limits do not flap with noisy measurements. Kept values must not push the
total past the capacity: if they would, kept decreases are released (largest first)
until the total fits. The new limits add up to at most the capacity, so it always does.
"""

from __future__ import annotations


def damp(
    published: dict[str, int],
    wanted: dict[str, int],
    *,
    ratio: float,
    bps: int,
    capacity: int,
) -> dict[str, int]:
    """The limits to publish for every uid in ``wanted`` (``published``: the last ones)."""
    out: dict[str, int] = {}
    kept_decreases: list[tuple[int, str]] = []
    total = 0
    for uid, new in wanted.items():
        old = published.get(uid)
        if old is not None and abs(new - old) <= max(ratio * old, bps):
            out[uid] = old
            total += old
            if old > new:
                kept_decreases.append((old - new, uid))
        else:
            out[uid] = new
            total += new
    if total > capacity:
        kept_decreases.sort(key=lambda d: (-d[0], d[1]))
        for excess, uid in kept_decreases:
            out[uid] = wanted[uid]
            total -= excess
            if total <= capacity:
                break
    return out
