"""An allocation round that redoes only what moved; the same limits as ``reference``.

What a round depends on, and how this one notices it moved:

| input | noticed by |
|---|---|
| a pod's want (measured, stale, its limit, its cap) | ``state.touched``: only those again |
| a team's summed want | its book ``moved`` (``fsum`` again) |
| a team's share | the team-level allocation runs every round (a few dozen teams) |
| a pod's share ``min(want, level)`` | the team's water level changed, or its wants moved |

A team whose wants and level did not move keeps its whole-bps shares, and since its
published limits are what hysteresis made of them last round, hysteresis keeps them
again: nothing of it is visited, except when the total passes the capacity and kept
decreases are released (largest first, as ``damping.damp`` does). A team that moved
is damped per distinct (share, published) pair: its pods mostly share a level and a
published value, so that is a few pairs, not thousands of pods.
"""

from __future__ import annotations

import heapq
import math
from itertools import repeat

from baton.services.bandwidth.core import allocating, demand
from baton.services.bandwidth.core.fairshare import INF, sorted_level
from baton.services.bandwidth.core.ledger import NAN, UNPUBLISHED, Book
from baton.services.bandwidth.core.state import State, books, expire

Override = tuple[Book, int, int] | None  # (book, position, whole bps): the float excess taken off
Damped = dict[Book, tuple[list[int], list[int]]]  # book -> (shares, limits after hysteresis)


def decide(state: State, now: float) -> dict[str, int]:
    policy = state.policy
    oldest = now - policy.stale_s
    if now < state.last_round:  # time went back: a stale measurement may be fresh again
        state.touched.update(state.pods)
        state.expiry = [(at, 0, (uid,)) for uid, (_, at) in state.used.items()]
        heapq.heapify(state.expiry)
    expire(state, oldest)
    _refresh(state, oldest)
    order = books(state)
    for b in order:
        if b.moved:
            b.want, b.smallest = math.fsum(b.wants), min(b.wants)
    capacity = float(state.capacity)
    total_want = math.fsum(b.want for b in order)
    if total_want <= capacity:
        recompute = _spread(state, order, capacity=capacity, total_want=total_want)
    else:
        recompute = _levels(state, order, capacity=capacity)
    state.last_capacity = state.capacity
    override = _excess(state, order)
    if override is not None and override[0] not in recompute:
        recompute.append(override[0])
    changes = _damp(state, order, recompute, override)
    for b in order:
        b.moved, b.changed = False, []
        b.force = override is not None and override[0] is b
    return changes


def _refresh(state: State, oldest: float) -> None:
    """The wants of touched pods (of every pod, when most were touched)."""
    touched = state.touched
    if not touched:
        return
    policy, used, published = state.policy, state.used, state.published
    if len(touched) * 4 > len(state.pods):
        touched.clear()
        for b in books(state):
            fresh = demand.wants(policy, uids=b.uids, caps=b.caps, used=used,
                                 published=published, oldest=oldest)  # fmt: skip
            if fresh != b.wants:
                b.wants = fresh
                b.all_moved()
        return
    at: dict[Book, list[int]] = {}
    for uid in touched:
        book = state.book_of.get(uid)
        if book is not None:
            at.setdefault(book, []).append(book.index[uid])
    touched.clear()
    for b, positions in at.items():
        fresh = demand.wants(
            policy, uids=[b.uids[i] for i in positions], caps=[b.caps[i] for i in positions],
            used=used, published=published, oldest=oldest,
        )  # fmt: skip
        wants = b.wants
        for i, want in zip(positions, fresh, strict=True):
            if wants[i] != want:  # NAN (a new pod) differs from every want
                b.want_moved(i, want)


def _spread(state: State, order: list[Book], *, capacity: float, total_want: float) -> list[Book]:
    """Every want fits: shares in proportion to the wants, within caps (all pods at once)."""
    same = (
        state.regime == "spread"
        and state.last_capacity == state.capacity
        and not any(b.moved or b.force for b in order)
    )
    state.regime = "spread"
    if same:
        return []
    claims = [allocating.Claim(team=b.team, uids=b.uids, wants=b.wants, caps=b.caps) for b in order]
    spread = allocating.spreads(capacity, state.policy.hysteresis, total_want)
    shares = allocating.spread_spare(spread, claims=claims, total_want=total_want)
    for b in order:
        b.wanted = list(map(math.floor, shares.pods[b.team.name]))
        b.wanted_sum, b.level = sum(b.wanted), NAN
    return list(order)


