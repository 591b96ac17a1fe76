"""The bandwidth core: fair shares by weight, tier and minimum; demand; hysteresis; lifecycle."""

from __future__ import annotations

import dataclasses
import math

import msgspec
import pytest

from baton.proto.actions import Annotate
from baton.proto.admission import TeamsLoaded
from baton.proto.bandwidth import Capacity, NodeEgress, PodEgress, TeamEgress, Tier
from baton.proto.k8s import Pod, PodEvent
from baton.proto.runner import Tick
from baton.proto.teams import Egress, Team, TeamConfig
from baton.services.bandwidth import core
from baton.services.bandwidth.core import damping, demand, fairshare
from baton.services.bandwidth.core.policy import PolicyError, load, parse_rate
from tests.unit.bandwidth_helpers import (
    M,
    limit_of,
    measure,
    policy,
    running,
    saturate,
    started,
    tick,
)

pytestmark = pytest.mark.unit

A3 = TeamEgress(name="a", weight=3)
B1 = TeamEgress(name="b", weight=1)


def contended(p: object, *pods: str) -> core.State:
    """Every pod ran one round and now sends at its limit."""
    state = started(p, *(running(n, team=n.split("-")[0]) for n in pods))  # type: ignore[arg-type]
    tick(state, 1.0)
    saturate(state, 1.5, *pods)
    return state


def test_weights_3_to_1_split_75_25_when_both_want_more() -> None:
    state = contended(policy(A3, B1), "a-0", "b-0")
    _, summary = tick(state, 2.0)
    assert limit_of(state, "a-0") == 75 * M
    assert limit_of(state, "b-0") == 25 * M
    assert [(t.team, t.assigned_bps, t.demand_bps) for t in summary.teams] == [
        ("a", 75 * M, -1),
        ("b", 25 * M, -1),
    ]


def test_a_team_share_is_split_equally_over_its_pods() -> None:
    state = contended(policy(A3, B1), "a-0", "a-1", "a-2", "b-0")
    tick(state, 2.0)
    assert [limit_of(state, n) for n in ("a-0", "a-1", "a-2", "b-0")] == [25 * M] * 4


def test_a_higher_tier_is_served_first_and_lower_tiers_keep_their_minimum() -> None:
    ops = TeamEgress(name="ops", tier="critical")
    bulk = TeamEgress(name="bulk", tier="background")
    tiers = (Tier(name="critical"), Tier(name="normal"), Tier(name="background", minimum=0.1))
    state = contended(policy(ops, bulk, tiers=tiers), "ops-0", "bulk-0")
    tick(state, 2.0)
    assert limit_of(state, "ops-0") == 90 * M
    assert limit_of(state, "bulk-0") == 10 * M


def test_a_team_minimum_holds_against_a_heavier_team() -> None:
    heavy = TeamEgress(name="heavy", weight=9)
    small = TeamEgress(name="small", weight=1, minimum_bps=40 * M)
    state = contended(policy(heavy, small), "heavy-0", "small-0")
    tick(state, 2.0)
    assert limit_of(state, "small-0") == 40 * M
    assert limit_of(state, "heavy-0") == 60 * M


def test_unused_share_goes_to_the_team_that_wants_it() -> None:
    state = contended(policy(A3, B1), "a-0", "b-0")
    tick(state, 2.0)
    measure(state, 2.5, a_0=8 * M)  # team a (weight 3) uses only 8 Mbit/s now
    saturate(state, 2.5, "b-0")
    tick(state, 3.0)
    assert limit_of(state, "a-0") == 10 * M  # its use plus 25% headroom
    assert limit_of(state, "b-0") == 90 * M


