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
from baton.services.agent.core.tc import FIRST_SLOT, INTERNAL_BIT, LAST_SLOT, MAJOR
from baton.services.agent.shaping import Shaper

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


@dataclass(slots=True)
class Changed:
    """Which measurements are worth a message: a node's ``NodeEgress`` goes out when a
    pod's rate moved by more than ``ratio`` of the published rate and by more than
    ``bps``, a pod came or went, the limits it was measured under changed, or nothing
    went out for ``keepalive_s`` (so a consumer can tell a quiet node from a gone one).
    Pure: time is each report's ``at``."""

    keepalive_s: float = 60.0
    ratio: float = 0.1
    bps: int = 1_000_000
    published: dict[str, NodeEgress] = field(default_factory=dict)  # node -> last one out

    def due(self, reports: list[NodeEgress]) -> list[NodeEgress]:
        """The reports to publish; they count as published from here on."""
        out = [r for r in reports if self._moved(self.published.get(r.node), r)]
        self.published.update((r.node, r) for r in out)
        return out

    def _moved(self, last: NodeEgress | None, new: NodeEgress) -> bool:
        if last is None or new.at - last.at >= self.keepalive_s:
            return True
        if last.generation != new.generation or len(last.pods) != len(new.pods):
            return True
        for old, now in zip(last.pods, new.pods, strict=True):
            if old.uid != now.uid or old.limit_bps != now.limit_bps:
                return True
            if self._far(old.internet_bps, now.internet_bps) or self._far(
                old.internal_bps, now.internal_bps
            ):
                return True
        return False

    def _far(self, old: int, new: int) -> bool:
        return abs(new - old) > max(self.ratio * old, self.bps)