def _levels(state: State, order: list[Book], *, capacity: float) -> list[Book]:
    """The wants exceed the capacity: each team's share, then its pods' water level. A team
    whose level held and whose wants moved at a few pods has only those shares redone."""
    totals = allocating.team_totals(
        capacity, tiers=state.policy.tiers, teams=[b.team for b in order],
        wants=[b.want for b in order],
    )  # fmt: skip
    fresh = state.regime != "levels"
    state.regime = "levels"
    recompute = []
    for b in order:
        level = _level(b, totals[b.team.name])
        if fresh or b.force or b.changed is None or level != b.level:  # NAN != anything
            if level == INF:
                b.wanted = list(map(math.floor, b.wants))
            else:
                b.wanted = list(map(math.floor, map(min, b.wants, repeat(level))))
            b.wanted_sum, b.level = sum(b.wanted), level
            recompute.append(b)
        elif b.changed and _reshare(b, level):
            recompute.append(b)
    return recompute


def _reshare(b: Book, level: float) -> bool:
    """The shares of the pods whose want changed; whether any share moved."""
    moved = False
    for i in b.changed or ():
        share = math.floor(min(b.wants[i], level))
        if share != b.wanted[i]:
            b.wanted_sum += share - b.wanted[i]
            b.wanted[i] = share
            moved = True
    return moved


def _level(b: Book, total: float) -> float:
    """``fairshare.equal_level``; most rounds every pod wants more than an equal share,
    which the smallest want alone tells, without sorting."""
    n = len(b.wants)
    if b.smallest * n > total:
        return total / n
    return sorted_level(total, sorted(b.wants))


def _excess(state: State, order: list[Book]) -> Override:
    """Floats summed past the capacity: the excess comes off the largest share (by uid)."""
    excess = sum(b.wanted_sum for b in order) - state.capacity
    if excess <= 0:
        return None
    top = max(max(b.wanted) for b in order)
    uid = max(b.uids[i] for b in order for i, v in enumerate(b.wanted) if v == top)
    b = state.book_of[uid]
    return b, b.index[uid], max(0, top - excess)


def _damp(
    state: State, order: list[Book], recompute: list[Book], override: Override
) -> dict[str, int]:
    """Hysteresis, as ``damping.damp``; returns the pods whose limit must be published."""
    policy = state.policy
    ratio, bps = policy.hysteresis, policy.hysteresis_bps
    damped: Damped = {}
    moved: set[Book] = set()
    total = 0
    again = set(recompute)
    for b in order:
        if b not in again:
            total += sum(b.pub)  # shares unchanged: hysteresis keeps what it kept
            continue
        shares = b.wanted
        if override is not None and override[0] is b:
            shares = list(shares)
            shares[override[1]] = override[2]
        pick = {}
        for share, old in set(zip(shares, b.pub, strict=True)):
            keep = old != UNPUBLISHED and abs(share - old) <= max(ratio * old, bps)
            pick[share, old] = old if keep else share
            if not keep and share != old:
                moved.add(b)
        out = list(map(pick.__getitem__, zip(shares, b.pub, strict=True)))
        damped[b] = (shares, out)
        total += sum(out)
    if total > state.capacity:
        moved |= _release(state, order, damped, total=total)
    changes: dict[str, int] = {}
    for b in moved:
        _, out = damped[b]
        changes.update(
            (b.uids[i], v) for i, (v, p) in enumerate(zip(out, b.pub, strict=True)) if v != p
        )
    for uid in state.unlisted:
        if uid in changes:
            continue
        b = state.book_of[uid]
        i = b.index[uid]
        changes[uid] = damped[b][1][i] if b in damped else b.pub[i]
    return changes


def _release(state: State, order: list[Book], damped: Damped, *, total: int) -> set[Book]:
    """Kept decreases push the total past the capacity: release them, largest first."""
    kept: list[tuple[int, str, Book, int, int]] = []  # (decrease, uid, book, position, share)
    for b in order:
        shares, out = damped.get(b, (b.wanted, b.pub))
        kept += [
            (o - s, b.uids[i], b, i, s)
            for i, (s, o, p) in enumerate(zip(shares, out, b.pub, strict=True))
            if o == p and o > s
        ]
    kept.sort(key=lambda k: (-k[0], k[1]))
    released: set[Book] = set()
    for decrease, _, b, i, share in kept:
        if b not in damped:
            damped[b] = (b.wanted, list(b.pub))
        damped[b][1][i] = share
        released.add(b)
        total -= decrease
        if total <= state.capacity:
            break
    return released
