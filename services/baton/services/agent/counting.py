"""Bytes each pod sent, to the internet and to internal addresses, from tc class counters.

The shaper (``services/baton/services/agent/shaping.py``) gives every pod two HTB classes on the
agent's IFB device: slot ``s`` for its internet egress and ``s | 0x4000`` for its
internal egress, both fed only by that pod's source addresses. Their byte counters
(sent, after shaping) are the pod's counters; ``egress`` turns two samples into
rates. ``sample`` is the thin netlink read; ``egress`` is pure.

A counter that went down (the class was recreated) gives a rate of 0 for that interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from baton.proto.bandwidth import NodeEgress, NodeLimits, PodEgress
from baton.services.agent.shaping import Shaper
from baton.services.agent.tc import FIRST_SLOT, INTERNAL_BIT, LAST_SLOT, MAJOR

Addresses = frozenset[str]


@dataclass(frozen=True, slots=True)
class Counters:
    internet_bytes: int = 0
    internal_bytes: int = 0
    dropped: int = 0  # packets the pod's shaped class dropped


@dataclass(frozen=True, slots=True)
class Sample:
    """Counters per pod (by its IPv4 addresses) at ``at`` (monotonic seconds, the caller's)."""

    at: float
    pods: Mapping[Addresses, Counters] = field(default_factory=dict)


def egress(
    limits: NodeLimits, *, previous: Sample | None, current: Sample, at: float
) -> NodeEgress:
    """The pods of ``limits`` with counters, their rates since ``previous`` (0 without one).

    ``at`` is the wall-clock time of ``current`` (the event's time on the bus).
    """
    interval = current.at - previous.at if previous is not None else 0.0
    pods = []
    for pod in limits.limits:
        key = frozenset(ip for ip in pod.ips if "." in ip)
        now = current.pods.get(key)
        if now is None:
            continue
        before = previous.pods.get(key) if previous is not None else None
        pods.append(
            PodEgress(
                namespace=pod.namespace,
                pod=pod.pod,
                uid=pod.uid,
                internet_bytes=now.internet_bytes,
                internal_bytes=now.internal_bytes,
                internet_bps=_rate(before, now, interval, internet=True),
                internal_bps=_rate(before, now, interval, internet=False),
                limit_bps=pod.ceil_bps,
                dropped=now.dropped,
            )
        )
    return NodeEgress(
        node=limits.node,
        at=at,
        interval_s=interval,
        pods=tuple(pods),
        generation=limits.generation,
    )


def _rate(before: Counters | None, now: Counters, interval: float, *, internet: bool) -> int:
    if before is None or interval <= 0:
        return 0
    if internet:
        old, new = before.internet_bytes, now.internet_bytes
    else:
        old, new = before.internal_bytes, now.internal_bytes
    return int((new - old) * 8 / interval) if new >= old else 0


def sample(shaper: Shaper, *, at: float) -> Sample:
    """Read the class counters of every pod slot (netlink). ``at``: when, monotonic seconds."""
    ifb = shaper.index(shaper.layout.ifb)
    if ifb is None:
        return Sample(at=at)
    sent: dict[int, tuple[int, int]] = {}  # minor -> bytes, drops
    for c in shaper.ipr.get_classes(index=ifb):
        if c["handle"] >> 16 != MAJOR:
            continue
        stats = c.get_attr("TCA_STATS2")
        basic = stats.get_attr("TCA_STATS_BASIC") if stats is not None else None
        queue = stats.get_attr("TCA_STATS_QUEUE") if stats is not None else None
        sent[c["handle"] & 0xFFFF] = (
            int(basic["bytes"]) if basic else 0,
            int(queue["drops"]) if queue else 0,
        )
    pods: dict[Addresses, Counters] = {}
    for prio, rules in shaper.filters(ifb).items():
        if not FIRST_SLOT <= prio <= LAST_SLOT or prio not in sent:
            continue
        key = frozenset(r.src.removesuffix("/32") for r in rules if r.src)
        internet, dropped = sent[prio]
        internal, _ = sent.get(prio | INTERNAL_BIT, (0, 0))
        pods[key] = Counters(internet_bytes=internet, internal_bytes=internal, dropped=dropped)
    return Sample(at=at, pods=pods)