def test_a_pod_without_measurements_gets_the_floor_and_spare_capacity_is_spread() -> None:
    state = started(policy(A3, B1, floor_bps=5 * M), running("a-0", team="a"))
    tick(state, 1.0)
    assert limit_of(state, "a-0") == 95 * M  # alone: the spare, but the 5% hysteresis reserve
    core.step(state, PodEvent(op="upsert", at=1.0, pod=running("b-0", team="b")), 1.0)
    saturate(state, 1.5, "a-0")
    tick(state, 2.0)
    assert limit_of(state, "b-0") == 5 * M  # new, nothing measured: the floor
    assert limit_of(state, "a-0") == 95 * M
    saturate(state, 2.5, "a-0", "b-0")  # b sends at its floor: it wants more
    tick(state, 3.0)
    assert (limit_of(state, "a-0"), limit_of(state, "b-0")) == (75 * M, 25 * M)


def test_stale_measurements_count_as_none() -> None:
    state = contended(policy(A3, B1, stale_s=10.0), "a-0", "b-0")
    tick(state, 2.0)
    measure(state, 3.0, a_0=1 * M, b_0=1 * M)
    tick(state, 4.0)
    assert limit_of(state, "a-0") == 47_500_000  # both want the floor (10M): spread evenly
    tick(state, 30.0)
    assert limit_of(state, "a-0") == 47_500_000


def test_internal_traffic_is_not_demand_and_internal_cidrs_reach_the_agent() -> None:
    p = policy(A3, B1, internal_cidrs=("10.0.0.0/8", "fd00::/8"))
    state = contended(p, "a-0", "b-0")
    tick(state, 2.0)
    a = next(x for x in state.pods.values() if x.name == "a-0")
    egress = PodEgress(namespace="default", pod="a-0", uid=a.uid, internal_bps=10_000 * M)
    core.step(state, NodeEgress(node="n1", at=2.5, interval_s=1.0, pods=(egress,)), 2.5)
    saturate(state, 2.5, "b-0")
    limits, summary = tick(state, 3.0)
    assert limit_of(state, "a-0") == 10 * M  # the floor: a sends nothing to the internet
    assert limits[0].internal_cidrs == ("10.0.0.0/8", "fd00::/8")
    assert {t.team: t.used_bps for t in summary.teams} == {"a": 0, "b": 25 * M}
    assert limit_of(state, "b-0") == 90 * M


def test_small_changes_are_not_republished_large_ones_are() -> None:
    state = contended(policy(A3, B1), "a-0", "b-0")
    tick(state, 2.0)
    measure(state, 2.5, a_0=40 * M, b_0=25 * M)  # a: wants 50M (was 75M): b takes the rest
    first, _ = tick(state, 3.0)
    assert [limit_of(state, n) for n in ("a-0", "b-0")] == [50 * M, 50 * M]
    measure(state, 3.5, a_0=41 * M, b_0=50 * M)  # a wants 51.25M: within 5%, kept
    again, summary = tick(state, 4.0)
    assert first and not again
    assert summary.changed_nodes == 0
    measure(state, 4.5, a_0=44 * M, b_0=50 * M)  # 55M: beyond 5% and 1 Mbit/s
    moved, _ = tick(state, 5.0)
    assert [limit_of(state, n) for n in ("a-0", "b-0")] == [55 * M, 45 * M]
    assert len(moved) == 1 and moved[0].generation == 5000  # the round's time in ms


def test_a_pod_coming_or_going_republishes_its_own_node_not_every_node() -> None:
    """Every want fits: the 5% reserve absorbs churn, so the others' limits, moved within
    the hysteresis, stay as published (before it, one pod coming republished all 41)."""
    pods = [running(f"p-{i}", team="a", node=f"n{i}") for i in range(40)]
    state = started(policy(A3, B1, capacity=4000 * M), *pods)
    tick(state, 1.0)
    for i in range(40):
        measure(state, 1.5, f"n{i}", **{f"p_{i}": 5 * M})
    tick(state, 2.0)
    for at, event in enumerate(
        [
            PodEvent(op="upsert", at=3.0, pod=running("q-0", team="a", node="nq")),
            PodEvent(op="upsert", at=4.0, pod=running("b-0", team="b", node="nb")),
            PodEvent(op="delete", at=5.0, pod=running("q-0", team="a", node="nq")),
        ],
        start=3,
    ):
        core.step(state, event, event.at)
        limits, _ = tick(state, at + 0.5)
        assert [n.node for n in limits] == [event.pod.node_name], event
        assert sum(state.published.values()) <= 4000 * M


