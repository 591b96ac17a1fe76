"""Eligible counts and per-domain sums, kept per shape across events.

A placement used to recompute, for every gang, how many pods of each shape every
node takes and the per-domain sums of those counts: two passes over all nodes
(~10 ms at 7,500 nodes). Here each shape's counts (a ``Tally``) are built once and
then updated node by node: the view marks a node *dirty* whenever its labels,
taints or health change (``View.dirty``) and *refilled* when only its free capacity
does (``View.refilled``), and the next query refreshes only those nodes: dirty ones in
every tally, refilled ones in the tallies that read free capacity. The numbers are
exactly the ones a full pass (``fitting.eligible_counts``) would give; only their cost
differs.

Tallies are kept for the most recently used ``MAX_TALLIES`` (shape, mode) pairs;
``empty`` mode counts as if the node ran nothing (reservations, "what would fit").
The free-capacity totals over usable nodes are kept the same way.

A view owns one ``Index`` (``View.index``): the index is what reads and clears the
view's dirty set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from baton.libs.view.fitting import Shape, admits, count_fits

if TYPE_CHECKING:
    from baton.libs.view.cluster import NodeView, View

MAX_TALLIES = 64

Counts = list[tuple["NodeView", int]]


@dataclass(slots=True)
class Tally:
    """For one shape: pods each admitting node takes (> 0 only), summed per domain."""

    shape: Shape
    empty: bool
    depth: int
    n: dict[str, int] = field(default_factory=dict)
    paths: dict[str, tuple[str | None, ...]] = field(default_factory=dict)
    sums: list[dict[str, int]] = field(default_factory=list)  # level -> domain -> pods
    nodes: list[dict[str, set[str]]] = field(default_factory=list)  # level -> domain -> nodes
    loose: set[str] = field(default_factory=set)  # nodes with no narrowest-level domain
    total: int = 0

    def __post_init__(self) -> None:
        self.sums = [{} for _ in range(self.depth)]
        self.nodes = [{} for _ in range(self.depth)]

    def refresh(self, name: str, state: NodeView | None) -> None:
        count = 0
        if state is not None and admits(state, self.shape):
            free = state.node.allocatable if self.empty else state.free
            count = count_fits(free, self.shape.requests)
        old = self.n.get(name, 0)
        if old and count == old and state is not None and self.paths[name] == state.paths:
            return  # what changed on the node changed nothing here
        if old:
            del self.n[name]
            self._move(name, self.paths.pop(name), -old)
        if count > 0:
            assert state is not None
            self.n[name] = count
            self.paths[name] = state.paths
            self._move(name, state.paths, count)

    def _move(self, name: str, paths: tuple[str | None, ...], delta: int) -> None:
        self.total += delta
        if not paths or paths[-1] is None:
            if delta > 0:
                self.loose.add(name)
            else:
                self.loose.discard(name)
        for i, path in enumerate(paths):
            if path is None:
                continue
            sums, nodes = self.sums[i], self.nodes[i]
            if delta > 0:
                sums[path] = sums.get(path, 0) + delta
                nodes.setdefault(path, set()).add(name)
                continue
            members = nodes[path]
            members.discard(name)
            if members:
                sums[path] += delta
            else:
                del sums[path], nodes[path]


@dataclass(slots=True)
class Eligible:
    """One shape's tally less some excluded nodes (a reservation), read-only:
    ``sums[level][domain]`` pods the domain takes, ``total`` over all nodes,
    ``eligible`` nodes taking at least one."""

    nodes: dict[str, NodeView]
    tally: Tally
    excluded: frozenset[str]
    sums: list[dict[str, int]]
    total: int
    eligible: int

    def count(self, name: str) -> int:
        return 0 if name in self.excluded else self.tally.n.get(name, 0)

    def all(self) -> Counts:
        nodes, excluded = self.nodes, self.excluded
        return [(nodes[k], n) for k, n in self.tally.n.items() if k not in excluded]

    def members(self, level: int, path: str) -> Counts:
        nodes, n, excluded = self.nodes, self.tally.n, self.excluded
        inside = self.tally.nodes[level].get(path, ())
        return [(nodes[k], n[k]) for k in inside if k not in excluded]

    def loose(self) -> list[int]:
        n = self.tally.n
        return [n[k] for k in self.tally.loose if k not in self.excluded]


def _kept(view: View[Any], tally: Tally, excluded: frozenset[str]) -> Eligible:
    """The tally's sums over the nodes not ``excluded``, added up from them."""
    sums: list[dict[str, int]] = [{} for _ in tally.sums]
    total = kept = 0
    for name, count in tally.n.items():
        if name in excluded:
            continue
        kept += 1
        total += count
        if count:
            for i, path in enumerate(tally.paths[name]):
                if path is not None:
                    sums[i][path] = sums[i].get(path, 0) + count
    return Eligible(view.nodes, tally, excluded, sums, total, kept)


