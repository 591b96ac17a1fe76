"""The pods the bandwidth core shapes, kept by team (pure data, no decisions).

A ``Book`` holds one team's pods in parallel lists (a pod's position is
``index[uid]``): its cap, its want as of the last round, its published limit and its
measured internet egress, and what the last round computed for the team. Adding a
pod appends; removing one moves the last pod into its place, so both are O(1) with
100k pods. Both allocation rounds (``incremental`` and the full ``reference``) read
the same books, in the same order, so they see the pods in the same order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from baton.proto.bandwidth import TeamEgress

NAN = math.nan  # "not computed yet": compares unequal to every want and level
UNPUBLISHED = -1


@dataclass(slots=True)
class Shaped:
    """A running pod with an address on a node: what the core needs of it."""

    namespace: str
    name: str
    uid: str
    node: str
    ips: tuple[str, ...]
    team_label: str
    cap_bps: float = math.inf  # the pod's own cap (kubernetes.io/egress-bandwidth)
    egress: str = ""  # kubernetes.io/egress-bandwidth as the pod has it now
    ours: bool = False  # ``egress`` is the limit the service wrote (baton.io/egress-limit)
    cap: str = ""  # the pod's own cap as text ("" for none)

    def same_limit(self, other: Shaped) -> bool:
        """Whether a ``PodLimit`` made for ``other`` still describes this pod."""
        return (self.namespace, self.name, self.node, self.ips) == (
            other.namespace,
            other.name,
            other.node,
            other.ips,
        )


@dataclass(slots=True, eq=False)
class Book:
    team: TeamEgress
    uids: list[str] = field(default_factory=list)
    caps: list[float] = field(default_factory=list)
    wants: list[float] = field(default_factory=list)  # as of the last round (NAN: new)
    pub: list[int] = field(default_factory=list)  # published limit (UNPUBLISHED: none yet)
    used: list[float] = field(default_factory=list)  # measured internet bits per second
    index: dict[str, int] = field(default_factory=dict)
    # What the last incremental round left, reused while nothing of the team moved:
    want: float = 0.0  # fsum(wants)
    smallest: float = 0.0  # min(wants)
    moved: bool = True  # a want, a cap, a pod or the order changed since
    changed: list[int] | None = None  # positions whose want changed (None: any may have)
    level: float = NAN  # the team's water level (NAN: spread, or not computed)
    wanted: list[int] = field(default_factory=list)  # whole-bps shares, before hysteresis
    wanted_sum: int = 0
    force: bool = False  # recompute next round even if nothing moved
    used_total: int = 0
    used_moved: bool = True

    def add(self, uid: str, *, cap: float, pub: int, used: float) -> None:
        self.index[uid] = len(self.uids)
        self.uids.append(uid)
        self.caps.append(cap)
        self.wants.append(NAN)
        self.pub.append(pub)
        self.used.append(used)
        self.wanted.append(0)
        self.moved, self.changed, self.used_moved = True, None, True

    def remove(self, uid: str) -> None:
        """Move the last pod into ``uid``'s place."""
        i = self.index.pop(uid)
        last = len(self.uids) - 1
        if i != last:
            self.index[self.uids[last]] = i
            self.uids[i], self.caps[i], self.wants[i] = (
                self.uids[last],
                self.caps[last],
                self.wants[last],
            )
            self.pub[i], self.used[i], self.wanted[i] = (
                self.pub[last],
                self.used[last],
                self.wanted[last],
            )
        for values in (self.uids, self.caps, self.wants, self.pub, self.used, self.wanted):
            values.pop()
        self.moved, self.changed, self.used_moved = True, None, True

    def want_moved(self, i: int, want: float) -> None:
        self.wants[i] = want
        self.moved = True
        if self.changed is not None:
            self.changed.append(i)

    def all_moved(self) -> None:
        self.moved, self.changed = True, None

    def __len__(self) -> int:
        return len(self.uids)


__all__ = ["NAN", "UNPUBLISHED", "Book", "Shaped"]