def test_kept_decreases_are_released_when_the_total_would_pass_capacity() -> None:
    published = {"x": 50, "y": 50}
    assert damping.damp(published, {"x": 48, "y": 52}, ratio=0.1, bps=0, capacity=100) == {
        "x": 50,
        "y": 50,
    }
    out = damping.damp(published, {"x": 48, "y": 52}, ratio=0.01, bps=3, capacity=100)
    assert out == {"x": 50, "y": 50}
    out = damping.damp(published, {"x": 48, "y": 80}, ratio=0.1, bps=0, capacity=128)
    assert out == {"x": 48, "y": 80}  # y grew past tolerance; x's kept 50 would make 130


def test_a_deleted_or_finished_pod_leaves_its_node_limits() -> None:
    a, b = running("a-0", team="a"), running("b-0", team="b")
    state = started(policy(A3, B1), a, b)
    tick(state, 1.0)
    core.step(
        state, PodEvent(op="upsert", at=1.1, pod=msgspec.structs.replace(b, phase="Succeeded")), 1.1
    )
    limits, _ = tick(state, 2.0)
    assert [[x.pod for x in n.limits] for n in limits] == [["a-0"]]
    core.step(state, PodEvent(op="delete", at=2.1, pod=a), 2.1)
    limits, summary = tick(state, 3.0)
    assert [(n.node, n.limits, n.generation) for n in limits] == [("n1", (), 3000)]
    assert summary.teams == ()


def test_limits_are_published_per_node_with_the_pod_identity() -> None:
    state = started(
        policy(A3, B1),
        running("a-0", team="a", node="n1", ip="10.1.0.2"),
        running("b-0", team="b", node="n2", ip="10.1.0.3", cap="20M"),
    )
    limits, _ = tick(state, 1.0)
    assert [(n.node, n.id) for n in limits] == [("n1", "n1:1000"), ("n2", "n2:1000")]
    b = limits[1].limits[0]
    assert (b.pod, b.team, b.tier, b.ips, b.egress_bps, b.ceil_bps) == (
        "b-0", "b", "normal", ("10.1.0.3",), 20 * M, 20 * M,
    )  # fmt: skip
    assert limits[0].limits[0].egress_bps == 75 * M  # the spare beyond b's cap (less the reserve)


def teams(**weights: float) -> TeamsLoaded:
    """The team config's egress weights, as admission publishes a changed file."""
    config = TeamConfig(
        teams=tuple(
            Team(name=name, namespaces=(name,), egress=Egress(weight=w))
            for name, w in weights.items()
        )
    )
    return TeamsLoaded(config=config, at=0.0)


def test_capacity_and_team_config_changes_apply_on_the_next_round() -> None:
    state = contended(policy(A3, B1), "a-0", "b-0")
    core.step(state, Capacity(at=1.6, capacity_bps=200 * M), 1.6)
    tick(state, 2.0)
    assert limit_of(state, "b-0") == 50 * M
    core.step(state, teams(a=1, b=1), 2.1)
    saturate(state, 2.2, "a-0", "b-0")
    limits, summary = tick(state, 3.0)
    assert limit_of(state, "a-0") == limit_of(state, "b-0") == 100 * M
    assert len(limits) == 1  # every pod is republished (one node)
    assert [(t.team, t.weight) for t in summary.teams] == [("a", 1.0), ("b", 1.0)]


def test_a_team_config_sets_tiers_and_minimums_and_an_unknown_tier_falls_back() -> None:
    config = TeamConfig(
        teams=(
            Team(name="a", namespaces=("a",), egress=Egress(weight=2, tier="critical")),
            Team(name="b", namespaces=("b",), egress=Egress(tier="gold", minimum="30M")),
        )
    )
    state = contended(policy(A3, B1), "a-0", "b-0")
    core.step(state, TeamsLoaded(config=config, at=1.6), 1.6)
    _, summary = tick(state, 2.0)
    assert [(t.team, t.tier, t.weight, t.minimum_bps) for t in summary.teams] == [
        ("a", "critical", 2.0, 0),
        ("b", "normal", 1.0, 30 * M),
    ]
    assert limit_of(state, "b-0") == 30 * M  # its minimum; critical takes the rest
    assert limit_of(state, "a-0") == 70 * M


