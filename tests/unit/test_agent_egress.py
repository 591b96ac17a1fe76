"""The agent's egress side without NATS: the seeded demand of simulated pods, the fleet's
reports, and which limits a node's follower keeps."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from baton.proto.bandwidth import NodeEgress, NodeLimits, PodEgress, PodLimit
from baton.services.agent.core import traffic
from baton.services.agent.counting import Changed
from baton.services.agent.egress import FleetEgress, Follower

pytestmark = pytest.mark.unit
M = 1_000_000


def demand(uid: str, at: float, seed: int = 1) -> int:
    return traffic.demand_bps(uid, seed=seed, at=at, period_s=60.0, mean_bps=50 * M)


def test_demand_is_seeded_per_pod_and_moves_each_period() -> None:
    assert demand("u1", 10.0) == demand("u1", 59.0)  # the same period
    assert [demand("u1", 10.0 + 60 * k) for k in range(20)] != [demand("u1", 10.0)] * 20
    assert demand("u1", 10.0, seed=1) != demand("u1", 10.0, seed=2)


def test_demand_follows_the_table() -> None:
    kinds: Counter[str] = Counter()
    for i in range(4000):
        bps = demand(f"pod-{i}", 0.0)
        kinds["idle" if bps <= 1 * M else "steady" if bps <= 50 * M else "downloading"] += 1
        assert 0 <= bps <= 1000 * M
    assert kinds["idle"] == pytest.approx(2800, rel=0.1)
    assert kinds["steady"] == pytest.approx(800, rel=0.15)
    assert kinds["downloading"] == pytest.approx(400, rel=0.2)


def test_a_shaped_pod_sends_up_to_its_limit() -> None:
    assert traffic.sent_bps(80 * M, 25 * M) == 25 * M
    assert traffic.sent_bps(10 * M, 25 * M) == 10 * M
    assert traffic.sent_bps(10 * M, 0) == 10 * M  # not shaped yet


def limits(node: str, generation: int, *rates: int) -> NodeLimits:
    pods = tuple(
        PodLimit(namespace="ns", pod=f"{node}-p{i}", uid=f"{node}-u{i}", team="t", tier="normal",
                 ips=(f"10.0.0.{i + 1}",), egress_bps=r, ceil_bps=r)
        for i, r in enumerate(rates)
    )  # fmt: skip
    return NodeLimits(node=node, at=0.0, generation=generation, id=f"{node}:{generation}",
                      limits=pods)  # fmt: skip


def test_the_fleet_reports_each_node_its_pods_held_to_their_limits() -> None:
    fleet = FleetEgress(bus=None, seed=1, mean_bps=50 * M, egress_s=2.0)  # type: ignore[arg-type]
    fleet.limits = {"n1": limits("n1", 5, 1 * M, 400 * M), "n2": limits("n2", 7, 30 * M)}
    first = {r.node: r for r in fleet.reports(100.0)}
    assert sorted(first) == ["n1", "n2"] and first["n2"].generation == 7
    for report in first.values():
        for p, limit in zip(report.pods, fleet.limits[report.node].limits, strict=True):
            want = demand(p.uid, 100.0)
            assert p.internet_bps == min(want, limit.ceil_bps)
            assert p.internet_bytes == p.internet_bps * 2 // 8
            assert p.limit_bps == limit.ceil_bps
    again = {r.node: r for r in fleet.reports(102.0)}
    assert again["n2"].pods[0].internet_bytes >= first["n2"].pods[0].internet_bytes  # counters


def test_a_follower_keeps_the_newest_limits_of_its_own_node() -> None:
    follower = Follower(bus=_Bus(), node="n1")  # type: ignore[arg-type]
    follower.offer(limits("n1", 10, 5 * M))
    follower.offer(limits("n1", 9, 7 * M))  # older: ignored
    follower.offer(limits("n2", 99, 7 * M))  # another node's: ignored
    assert follower.latest is not None and follower.latest.generation == 10
    assert follower.arrived.is_set()
    assert follower.subject == "baton.c1.bandwidth.limits.n1"


class _Bus:
    cluster = "c1"

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"no NATS in a unit test ({name})")


def report(node: str, at: float, *rates: int, generation: int = 1, limit: int = 0) -> NodeEgress:
    pods = tuple(
        PodEgress(namespace="ns", pod=f"p{i}", uid=f"u{i}", internet_bps=r, internal_bps=r // 4,
                  limit_bps=limit)
        for i, r in enumerate(rates)
    )  # fmt: skip
    return NodeEgress(node=node, at=at, interval_s=5.0, pods=pods, generation=generation)


@pytest.mark.parametrize(
    ("later", "published"),
    [
        (report("n1", 5.0, 20 * M, 500_000), False),  # the same rates
        (report("n1", 5.0, 21 * M, 900_000), False),  # within 10% / within 1 Mbit/s
        (report("n1", 5.0, 23 * M, 500_000), True),  # a rate moved by 15%
        (report("n1", 5.0, 20 * M, 2 * M), True),  # a small rate moved by 1.5 Mbit/s
        (report("n1", 5.0, 20 * M), True),  # a pod went
        (report("n1", 5.0, 20 * M, 500_000, 0), True),  # a pod came
        (report("n1", 5.0, 20 * M, 500_000, generation=2), True),  # new limits applied
        (report("n1", 5.0, 20 * M, 500_000, limit=30 * M), True),
        (report("n1", 59.0, 20 * M, 500_000), False),
        (report("n1", 60.0, 20 * M, 500_000), True),  # the keep-alive
    ],
)
def test_a_measurement_is_published_when_it_changed_or_as_a_keepalive(
    later: NodeEgress, published: bool
) -> None:
    changed = Changed(keepalive_s=60.0, ratio=0.1, bps=1 * M)
    first = report("n1", 0.0, 20 * M, 500_000)
    assert changed.due([first, report("n2", 0.0, 5 * M)]) == [first, report("n2", 0.0, 5 * M)]
    assert changed.due([later]) == ([later] if published else [])


def test_unpublished_moves_add_up_against_the_published_value() -> None:
    changed = Changed(keepalive_s=60.0, ratio=0.1, bps=1 * M)
    changed.due([report("n1", 0.0, 20 * M)])
    assert changed.due([report("n1", 5.0, 21 * M)]) == []
    assert changed.due([report("n1", 10.0, 22 * M)]) == []
    drifted = report("n1", 15.0, 22_500_000)  # 12.5% above what went out at 0 s
    assert changed.due([drifted]) == [drifted]


def test_an_idle_fleet_sends_a_fraction_of_what_it_measures() -> None:
    """Simulated demand moves once a period (60 s): a 5 s measurement goes out about
    once a period, not twelve times."""
    fleet = FleetEgress(bus=None, seed=1, mean_bps=50 * M, egress_s=5.0)  # type: ignore[arg-type]
    fleet.limits = {f"n{i}": limits(f"n{i}", 1, *([100 * M] * 8)) for i in range(50)}
    measured = sent = 0
    for k in range(1, 121):  # ten minutes
        reports = fleet.reports(5.0 * k)
        measured += len(reports)
        sent += len(fleet.changed.due(reports))
    assert measured == 50 * 120
    assert sent <= 50 * 12  # at most one a minute per node
