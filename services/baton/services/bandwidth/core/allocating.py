"""Cluster egress capacity -> tiers -> teams -> pods, each level a fair share.

1. Tiers: each tier first keeps its guaranteed low, the larger of its ``minimum``
   share of capacity and its teams' ``minimum_bps`` (never more than it wants);
   what is left goes to the tiers in order (strict priority).
2. Teams within a tier: weighted max-min (``fairshare.water_fill``), each team's
   ``minimum_bps`` as its low, its pods' summed wants as its high.
3. Pods within a team: equal max-min over their wants (``fairshare.equal_level``).
4. When every want fits, the spare capacity is spread in proportion to the wants
   (so pods can grow before they hit a limit), never above a pod's own cap.

A want is ``inf`` when the pod is held at its limit (its true demand is unknown).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from baton.proto.bandwidth import TeamEgress, Tier
from baton.services.bandwidth.core.fairshare import INF, equal_level, water_fill


@dataclass(slots=True)
class Claim:
    """One team's pods: parallel lists of pod uids, wants and caps (bits per second)."""

    team: TeamEgress
    uids: list[str] = field(default_factory=list)
    wants: list[float] = field(default_factory=list)
    caps: list[float] = field(default_factory=list)

    @property
    def want(self) -> float:
        return math.fsum(self.wants)  # inf if any want is inf


@dataclass(frozen=True, slots=True)
class Shares:
    """What each claim got: its total and its pods' shares (same order as ``uids``)."""

    totals: dict[str, float]  # team name -> share
    pods: dict[str, list[float]]  # team name -> shares of its pods


def allocate(
    capacity: float, *, tiers: tuple[Tier, ...], claims: list[Claim], reserve: float = 0.0
) -> Shares:
    wants = [c.want for c in claims]
    total_want = math.fsum(wants)
    if total_want <= capacity:
        return spread_spare(spreads(capacity, reserve, total_want), claims=claims,
                            total_want=total_want)  # fmt: skip
    teams = [c.team for c in claims]
    totals = team_totals(capacity, tiers=tiers, teams=teams, wants=wants)
    pods: dict[str, list[float]] = {}
    for c in claims:
        level = equal_level(totals[c.team.name], c.wants)
        pods[c.team.name] = [min(w, level) for w in c.wants]
    return Shares(totals=totals, pods=pods)


def team_totals(
    capacity: float, *, tiers: tuple[Tier, ...], teams: list[TeamEgress], wants: list[float]
) -> dict[str, float]:
    """Steps 1 and 2, when the wants exceed the capacity: each team's share (team name ->
    bits per second) from its tier, weight, minimum and summed want (same order as teams)."""
    want_of = {t.name: w for t, w in zip(teams, wants, strict=True)}
    by_tier = {t.name: [team for team in teams if team.tier == t.name] for t in tiers}
    tier_shares = _tier_shares(capacity, tiers=tiers, by_tier=by_tier, want_of=want_of)
    totals: dict[str, float] = {}
    for tier in tiers:
        members = by_tier[tier.name]
        shares = water_fill(
            tier_shares[tier.name],
            weights=[t.weight for t in members],
            lows=[min(t.minimum_bps, want_of[t.name]) for t in members],
            highs=[want_of[t.name] for t in members],
        )
        totals.update((t.name, s) for t, s in zip(members, shares, strict=True))
    return totals


def _tier_shares(
    capacity: float,
    *,
    tiers: tuple[Tier, ...],
    by_tier: dict[str, list[TeamEgress]],
    want_of: dict[str, float],
) -> dict[str, float]:
    """Step 1: guaranteed lows (team minimums before tier minimums), then strict order."""
    want = {name: math.fsum(want_of[t.name] for t in members) for name, members in by_tier.items()}
    teams_low = {
        name: math.fsum(min(t.minimum_bps, want_of[t.name]) for t in members)
        for name, members in by_tier.items()
    }
    top_up = {  # what the tier's own minimum adds to its teams' minimums
        t.name: max(0.0, min(want[t.name], t.minimum * capacity) - teams_low[t.name]) for t in tiers
    }
    low = _fit_lows(capacity, firsts=teams_low, seconds=top_up)
    left = max(0.0, capacity - math.fsum(low.values()))
    shares: dict[str, float] = {}
    for tier in tiers:
        extra = min(want[tier.name] - low[tier.name], left)
        shares[tier.name] = low[tier.name] + extra
        left -= extra
    return shares


def _fit_lows(
    capacity: float, *, firsts: dict[str, float], seconds: dict[str, float]
) -> dict[str, float]:
    """Team minimums first, tier minimums from what is left; each scaled down if short."""
    first_total, second_total = math.fsum(firsts.values()), math.fsum(seconds.values())
    first_scale = min(1.0, capacity / first_total) if first_total > 0 else 0.0
    room = max(0.0, capacity - first_total * first_scale)
    second_scale = min(1.0, room / second_total) if second_total > 0 else 0.0
    return {name: firsts[name] * first_scale + seconds[name] * second_scale for name in firsts}


def spreads(capacity: float, reserve: float, total_want: float) -> float:
    """How much of the capacity step 4 hands out when every want fits: all but the
    ``reserve`` share (the hysteresis), never less than the wants. Limits kept within the
    hysteresis then still add up to the capacity at most, so a pod that comes needs no
    other pod's limit released and republished: churn moves its own node only."""
    return max(total_want, capacity * (1.0 - reserve))


def spread_spare(capacity: float, *, claims: list[Claim], total_want: float) -> Shares:
    """Step 4: every want fits; raise them all in proportion up to the capacity, within caps."""
    wants = [w for c in claims for w in c.wants]
    caps = [cap for c in claims for cap in c.caps]
    if total_want <= 0:
        flat = [0.0] * len(wants)
    elif all(cap == INF for cap in caps):
        flat = [w / total_want * capacity for w in wants]  # a share first: no overflow
    else:  # weighted water-filling: weight and low are the want, high is the cap
        busy = [i for i, w in enumerate(wants) if w > 0]
        shares = water_fill(
            capacity,
            weights=[wants[i] / total_want for i in busy],  # shares: no overflow at tiny wants
            lows=[wants[i] for i in busy],
            highs=[caps[i] for i in busy],
        )
        flat = [0.0] * len(wants)
        for i, share in zip(busy, shares, strict=True):
            flat[i] = share
    pods: dict[str, list[float]] = {}
    totals: dict[str, float] = {}
    start = 0
    for c in claims:
        pods[c.team.name] = flat[start : start + len(c.wants)]
        totals[c.team.name] = math.fsum(pods[c.team.name])
        start += len(c.wants)
    return Shares(totals=totals, pods=pods)


__all__ = ["INF", "Claim", "Shares", "allocate", "spread_spare", "spreads", "team_totals"]