def test_pods_fall_back_to_their_namespace_team_then_the_default() -> None:
    research = TeamEgress(name="research", weight=3, namespaces=("lab",))
    state = started(
        policy(research),
        running("x", namespace="lab"),
        running("y", namespace="other"),
    )
    _, summary = tick(state, 1.0)
    assert [(t.team, t.pods) for t in summary.teams] == [("default", 1), ("research", 1)]


@pytest.mark.parametrize(
    ("used", "limit", "cap", "expected"),
    [
        (None, None, math.inf, 10 * M),  # nothing measured: the floor
        (2 * M, 100 * M, math.inf, 10 * M),  # below the floor
        (40 * M, 100 * M, math.inf, 50 * M),  # use + 25%
        (90 * M, 100 * M, math.inf, math.inf),  # held at its limit
        (90 * M, 100 * M, 30 * M, 30 * M),  # never above its own cap
    ],
)
def test_want_table(used: float | None, limit: int | None, cap: float, expected: float) -> None:
    assert demand.want(policy(), used_bps=used, limit_bps=limit, cap_bps=cap) == expected


def test_water_fill_starts_before_it_stops_at_a_tied_level() -> None:
    tiny = 4.6e-41  # found by hypothesis: a stop sorted before a start made the level infinite
    shares = fairshare.water_fill(1e9, weights=[1e7, tiny], lows=[1e7, tiny], highs=[1e7, math.inf])
    assert shares == pytest.approx([1e7, 1e9 - 1e7])


def test_water_fill_clamps_to_lows_and_highs() -> None:
    shares = fairshare.water_fill(100, weights=[1, 1, 2], lows=[30, 0, 0], highs=[40, 10, math.inf])
    assert shares == pytest.approx([30, 10, 60])
    assert fairshare.water_fill(10, weights=[1, 1], lows=[10, 10], highs=[20, 20]) == [5, 5]
    assert fairshare.equal_level(10, [1, 2, 100]) == 7
    assert fairshare.equal_level(10, [1, 2]) == math.inf


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"teams": [{"name": "a", "tier": "gold"}]}, "teams[0].tier: 'gold' is not one of"),
        ({"teams": [{"name": "a"}, {"name": "a"}]}, "teams[1].name: 'a' is already a team"),
        ({"teams": [{"name": "a", "weight": 0}]}, "teams[0].weight: Expected `float` > 0"),
        ({"internal_cidrs": ["10.0.0.0/33"]}, "internal_cidrs[0]:"),
        ({"capacity_bps": 10, "teams": [{"name": "a", "minimum_bps": 11}]}, "add up to 11"),
        ({"tiers": [{"name": "x", "minimum": 0.6}, {"name": "y", "minimum": 0.6}]}, "tiers:"),
        ({"capacity": 1}, "unknown field"),
    ],
)
def test_bad_policies_name_the_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(PolicyError, match=None) as caught:
        load(data)
    assert message.replace("`", "") in str(caught.value)


def test_rates_read_like_kubernetes_bandwidth_quantities() -> None:
    assert [parse_rate(x) for x in ("10M", "1.5G", "100", "1Ki")] == [10**7, 15 * 10**8, 100, 1024]
    with pytest.raises(ValueError, match="not a bandwidth quantity"):
        parse_rate("10 mbit")


