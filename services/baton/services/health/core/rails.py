"""Safety rails: how many nodes may be out at once per failure domain, and slow start.

**A level, not a rate.** Each node belongs to up to four failure domains: its rack,
its block, its pool and the cluster. A domain may have at most
``max(cap_min, floor(cap * size))`` nodes *out* (quarantined, draining or
remediating) at once. A verdict that would take one more out of a full domain is
held back and published as "would quarantine" (``health.withheld``) with the
domain and its numbers; it goes through by itself once the level drops (a node
returns, or leaves the cluster). Nothing here ever holds back a node's return: a
rate limit that trips (NVSentinel's circuit breaker) blocks the events that would
release nodes too; a level cannot.

**Slow start** paces returns after faults (TCP's slow start): one node may return
in the first ``release_interval_s``, twice as many in each following interval that
used its whole allowance, up to ``release_max``. A node that fails again within
``probation_s`` of its return starts the count at one again. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from baton.proto.health import HealthPolicy

CLUSTER = "cluster"


@dataclass(frozen=True, slots=True)
class Domain:
    level: str  # rack | block | pool | cluster
    name: str  # the domain path ("/z1/b2/r3"), the pool, or "" for the cluster

    @property
    def key(self) -> str:
        return f"{self.level}:{self.name}"

    def words(self) -> str:
        return self.level if self.level == CLUSTER else f"{self.level} {self.name}"


def domains(*, rack: str | None, block: str | None, pool: str) -> tuple[Domain, ...]:
    found = []
    if rack:
        found.append(Domain("rack", rack))
    if block:
        found.append(Domain("block", block))
    if pool:
        found.append(Domain("pool", pool))
    found.append(Domain(CLUSTER, ""))
    return tuple(found)


def share(policy: HealthPolicy, level: str) -> float:
    caps = {"rack": policy.cap_rack, "block": policy.cap_block, "pool": policy.cap_pool,
            CLUSTER: policy.cap_cluster}  # fmt: skip
    return caps[level]


@dataclass(slots=True)
class Rails:
    policy: HealthPolicy
    members: dict[str, set[str]] = field(default_factory=dict)  # domain key -> nodes
    out: dict[str, set[str]] = field(default_factory=dict)  # domain key -> nodes out
    where: dict[str, tuple[Domain, ...]] = field(default_factory=dict)  # node -> domains
    outs: set[str] = field(default_factory=set)  # every node out

    def place(self, node: str, found: tuple[Domain, ...]) -> None:
        """The node's domains (again, when its labels changed)."""
        if self.where.get(node) == found:
            return
        was_out = node in self.outs
        self.remove(node)
        self.where[node] = found
        for d in found:
            self.members.setdefault(d.key, set()).add(node)
        if was_out:
            self.set_out(node, True)

    def remove(self, node: str) -> None:
        self.set_out(node, False)
        for d in self.where.pop(node, ()):
            held = self.members.get(d.key)
            if held is not None:
                held.discard(node)
                if not held:
                    del self.members[d.key]

    def set_out(self, node: str, out: bool) -> None:
        if out == (node in self.outs):
            return
        for d in self.where.get(node, ()):
            if out:
                self.out.setdefault(d.key, set()).add(node)
            else:
                held = self.out.get(d.key)
                if held is not None:
                    held.discard(node)
        if out:
            self.outs.add(node)
        else:
            self.outs.discard(node)

    def allowed(self, d: Domain) -> int:
        size = len(self.members.get(d.key, ()))
        return max(self.policy.cap_min, math.floor(share(self.policy, d.level) * size + 1e-9))

    def room(self, node: str) -> tuple[str, str]:
        """('', '') when one more node may go out here; else (level, why) of the first
        full domain, narrowest first."""
        for d in self.where.get(node, ()):
            now_out = len(self.out.get(d.key, ()))
            allowed = self.allowed(d)
            if now_out >= allowed:
                size = len(self.members.get(d.key, ()))
                cap = share(self.policy, d.level)
                why = (f"{d.words()} has {now_out} of {size} nodes out, the cap is {allowed} "
                       f"({cap:.0%}, at least {self.policy.cap_min})")  # fmt: skip
                return d.level, why
        return "", ""

    def levels(self) -> dict[str, tuple[int, int, int]]:
        """domain key -> (out, allowed, size), for gauges and the docs."""
        found = {}
        for key, nodes in self.members.items():
            level, _, name = key.partition(":")
            d = Domain(level, name)
            found[key] = (len(self.out.get(key, ())), self.allowed(d), len(nodes))
        return found


@dataclass(slots=True)
class SlowStart:
    policy: HealthPolicy
    size: int = 1  # returns allowed per interval
    window: float = -math.inf  # start of the current interval
    used: int = 0

    def allow(self, now: float) -> bool:
        """One more return now? Counts it if so."""
        self._roll(now)
        if self.used < self.size:
            self.used += 1
            return True
        return False

    def _roll(self, now: float) -> None:
        interval = self.policy.release_interval_s
        if now < self.window + interval:
            return
        if now >= self.window + 2 * interval:
            self.size = 1  # a whole interval without returns: start over
        elif self.used >= self.size:
            self.size = min(self.size * 2, self.policy.release_max)  # a full interval: grow
        self.window, self.used = now, 0

    def reset(self) -> None:
        """A returned node failed again within its probation: start at one again."""
        self.size, self.used, self.window = 1, 0, -math.inf

    def next_at(self) -> float:
        return self.window + self.policy.release_interval_s
