"""An allocation round computed from scratch: the definition ``incremental`` must meet.

1. snapshot: every pod's want (``demand.wants``), grouped by team (the books, by name);
2. decide: fair shares down tiers, teams and pods (``allocating.allocate``), in whole
   bits per second;
3. damp: keep limits that moved too little, never past the capacity (``damping.damp``).

Returns the pods whose limit (or ``PodLimit``) must be published. Every pod is visited
several times, so a round costs ~0.5 s for 100k pods; the service runs ``incremental``
and tests hold the two equal on random inputs.
"""

from __future__ import annotations

import math

from baton.services.bandwidth.core import allocating, damping, demand
from baton.services.bandwidth.core.ledger import NAN, Book
from baton.services.bandwidth.core.state import State, books


def decide(state: State, now: float) -> dict[str, int]:
    policy = state.policy
    order = books(state)
    # 1. snapshot
    oldest = now - policy.stale_s
    claims = [
        allocating.Claim(team=b.team, uids=b.uids, wants=_wants(state, b, oldest), caps=b.caps)
        for b in order
    ]
    # 2. decide
    shares = allocating.allocate(float(state.capacity), tiers=policy.tiers, claims=claims,
                                 reserve=policy.hysteresis)  # fmt: skip
    wanted = integers(claims, shares, capacity=state.capacity)
    # 3. damp
    limits = damping.damp(state.published, wanted, ratio=policy.hysteresis,
                          bps=policy.hysteresis_bps, capacity=state.capacity)  # fmt: skip
    for book, claim in zip(order, claims, strict=True):  # an incremental round may follow
        book.wants[:] = claim.wants
        book.want, book.level = claim.want, NAN
        book.all_moved()
    state.touched.clear()
    state.regime = ""
    return {
        uid: value
        for uid, value in limits.items()
        if state.published.get(uid) != value or uid not in state.limits
    }


def _wants(state: State, b: Book, oldest: float) -> list[float]:
    return demand.wants(state.policy, uids=b.uids, caps=b.caps, used=state.used,
                        published=state.published, oldest=oldest)  # fmt: skip


def integers(
    claims: list[allocating.Claim], shares: allocating.Shares, *, capacity: int
) -> dict[str, int]:
    """Whole bits per second, rounded down; any float excess comes off the largest."""
    wanted: dict[str, int] = {}
    for claim in claims:
        wanted.update(zip(claim.uids, map(math.floor, shares.pods[claim.team.name]), strict=True))
    excess = sum(wanted.values()) - capacity
    if excess > 0:
        largest = max(wanted, key=lambda uid: (wanted[uid], uid))
        wanted[largest] = max(0, wanted[largest] - excess)
    return wanted