def test_the_batch_wants_follow_the_same_table() -> None:
    p = policy()
    cases = [
        (None, None, math.inf),
        (2 * M, 100 * M, math.inf),
        (40 * M, 100 * M, math.inf),
        (90 * M, 100 * M, math.inf),
        (90 * M, 100 * M, 30 * M),
        (90 * M, None, math.inf),
    ]
    uids = [f"u{i}" for i in range(len(cases))]
    used = {u: (c[0], 5.0) for u, c in zip(uids, cases, strict=True) if c[0] is not None}
    published = {u: c[1] for u, c in zip(uids, cases, strict=True) if c[1] is not None}
    batch = demand.wants(p, uids=uids, caps=[c[2] for c in cases], used=used,
                         published=published, oldest=5.0)  # fmt: skip
    one_by_one = [demand.want(p, used_bps=c[0], limit_bps=c[1], cap_bps=c[2]) for c in cases]
    assert batch == one_by_one
    assert demand.wants(p, uids=uids[1:2], caps=[math.inf], used=used, published=published,
                        oldest=6.0) == [10 * M]  # stale: the floor  # fmt: skip


def test_endpoint_addresses_outside_the_cidrs_are_internal_on_every_node() -> None:
    from baton.proto.k8s import Endpoint, EndpointSlice, EndpointSliceEvent

    p = policy(A3, B1, internal_cidrs=("10.0.0.0/8",), endpoint_addresses=2)
    state = started(p, running("a-0", team="a", node="n1"), running("b-0", team="b", node="n2"))
    tick(state, 1.0)
    eps = EndpointSlice(namespace="ns", name="s", uid="s1", endpoints=(
        Endpoint(addresses=("100.64.0.1", "100.64.0.2"), pod="db-0"),  # a pod, outside the CIDRs
        Endpoint(addresses=("100.64.0.9",), node_name="n3"),  # a host-network endpoint
        Endpoint(addresses=("10.1.2.3",), pod="web-0"),  # inside: nothing to add
        Endpoint(addresses=("203.0.113.7",)),  # no pod, no node: outside the cluster
    ))  # fmt: skip
    core.step(state, EndpointSliceEvent(op="upsert", at=1.5, endpoint_slice=eps), 1.5)
    limits, _ = tick(state, 2.0)
    first_two = ("10.0.0.0/8", "100.64.0.1/32", "100.64.0.2/32")  # of three: the cap is 2
    assert {n.node: n.internal_cidrs for n in limits} == {"n1": first_two, "n2": first_two}
    core.step(state, EndpointSliceEvent(op="delete", at=2.5, endpoint_slice=eps), 2.5)
    limits, _ = tick(state, 3.0)
    assert {n.internal_cidrs for n in limits} == {("10.0.0.0/8",)}
    assert len(limits) == 2


def annotated(p: Pod, limit: str, cap: str | None = None) -> Pod:
    """The pod after the actuator applied the service's Annotate."""
    notes = {"kubernetes.io/egress-bandwidth": limit, "baton.io/egress-limit": limit}
    if cap:
        notes["baton.io/egress-cap"] = cap
    return msgspec.structs.replace(p, annotations=notes)


def test_annotations_follow_limits_beyond_hysteresis_within_a_budget() -> None:
    pods = [running("a-0", team="a", cap="80M"), running("b-0", team="b"), running("b-1", team="b")]
    state = started(policy(A3, B1, annotate=True, annotate_per_round=2), *pods)
    _, outputs = core.step(state, Tick(at=1.0), 1.0)
    notes = [o for o in outputs if isinstance(o, Annotate)]
    assert [(n.name, n.annotations) for n in notes] == [
        ("a-0", {"kubernetes.io/egress-bandwidth": "31666666",
                 "baton.io/egress-limit": "31666666",
                 "baton.io/egress-cap": "80M"}),  # the pod's own cap is kept beside
        ("b-0", {"kubernetes.io/egress-bandwidth": "31666666",
                 "baton.io/egress-limit": "31666666",
                 "baton.io/egress-cap": None}),
    ]  # fmt: skip
    assert notes[0].priority == "balloon" and notes[0].by == "bandwidth"
    for p, limit, cap in ((pods[0], "31666666", "80M"), (pods[1], "31666666", None)):
        core.step(state, PodEvent(op="upsert", at=1.5, pod=annotated(p, limit, cap)), 1.5)
    _, outputs = core.step(state, Tick(at=2.0), 2.0)
    assert [o.name for o in outputs if isinstance(o, Annotate)] == ["b-1"]  # the budget's rest
    assert (
        next(p for p in state.pods.values() if p.name == "a-0").cap_bps == 80 * M
    )  # not its limit
    assert limit_of(state, "a-0") == 31666666


