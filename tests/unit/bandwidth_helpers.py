"""Builders for bandwidth core tests: running pods with addresses, measurements, rounds."""

from __future__ import annotations

import msgspec

from baton.proto.bandwidth import (
    Allocation,
    BandwidthPolicy,
    NodeEgress,
    NodeLimits,
    PodEgress,
    TeamEgress,
)
from baton.proto.k8s import Pod, PodEvent
from baton.proto.runner import Tick
from baton.services.bandwidth import core
from tests.support.builders import pod

M = 1_000_000


def running(
    name: str,
    *,
    team: str = "",
    node: str = "n1",
    ip: str = "",
    namespace: str = "default",
    cap: str = "",
) -> Pod:
    """A Running pod on ``node`` with an address, labelled with ``team`` if given."""
    number = sum(ord(c) for c in name + node) % 250 + 1
    return msgspec.structs.replace(
        pod(
            name,
            namespace=namespace,
            node_name=node,
            labels={"baton.io/team": team} if team else {},
            annotations={"kubernetes.io/egress-bandwidth": cap} if cap else {},
        ),
        pod_ip=ip or f"10.{len(node)}.{len(name)}.{number}",
    )


def policy(*teams: TeamEgress, capacity: int = 100 * M, **knobs: object) -> BandwidthPolicy:
    base = BandwidthPolicy(capacity_bps=capacity, teams=teams)
    return msgspec.structs.replace(base, **knobs) if knobs else base


def started(p: BandwidthPolicy, *pods: Pod) -> core.State:
    state = core.initial(p)
    for each in pods:
        core.step(state, PodEvent(op="upsert", at=0.0, pod=each), 0.0)
    return state


def tick(state: core.State, at: float) -> tuple[list[NodeLimits], Allocation]:
    _, outputs = core.step(state, Tick(at=at), at)
    limits = [o for o in outputs if isinstance(o, NodeLimits)]
    summaries = [o for o in outputs if isinstance(o, Allocation)]
    assert len(summaries) == 1
    return limits, summaries[0]


def measure(state: core.State, at: float, node: str = "n1", **internet_bps: float) -> None:
    """Report each named pod's internet egress (pod name -> bits per second)."""
    pods = []
    for p in state.pods.values():
        if p.node == node and p.name.replace("-", "_") in internet_bps:
            rate = int(internet_bps[p.name.replace("-", "_")])
            pods.append(PodEgress(namespace=p.namespace, pod=p.name, uid=p.uid, internet_bps=rate))
    core.step(state, NodeEgress(node=node, at=at, interval_s=1.0, pods=tuple(pods)), at)


def saturate(state: core.State, at: float, *names: str) -> None:
    """Each named pod sends at its published limit (it wants more)."""
    by_name = {p.name: p for p in state.pods.values()}
    for name in names:
        p = by_name[name]
        limit = state.published[p.uid]
        measure(state, at, p.node, **{name.replace("-", "_"): limit})


def limit_of(state: core.State, name: str) -> int:
    return next(state.published[p.uid] for p in state.pods.values() if p.name == name)
