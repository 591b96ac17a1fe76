"""Real traffic through the shaper: the core's limits applied with tc, measured by the receiver.

Two pods of teams weighted 3:1 behind a node whose internet uplink is 100 Mbit/s.
The loop is the real one minus NATS: tc counters -> ``NodeEgress`` -> bandwidth core
-> ``NodeLimits`` -> shaper. Needs root, ``ip`` and ``iperf3``; skipped otherwise.
Prints achieved vs assigned rates and the apply latency (run with ``-s`` to see them).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from pyroute2 import IPRoute

from baton.proto.admission import TeamsLoaded
from baton.proto.bandwidth import BandwidthPolicy, NodeLimits, TeamEgress
from baton.proto.k8s import PodEvent
from baton.proto.runner import Tick
from baton.proto.teams import Egress, Team, TeamConfig
from baton.services.agent import counting
from baton.services.agent.core.tc import Layout
from baton.services.agent.shaping import Shaper
from baton.services.bandwidth import core
from tests.netns.topology import (
    INTERNAL,
    INTERNET_HOST,
    PEER_HOST,
    Topology,
    interval_bps,
    missing,
    received_bps,
    result,
)
from tests.unit.bandwidth_helpers import running

pytestmark = [
    pytest.mark.netns,
    pytest.mark.timeout(180),
    pytest.mark.skipif(bool(missing()), reason=missing() or "runs"),
]

M = 1_000_000
CAPACITY = 100 * M
LAYOUT = Layout(hooks=("br0",), line_bps=10_000 * M)
TEAMS = (TeamEgress(name="a", weight=3), TeamEgress(name="b", weight=1))


# HTB counts whole Ethernet frames (1514 bytes for a full one); the receiver counts TCP
# payload (1448 bytes of it, with timestamps). The goodput a limit allows is this much of it:
GOODPUT = 1448 / 1514


def within(measured: float, assigned: float, tolerance: float = 0.10) -> bool:
    """Receiver-measured goodput within ±10% of what the assigned limit allows."""
    return abs(measured - assigned * GOODPUT) <= tolerance * assigned * GOODPUT


@pytest.fixture(scope="module")
def topo() -> Iterator[Topology]:
    t = Topology(prefix=f"bwt{os.getpid() % 100000}")
    try:
        try:
            t.build()
        except Exception as exc:  # no netns/veth/bridge support in this kernel or sandbox
            pytest.skip(f"cannot build the namespaces: {exc}")
        t.serve("inet", 5201, 5202)
        t.serve("peer", 5203)
        yield t
    finally:
        t.destroy()


class Loop:
    """The bandwidth core and one node's agent (shaper + counting), driven by hand."""

    def __init__(self, topo: Topology, ipr: IPRoute, policy: BandwidthPolicy) -> None:
        self.shaper = Shaper(ipr, LAYOUT)
        self.state = core.initial(policy)
        self.limits: NodeLimits | None = None
        self.previous: counting.Sample | None = None
        self.clock = 0.0
        for i, team in enumerate(("a", "b")):
            pod = running(f"pod{i}", team=team, node="n1", ip=topo.pod_ip(i))
            core.step(self.state, PodEvent(op="upsert", at=0.0, pod=pod), 0.0)

    def round(self, event: object = None) -> float:
        """Measure, decide, apply; returns the seconds from decision to applied."""
        self.clock += 1.0
        current = counting.sample(self.shaper, at=time.monotonic())
        if self.limits is not None:
            egress = counting.egress(
                self.limits, previous=self.previous, current=current, at=self.clock
            )
            core.step(self.state, egress, self.clock)
        self.previous = current
        if event is not None:
            core.step(self.state, event, self.clock)  # type: ignore[arg-type]
        started = time.perf_counter()
        _, outputs = core.step(self.state, Tick(at=self.clock), self.clock)
        for out in outputs:
            if isinstance(out, NodeLimits):
                self.limits = out
                self.shaper.apply(out)
        return time.perf_counter() - started

    def limit(self, pod: str) -> int:
        assert self.limits is not None
        return next(p.ceil_bps for p in self.limits.limits if p.pod == pod)


@pytest.fixture
def loop(topo: Topology) -> Iterator[Loop]:
    ipr = IPRoute(netns=topo.ns("node"))
    policy = BandwidthPolicy(capacity_bps=CAPACITY, teams=TEAMS, internal_cidrs=(INTERNAL,),
                             floor_bps=1 * M)  # fmt: skip
    try:
        yield Loop(topo, ipr, policy)
    finally:
        Shaper(ipr, LAYOUT).teardown()
        ipr.close()