def test_an_annotation_within_the_hysteresis_is_left_alone() -> None:
    from baton.services.bandwidth.core import annotating

    p = policy(hysteresis=0.05, hysteresis_bps=1 * M)
    pod = core.Shaped(namespace="n", name="x", uid="u", node="n1", ips=("10.0.0.1",),
                      team_label="", egress="50M", ours=True)  # fmt: skip
    assert not annotating.lags(pod, 52 * M, p)
    assert annotating.lags(pod, 53 * M, p)
    assert annotating.lags(dataclasses.replace(pod, ours=False), 50 * M, p)
    assert [annotating.quantity(x) for x in (25 * M, 2 * 10**9, 1500, 1234567)] == [
        "25M", "2G", "1500", "1234567"
    ]  # fmt: skip


def test_ticks_are_wanted_only_while_something_moved() -> None:
    state = started(policy(A3, B1, stale_s=10.0), running("a-0", team="a"))
    assert core.wants_tick(state, 1.0)
    tick(state, 1.0)
    assert not core.wants_tick(state, 2.0)  # nothing new: no round
    measure(state, 2.5, a_0=1 * M)
    assert core.wants_tick(state, 3.0)
    tick(state, 3.0)
    assert not core.wants_tick(state, 12.0)
    assert core.wants_tick(state, 12.6)  # the measurement went stale: its want moves


def test_a_round_that_republished_many_nodes_waits_them_out_before_the_next() -> None:
    """``limits_per_s``: 40 nodes republished at 20 a second hold the next round 2 s."""
    pods = [running(f"a-{i}", team="a", node=f"n{i}") for i in range(40)]
    state = started(policy(A3, limits_per_s=20.0), *pods)
    limits, _ = tick(state, 1.0)
    assert len(limits) == 40
    core.step(state, PodEvent(op="upsert", at=1.2, pod=running("a-40", team="a", node="n0")), 1.2)
    assert not core.wants_tick(state, 1.5)  # something moved, but 40 nodes went out at 1.0
    assert not core.wants_tick(state, 2.9)
    assert core.wants_tick(state, 3.0)
    limits, _ = tick(state, 3.0)  # every pod's share moved: 40 nodes again, 41 pods
    assert len(limits) == 40
    core.step(state, PodEvent(op="upsert", at=3.1, pod=running("a-41", team="a", node="n1")), 3.1)
    assert not core.wants_tick(state, 4.9)
    assert core.wants_tick(state, 5.0)
    assert core.wants_tick(state, 0.5)  # time that went back is not held by the pace


def test_a_round_publishes_at_most_limits_per_round_nodes_and_the_next_rounds_the_rest() -> None:
    """``limits_per_round``: 40 new nodes at 15 a round go out 15, 15, 10, in order; the
    queue alone makes a round due, and an empty one does not."""
    pods = [running(f"a-{i}", team="a", node=f"n{i:02}") for i in range(40)]
    state = started(policy(A3, limits_per_round=15, limits_per_s=0.0), *pods)
    sent = []
    for at in (1.0, 1.5, 2.0):
        assert core.wants_tick(state, at)  # after the first round nothing moved: the queue
        limits, summary = tick(state, at)
        assert summary.changed_nodes == len(limits)
        sent.append([n.node for n in limits])
    assert sent == [[f"n{i:02}" for i in range(a, b)] for a, b in ((0, 15), (15, 30), (30, 40))]
    assert not core.wants_tick(state, 2.5)


