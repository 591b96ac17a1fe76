"""Egress shaping benchmarks (``python -m tests.bench bandwidth``).

1. Allocation round of the bandwidth core: 100,000 running pods on 910 nodes (110 a
   node), 20 teams over 3 tiers, every pod measured. Rounds: the first (every limit
   new), a steady one (nothing moved past the hysteresis), one after 10% of the pods'
   measurements changed, and the same round computed from scratch (``reference``).
   Raw baseline in the same run: one pass over the pods that only reads each one's
   measurement (the floor of any per-pod allocation in Python).
2. Agent apply time, 110 pods on one node (needs root; a network namespace with a
   bridge as the hook): first apply, a no-op reconcile, every rate changed, one changed.
3. Achieved vs assigned rates: two pods behind a 100 Mbit/s uplink (needs root and
   iperf3), receiver-measured TCP goodput for a few limit pairs.
"""

from __future__ import annotations

import random
import statistics
import time

import msgspec

from baton.proto.bandwidth import (
    BandwidthPolicy,
    NodeEgress,
    NodeLimits,
    PodEgress,
    PodLimit,
    TeamEgress,
)
from baton.proto.k8s import PodEvent
from baton.proto.runner import Tick
from baton.services.bandwidth import core
from baton.services.bandwidth.core import reference
from tests.support.builders import pod

M = 1_000_000
PODS, TEAMS, PER_NODE = 100_000, 20, 110
TIERS = ("critical", "normal", "background")


def cluster(seed: int = 1) -> tuple[core.State, dict[str, list[tuple[str, str, str]]]]:
    rng = random.Random(seed)
    teams = tuple(
        TeamEgress(name=f"team-{t:02d}", tier=TIERS[t % 3], weight=float(1 + t % 4),
                   minimum_bps=(200 * M if t % 5 == 0 else 0))
        for t in range(TEAMS)
    )  # fmt: skip
    state = core.initial(BandwidthPolicy(capacity_bps=100_000 * M, teams=teams))
    by_node: dict[str, list[tuple[str, str, str]]] = {}
    for i in range(PODS):
        node = f"node-{i // PER_NODE:04d}"
        p = msgspec.structs.replace(
            pod(f"w-{i}", namespace=f"team-{i % TEAMS:02d}", node_name=node,
                labels={"baton.io/team": f"team-{i % TEAMS:02d}"}),
            pod_ip=f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}",
        )  # fmt: skip
        core.step(state, PodEvent(op="upsert", at=0.0, pod=p), 0.0)
        by_node.setdefault(node, []).append((p.namespace, p.name, p.uid))
    measure(state, by_node, rng, at=0.5, share=1.0)
    return state, by_node


def measure(
    state: core.State, by_node: dict[str, list[tuple[str, str, str]]], rng: random.Random,
    *, at: float, share: float,
) -> float:  # fmt: skip
    """Every node reports ``share`` of its pods; returns the seconds the core took."""
    events = [
        NodeEgress(node=node, at=at, interval_s=1.0, pods=tuple(
            PodEgress(namespace=ns, pod=name, uid=uid,
                      internet_bps=int(rng.expovariate(1 / (2 * M))))
            for ns, name, uid in pods if rng.random() < share))
        for node, pods in by_node.items()
    ]  # fmt: skip
    started = time.perf_counter()
    for event in events:
        core.step(state, event, at)
    return time.perf_counter() - started


def timed(state: core.State, at: float) -> tuple[float, int]:
    started = time.perf_counter()
    _, outputs = core.step(state, Tick(at=at), at)
    return time.perf_counter() - started, sum(isinstance(o, NodeLimits) for o in outputs)


def timed_reference(state: core.State, at: float) -> tuple[float, int]:
    """The same round computed from scratch (``reference``: how every round was computed
    before rounds became incremental)."""
    started = time.perf_counter()
    outputs = core.finish(state, at, reference.decide(state, at))
    return time.perf_counter() - started, sum(isinstance(o, NodeLimits) for o in outputs)


def allocation() -> None:
    state, by_node = cluster()
    rng = random.Random(2)
    first, nodes_first = timed(state, 1.0)
    settle = [timed(state, 1.0 + r)[0] for r in range(1, 4)]  # pods now held at a limit
    steady = [timed(state, 5.0 + r)[0] for r in range(5)]
    changed, ingest = [], []
    for r in range(10, 15):
        ingest.append(measure(state, by_node, rng, at=r + 0.5, share=0.1))
        changed.append(timed(state, r + 1.0))
    full = [timed_reference(state, 20.0 + r) for r in range(3)]
    started = time.perf_counter()
    for uid in state.pods:
        state.used.get(uid)
    baseline = time.perf_counter() - started
    med = statistics.median
    print(f"{PODS:,} pods, {len(by_node)} nodes, {TEAMS} teams, 3 tiers\n")
    print("| round | time | NodeLimits published |")
    print("|---|---|---|")
    print(f"| first (every limit new) | {first * 1e3:.0f} ms | {nodes_first} |")
    print(f"| next 3 (pods now held at their limits want more) | "
          f"{', '.join(f'{t * 1e3:.0f}' for t in settle)} ms | |")  # fmt: skip
    print(f"| steady (median of 5) | {med(steady) * 1e3:.1f} ms | 0 |")
    print(f"| 10% of pods re-measured (median of 5) | {med(t for t, _ in changed) * 1e3:.1f} ms "
          f"| {med(n for _, n in changed):.0f} |")  # fmt: skip
    print(f"| from scratch (`reference`, median of 3) | {med(t for t, _ in full) * 1e3:.0f} ms "
          f"| {med(n for _, n in full):.0f} |")  # fmt: skip
    print(f"| ingest: 10% of pods' NodeEgress into the core (median of 5) | "
          f"{med(ingest) * 1e3:.1f} ms | |")  # fmt: skip
    print(f"| baseline: one dict read per pod | {baseline * 1e3:.1f} ms | |\n")


