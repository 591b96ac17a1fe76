"""Properties of the allocation, for any teams, tiers, minimums and wants (hypothesis)."""

from __future__ import annotations

import math

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from baton.proto import codec
from baton.proto.bandwidth import DEFAULT_TIERS, TeamEgress
from baton.services.bandwidth import core
from baton.services.bandwidth.core import allocating
from baton.services.bandwidth.core.fairshare import INF
from tests.unit.bandwidth_helpers import M, measure, policy, running, started, tick

pytestmark = pytest.mark.unit

TIER_NAMES = [t.name for t in DEFAULT_TIERS]
CAPACITY = 1_000 * M
want = st.one_of(st.just(INF), st.floats(min_value=0, max_value=2 * CAPACITY), st.just(10.0 * M))


@st.composite
def claims(draw: st.DrawFn) -> list[allocating.Claim]:
    n = draw(st.integers(min_value=1, max_value=6))
    minimums = draw(st.lists(st.integers(0, CAPACITY), min_size=n, max_size=n))
    budget = draw(st.floats(min_value=0, max_value=1))  # keep the minimums within capacity
    total = sum(minimums) or 1
    out = []
    for i, minimum in enumerate(minimums):
        team = TeamEgress(
            name=f"t{i}",
            tier=draw(st.sampled_from(TIER_NAMES)),
            weight=draw(st.floats(min_value=0.1, max_value=10)),
            minimum_bps=int(minimum * budget * CAPACITY / total) if minimums else 0,
        )
        wants = draw(st.lists(want, min_size=1, max_size=8))
        caps = [draw(st.sampled_from([INF, w, 2 * w])) if w < INF else INF for w in wants]
        out.append(
            allocating.Claim(
                team=team, uids=[f"{i}-{j}" for j in range(len(wants))], wants=wants, caps=caps
            )
        )
    return out


def slack(x: float) -> float:
    return 1e-6 * max(abs(x), CAPACITY) if x < INF else 0.0


def test_a_tiny_want_alone_gets_the_capacity_not_infinity() -> None:
    """Found by hypothesis: capacity / 5e-324 overflowed to inf before the share was taken."""
    team = TeamEgress(name="t0", tier="critical", weight=1.0, minimum_bps=0, namespaces=())
    claim = allocating.Claim(team=team, uids=["0-0"], wants=[5e-324], caps=[INF])
    shares = allocating.allocate(CAPACITY, tiers=DEFAULT_TIERS, claims=[claim])
    assert shares.pods["t0"] == [CAPACITY]
    capped = msgspec.structs.replace(team, name="t1")  # a cap somewhere: water-filling
    idle = allocating.Claim(team=capped, uids=["1-0"], wants=[0.0], caps=[0.0])
    shares = allocating.allocate(CAPACITY, tiers=DEFAULT_TIERS, claims=[claim, idle])
    assert shares.pods["t0"] == [CAPACITY]


def test_a_tiny_want_beside_a_capped_one_gets_the_spare_not_infinity() -> None:
    """Found by hypothesis: the water level (room / a denormal weight) overflowed to inf."""
    team = TeamEgress(name="t0", tier="critical", weight=1.0, minimum_bps=0, namespaces=())
    claim = allocating.Claim(team=team, uids=["0-0", "0-1"], wants=[1e7, 2.2250738585072014e-308],
                             caps=[1e7, INF])  # fmt: skip
    shares = allocating.allocate(CAPACITY, tiers=DEFAULT_TIERS, claims=[claim])
    assert shares.pods["t0"] == [1e7, CAPACITY - 1e7]


def test_a_want_whose_share_of_the_total_underflows_keeps_its_want() -> None:
    """Found by hypothesis: 5e-324 / 1e7 is 0.0, a zero weight the water level divided by."""
    team = TeamEgress(name="t0", tier="critical", weight=1.0, minimum_bps=0, namespaces=())
    claim = allocating.Claim(team=team, uids=["0-0", "0-1"], wants=[1e7, 5e-324],
                             caps=[INF, 5e-324])  # fmt: skip
    shares = allocating.allocate(CAPACITY, tiers=DEFAULT_TIERS, claims=[claim])
    assert shares.pods["t0"] == [CAPACITY - 5e-324, 5e-324]


@settings(max_examples=300, deadline=None)
@given(claims())
def test_the_sum_never_exceeds_capacity_and_is_used_when_wanted(cs: list[allocating.Claim]) -> None:
    shares = allocating.allocate(CAPACITY, tiers=DEFAULT_TIERS, claims=cs)
    given_out = math.fsum(s for c in cs for s in shares.pods[c.team.name])
    assert given_out <= CAPACITY + slack(CAPACITY)
    wanted = math.fsum(w for c in cs for w in c.wants)
    assert given_out >= min(wanted, CAPACITY) - slack(CAPACITY)  # work-conserving


@settings(max_examples=300, deadline=None)
@given(claims())
def test_no_team_gets_less_than_its_minimum_while_it_wants_it(cs: list[allocating.Claim]) -> None:
    shares = allocating.allocate(CAPACITY, tiers=DEFAULT_TIERS, claims=cs)
    for c in cs:
        guaranteed = min(c.team.minimum_bps, c.want)
        assert shares.totals[c.team.name] >= guaranteed - slack(guaranteed), c.team


@settings(max_examples=300, deadline=None)
@given(claims())
def test_no_pod_gets_more_than_it_wants_while_another_lacks(cs: list[allocating.Claim]) -> None:
    shares = allocating.allocate(CAPACITY, tiers=DEFAULT_TIERS, claims=cs)
    pairs = [(s, w) for c in cs for s, w in zip(shares.pods[c.team.name], c.wants, strict=True)]
    if any(s < w - slack(w) for s, w in pairs):
        assert all(s <= w + slack(w) for s, w in pairs)


rounds = st.lists(  # per round, each pod's measured internet egress in Mbit/s (None: silent)
    st.lists(st.one_of(st.none(), st.integers(0, 400)), min_size=6, max_size=6),
    min_size=1,
    max_size=5,
)


def run(measurements: list[list[int | None]]) -> list[bytes]:
    teams = (
        TeamEgress(name="a", weight=3),
        TeamEgress(name="b", tier="background", minimum_bps=30 * M),
    )
    pods = [running(f"{'ab'[i % 2]}-{i}", team="ab"[i % 2], node=f"n{i % 3}") for i in range(6)]
    state = started(policy(*teams, capacity=200 * M), *pods)
    out: list[bytes] = []
    for r, rates in enumerate(measurements):
        for node in ("n0", "n1", "n2"):
            measure(
                state,
                r + 0.5,
                node,
                **{
                    p.name.replace("-", "_"): rate * M
                    for p, rate in zip(pods, rates, strict=True)
                    if rate is not None and p.node_name == node
                },
            )
        limits, summary = tick(state, r + 1.0)
        assert sum(state.published.values()) <= 200 * M
        out += [codec.encode(x) for x in (*limits, summary)]
    return out


@settings(max_examples=100, deadline=None)
@given(rounds)
def test_rounds_with_hysteresis_stay_within_capacity_and_replay_the_same(
    measurements: list[list[int | None]],
) -> None:
    assert run(measurements) == run(measurements)


def test_core_is_deterministic_across_fresh_states() -> None:
    first = run([[100, 5, None, 400, 0, 50], [100, 100, 100, 100, 100, 100]])
    assert first == run([[100, 5, None, 400, 0, 50], [100, 100, 100, 100, 100, 100]])
    assert msgspec.json.decode(first[-1])["type"] == "bandwidth.allocation.v1"
    assert isinstance(core.initial(), core.State)