def test_while_more_than_a_round_waits_a_round_sends_it_and_decides_nothing_new() -> None:
    """A pod joins while 25 nodes wait at 15 a round: the next round sends 15 of them as
    decided, the one after (10 left) decides again, and its limits go out from there."""
    p = policy(A3, hysteresis=0.0, hysteresis_bps=0, limits_per_round=15, limits_per_s=0.0)
    state = started(p, *(running(f"a-{i}", team="a", node=f"n{i:02}") for i in range(40)))
    tick(state, 1.0)
    core.step(state, PodEvent(op="upsert", at=1.2, pod=running("a-40", team="a", node="n00")), 1.2)
    limits, _ = tick(state, 2.0)
    assert [n.node for n in limits] == [f"n{i:02}" for i in range(15, 30)]
    assert {n.limits[0].egress_bps for n in limits} == {100 * M // 40}  # a-40 not counted yet
    limits, _ = tick(state, 3.0)  # a-40's share: every pod went down, so all are queued
    assert [n.node for n in limits] == [*(f"n{i:02}" for i in range(30, 40)), "n00",
                                        *(f"n{i:02}" for i in range(1, 5))]  # fmt: skip
    assert {p.egress_bps for n in limits for p in n.limits} == {100 * M // 41}
    assert len(limits[10].limits) == 2  # n00 carries a-0 and a-40


def test_queued_nodes_keep_their_place_and_a_rounds_lower_limits_go_before_its_raises() -> None:
    """A node queued again goes once, in its old place, with its newest limits; of what one
    round changed, nodes where a limit went down are queued before the rest, so the limits
    the agents hold lean under the capacity, not over it, while the queue drains."""
    p = policy(A3, B1, capacity=20 * M, hysteresis=0.0, hysteresis_bps=0,
               limits_per_round=2, limits_per_s=0.0)  # fmt: skip
    pods = [running("a-0", team="a", node="n1"), running("a-1", team="a", node="n2"),
            running("b-0", team="b", node="n3"), running("b-1", team="b", node="n4")]  # fmt: skip
    state = started(p, *pods)
    limits, _ = tick(state, 1.0)
    assert [n.node for n in limits] == ["n1", "n2"]
    core.step(state, PodEvent(op="upsert", at=1.2, pod=running("b-2", team="b", node="n0")), 1.2)
    limits, _ = tick(state, 2.0)  # b's level moved: n3 and n4 (queued) go first, as they are now
    assert [n.node for n in limits] == ["n3", "n4"]
    assert [(n.limits[0].pod, n.limits[0].egress_bps) for n in limits] == [
        ("b-0", limit_of(state, "b-0")),
        ("b-1", limit_of(state, "b-1")),
    ]
    before = {name: limit_of(state, name) for name in ("b-0", "b-1", "b-2")}
    capped = running("b-1", team="b", node="n4", cap="1M")  # b-1 goes down, b-0 and b-2 up
    core.step(state, PodEvent(op="upsert", at=2.2, pod=capped), 2.2)
    limits, _ = tick(state, 3.0)
    assert limit_of(state, "b-1") < before["b-1"] and limit_of(state, "b-0") > before["b-0"]
    assert [n.node for n in limits] == ["n0", "n4"]  # n0 was queued; then down (n4), up (n3)
    limits, _ = tick(state, 4.0)
    assert [n.node for n in limits] == ["n3"]


def test_an_unpaced_policy_rounds_whenever_something_moved() -> None:
    pods = [running(f"a-{i}", team="a", node=f"n{i}") for i in range(40)]
    state = started(policy(A3, limits_per_s=0.0), *pods)
    tick(state, 1.0)
    core.step(state, PodEvent(op="upsert", at=1.2, pod=running("a-40", team="a", node="n0")), 1.2)
    assert core.wants_tick(state, 1.5)


def test_a_team_config_without_egress_values_crosses_the_bus() -> None:
    """TeamsLoaded carries defaults (an empty limit, an empty minimum): they must decode."""
    from baton.proto import codec

    loaded = teams(a=1)
    assert codec.decode(codec.encode(loaded), TeamsLoaded) == loaded