def apply_110() -> None:
    from pyroute2 import IPRoute

    from baton.services.agent.core.tc import Layout
    from baton.services.agent.shaping import Shaper
    from tests.netns.topology import missing, sh

    if missing():
        print(f"agent apply: skipped ({missing()})\n")
        return
    ns = "bwbench-node"
    sh("ip", "netns", "add", ns)
    try:
        sh("ip", "-n", ns, "link", "add", "br0", "type", "bridge")
        with IPRoute(netns=ns) as ipr:
            shaper = Shaper(ipr, Layout(hooks=("br0",)))

            def limits(rate: int, generation: int, *, one: int = 0) -> NodeLimits:
                return NodeLimits(node="n", at=0.0, generation=generation, id=str(generation),
                                  internal_cidrs=("10.0.0.0/8",), limits=tuple(
                    PodLimit(namespace="ns", pod=f"p{i}", uid=f"u{i}", team="t", tier="normal",
                             ips=(f"100.64.0.{i + 1}",), egress_bps=rate + (one if i == 0 else 0),
                             ceil_bps=rate + (one if i == 0 else 0))
                    for i in range(PER_NODE)))  # fmt: skip

            rows = []
            for label, wanted in (
                ("first apply (device, root, 223 classes, 221 filters, hook)", limits(50 * M, 1)),
                ("no-op reconcile (read + plan)", limits(50 * M, 1)),
                ("every rate changed", limits(60 * M, 2)),
                ("one rate changed", limits(60 * M, 3, one=10 * M)),
            ):
                started = time.perf_counter()
                done = shaper.apply(wanted)
                rows.append((label, time.perf_counter() - started, len(done.changes)))
            shaper.teardown()
        print(f"agent apply, {PER_NODE} pods on one node (pyroute2, one request per change)\n")
        print("| apply | time | netlink changes |")
        print("|---|---|---|")
        for label, seconds, n in rows:
            print(f"| {label} | {seconds * 1e3:.0f} ms | {n} |")
        print()
    finally:
        sh("ip", "netns", "del", ns, check=False)


def achieved() -> None:
    from pyroute2 import IPRoute

    from baton.services.agent.core.tc import Layout
    from baton.services.agent.shaping import Shaper
    from tests.netns.topology import (
        INTERNAL,
        INTERNET_HOST,
        Topology,
        missing,
        received_bps,
        result,
    )

    if missing():
        print(f"achieved vs assigned: skipped ({missing()})\n")
        return
    topo = Topology(prefix="bwbench")
    print("achieved vs assigned, 2 pods behind a 100 Mbit/s uplink (receiver TCP goodput, 6 s)\n")
    print("| assigned (Mbit/s) | achieved (Mbit/s) | achieved / assigned |")
    print("|---|---|---|")
    try:
        topo.build()
        topo.serve("inet", 5201, 5202)
        with IPRoute(netns=topo.ns("node")) as ipr:
            shaper = Shaper(ipr, Layout(hooks=("br0",)))
            for a, b in ((75, 25), (50, 50), (90, 10), (20, 5)):
                shaper.apply(NodeLimits(node="n", at=0.0, generation=1, id="1",
                                        internal_cidrs=(INTERNAL,), limits=tuple(
                    PodLimit(namespace="ns", pod=f"pod{i}", uid=f"u{i}", team="t", tier="normal",
                             ips=(topo.pod_ip(i),), egress_bps=r * M, ceil_bps=r * M)
                    for i, r in enumerate((a, b)))))  # fmt: skip
                senders = [
                    topo.send(0, INTERNET_HOST, 5201, 6),
                    topo.send(1, INTERNET_HOST, 5202, 6),
                ]
                got = [received_bps(result(s)) / M for s in senders]
                print(f"| {a} / {b} | {got[0]:.1f} / {got[1]:.1f} | "
                      f"{got[0] / a:.1%} / {got[1] / b:.1%} |")  # fmt: skip
            shaper.teardown()
        print("\n(TCP payload is 1448 of every 1514 bytes HTB counts: 95.6% is exact.)\n")
    finally:
        topo.destroy()


def main() -> None:
    allocation()
    apply_110()
    achieved()


if __name__ == "__main__":
    main()
