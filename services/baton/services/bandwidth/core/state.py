"""The bandwidth core's state: the picture of pods, teams and measurements, and what was
published. Kept by ``core.step``; read by the rounds (``incremental``, ``reference``)."""

from __future__ import annotations

import heapq
import ipaddress
from collections import Counter
from dataclasses import dataclass, field

from baton.proto.bandwidth import BandwidthPolicy, PodLimit, TeamEgress
from baton.services.bandwidth.core.fairshare import INF
from baton.services.bandwidth.core.ledger import Book, Shaped
from baton.services.bandwidth.core.policy import Teams

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(slots=True)
class State:
    policy: BandwidthPolicy
    teams: Teams
    capacity: int
    networks: list[Network]  # policy.internal_cidrs, parsed
    pods: dict[str, Shaped] = field(default_factory=dict)  # uid -> pod
    on_node: dict[str, dict[str, None]] = field(default_factory=dict)  # node -> uids (ordered)
    books: dict[str, Book] = field(default_factory=dict)  # team name -> its pods
    book_of: dict[str, Book] = field(default_factory=dict)  # uid -> its team's book
    order: list[Book] | None = None  # books by team name (None: to sort again)
    team_of: dict[tuple[str, str], TeamEgress] = field(default_factory=dict)  # (ns, label)
    used: dict[str, tuple[float, float]] = field(default_factory=dict)  # uid -> (bps, at)
    expiry: list[tuple[float, int, tuple[str, ...]]] = field(default_factory=list)  # heap
    measured: int = 0  # NodeEgress seen (the heap's tie-breaker)
    published: dict[str, int] = field(default_factory=dict)  # uid -> limit last published
    limits: dict[str, PodLimit] = field(default_factory=dict)  # uid -> the PodLimit published
    touched: set[str] = field(default_factory=set)  # pods whose want may have moved
    unlisted: set[str] = field(default_factory=set)  # pods that need a new PodLimit
    dirty: set[str] = field(default_factory=set)  # nodes whose pod set changed
    queued: dict[str, None] = field(default_factory=dict)  # nodes to publish, oldest first
    generation: dict[str, int] = field(default_factory=dict)  # node -> last generation
    slices: dict[str, tuple[str, ...]] = field(default_factory=dict)  # slice uid -> addresses
    outside: Counter[str] = field(default_factory=Counter)  # endpoint addresses not internal
    extra: tuple[str, ...] = ()  # internal networks from EndpointSlices, as published
    extra_moved: bool = False
    last_round: float = -INF
    paced_until: float = -INF  # no round before: the last one's node limits, paced
    regime: str = ""  # "levels" (wants exceed capacity) or "spread"; "" before any round
    last_capacity: int = -1
    moved: bool = True  # an input since the last round could change an output
    due: dict[str, None] = field(default_factory=dict)  # pods whose annotation may lag
    annotated: dict[str, float] = field(default_factory=dict)  # uid -> last Annotate at


def books(state: State) -> list[Book]:
    """The books by team name. A team that came or went changes every share: the next
    incremental round computes every team again."""
    if state.order is None:
        state.order = [state.books[name] for name in sorted(state.books)]
        state.regime = ""
    return state.order


def expire(state: State, oldest: float) -> None:
    """Pods whose newest measurement is older than ``oldest`` now want the floor."""
    heap = state.expiry
    while heap and heap[0][0] < oldest:
        at, _, uids = heapq.heappop(heap)
        for uid in uids:
            measured = state.used.get(uid)
            if measured is not None and measured[1] == at:
                state.touched.add(uid)