@dataclass(slots=True)
class Index:
    tallies: dict[tuple[Shape, bool], Tally] = field(default_factory=dict)
    totals: dict[str, int] | None = None  # positive free per resource over usable nodes
    shares: dict[str, dict[str, int]] = field(default_factory=dict)  # node -> its part

    def eligible(
        self, view: View[Any], shape: Shape, *, empty: bool = False,
        excluded: frozenset[str] = frozenset(),
    ) -> Eligible:  # fmt: skip
        tally = self._tally(view, shape, empty)
        hit = [k for k in excluded if k in tally.n] if excluded else []
        if not hit:
            return Eligible(view.nodes, tally, excluded, tally.sums, tally.total, len(tally.n))
        if 2 * len(hit) > len(tally.n):  # most left out (only a few nodes tried): add up
            return _kept(view, tally, excluded)
        sums = [dict(level) for level in tally.sums]
        total = tally.total
        for name in hit:
            count = tally.n[name]
            total -= count
            for i, path in enumerate(tally.paths[name]):
                if path is not None:
                    left = sums[i][path] - count
                    if left:
                        sums[i][path] = left
                    else:
                        del sums[i][path]
        return Eligible(view.nodes, tally, excluded, sums, total, len(tally.n) - len(hit))

    def free_totals(self, view: View[Any]) -> dict[str, int]:
        """Free capacity summed over usable nodes (positive amounts only); a copy."""
        self.sync(view)
        if self.totals is None:
            self.totals = {}
            for name, state in view.nodes.items():
                self._share(name, state)
        return dict(self.totals)

    def sync(self, view: View[Any]) -> None:
        """Refresh every node changed since the last query, in every tally; a node whose
        free capacity alone changed only in the tallies that read it (not ``empty``)."""
        if not view.dirty and not view.refilled:
            return
        tallies = list(self.tallies.values())
        by_free = [t for t in tallies if not t.empty]
        for names, touched in ((view.dirty, tallies), (view.refilled - view.dirty, by_free)):
            for name in names:
                state = view.nodes.get(name)
                for tally in touched:
                    tally.refresh(name, state)
                if self.totals is not None:
                    self._share(name, state)
        view.dirty.clear()
        view.refilled.clear()

    def _tally(self, view: View[Any], shape: Shape, empty: bool) -> Tally:
        self.sync(view)
        key = (shape, empty)
        tally = self.tallies.pop(key, None)  # re-inserted last: most recently used
        if tally is None:
            if len(self.tallies) >= MAX_TALLIES:
                del self.tallies[next(iter(self.tallies))]
            tally = Tally(shape=shape, empty=empty, depth=len(view.levels))
            for name, state in view.nodes.items():
                tally.refresh(name, state)
        self.tallies[key] = tally
        return tally

    def _share(self, name: str, state: NodeView | None) -> None:
        assert self.totals is not None
        totals = self.totals
        share: dict[str, int] = {}
        if state is not None and state.usable:
            share = {res: amount for res, amount in state.free.items() if amount > 0}
        old = self.shares.pop(name, {})
        if share:
            self.shares[name] = share
        if share == old:
            return  # the node's part of the totals is what it was
        for res, amount in old.items():
            totals[res] -= amount
        for res, amount in share.items():
            totals[res] = totals.get(res, 0) + amount