def converge(topo: Topology, loop: Loop, *, seconds: int = 6) -> None:
    """Both pods send to the internet while the loop runs once a second."""
    senders = [
        topo.send(0, INTERNET_HOST, 5201, seconds),
        topo.send(1, INTERNET_HOST, 5202, seconds),
    ]
    for _ in range(seconds - 1):
        time.sleep(1.0)
        loop.round()
    for s in senders:
        result(s)


def test_weights_3_to_1_share_100_mbit_75_25(topo: Topology, loop: Loop) -> None:
    loop.round()  # nothing measured yet: the spare spread evenly, less the 5% hysteresis
    assert (loop.limit("pod0"), loop.limit("pod1")) == (47.5 * M, 47.5 * M)
    converge(topo, loop)
    assert (loop.limit("pod0"), loop.limit("pod1")) == (75 * M, 25 * M)
    a, b = topo.send(0, INTERNET_HOST, 5201, 6), topo.send(1, INTERNET_HOST, 5202, 6)
    got_a, got_b = received_bps(result(a)), received_bps(result(b))
    print(f"\nassigned 75/25 Mbit/s, receiver measured {got_a / M:.1f}/{got_b / M:.1f} Mbit/s")
    assert within(got_a, 75 * M), got_a
    assert within(got_b, 25 * M), got_b


def test_traffic_to_an_internal_address_is_not_limited(topo: Topology, loop: Loop) -> None:
    loop.round()
    converge(topo, loop)
    assert loop.limit("pod1") == 25 * M
    before = counting.sample(loop.shaper, at=time.monotonic())
    got = received_bps(result(topo.send(1, PEER_HOST, 5203, 3)))
    after = counting.sample(loop.shaper, at=time.monotonic())
    print(f"\npod1 limited to 25 Mbit/s to the internet sent {got / M:.0f} Mbit/s to the peer")
    assert got > 4 * 25 * M  # past its limit and past the 100 Mbit/s uplink
    key = frozenset({topo.pod_ip(1)})
    internal = after.pods[key].internal_bytes - before.pods[key].internal_bytes
    internet = after.pods[key].internet_bytes - before.pods[key].internet_bytes
    assert internal > 20 * internet  # counted as internal, not as internet demand


def test_a_weight_change_is_applied_live(topo: Topology, loop: Loop) -> None:
    loop.round()
    converge(topo, loop)
    a, b = topo.send(0, INTERNET_HOST, 5201, 7), topo.send(1, INTERNET_HOST, 5202, 7)
    started = time.monotonic()
    time.sleep(2.5)
    even = TeamConfig(teams=tuple(Team(name=t, namespaces=(t,), egress=Egress(weight=3))
                                  for t in ("a", "b")))  # fmt: skip
    latency = loop.round(TeamsLoaded(config=even, at=loop.clock))
    applied_at = time.monotonic() - started
    ra, rb = result(a), result(b)
    first_a, first_b = (
        next((start, bps) for start, bps in interval_bps(r) if start >= applied_at - 0.05)
        for r in (ra, rb)
    )
    got_a, got_b = received_bps(ra, after=first_a[0]), received_bps(rb, after=first_b[0])
    print(
        f"\nweights 3:1 -> 3:3 applied in {latency * 1e3:.1f} ms (decide + netlink); "
        f"first full second after it (from {first_a[0]:.1f}s; applied at {applied_at:.1f}s): "
        f"{first_a[1] / M:.1f}/{first_b[1] / M:.1f} Mbit/s, "
        f"mean after it: {got_a / M:.1f}/{got_b / M:.1f} Mbit/s"
    )
    assert (loop.limit("pod0"), loop.limit("pod1")) == (50 * M, 50 * M)
    assert within(got_a, 50 * M), got_a
    assert within(got_b, 50 * M), got_b


def test_a_restarted_applier_keeps_the_limits_without_a_change(topo: Topology, loop: Loop) -> None:
    loop.round()
    converge(topo, loop)
    assert loop.limits is not None
    before = loop.shaper.read()
    with IPRoute(netns=topo.ns("node")) as fresh:  # a new agent process, same kernel state
        again = Shaper(fresh, LAYOUT).apply(loop.limits)
        after = Shaper(fresh, LAYOUT).read()
    assert again.changes == ()
    assert again.problems == ()
    assert after == before
    assert before.classes[again.slots[loop.limits.limits[0].uid]] == (75 * M // 8, 75 * M // 8)
