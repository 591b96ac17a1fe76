"""Topology-aware, all-or-nothing search: which domain, and which nodes in it.

Levels are node label keys from broad to narrow (zone -> block -> rack). Per domain
at every level, how many members of each shape it can take now (kept incrementally
by the view, ``libs.view.capacity``); those aggregates pick the domain (narrowest
level first, then best fit: least capacity left over, so large free domains stay
whole), and only the nodes of the chosen domain are looked at to assign members.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from baton.libs.view import Counts, Eligible, NodeView, Shape, count_fits, domain_value, narrowest
from baton.services.gang.core.gangs import Cluster


@dataclass(frozen=True, slots=True)
class Plan:
    nodes: dict[str, str]  # pod key -> node name
    level: str  # label key of the one domain holding the gang ('' spans domains)
    domain: str  # that domain's label value
    domains: int  # narrowest-level domains used
    min_domains: int  # fewest narrowest-level domains that could hold it now


@dataclass(slots=True)
class Search:
    plan: Plan | None
    best: dict[str, int] = field(
        default_factory=dict
    )  # level ('' cluster) -> most members one domain takes
    eligible_nodes: int = 0
    # a gang of several shapes that found no plan: per shape, level -> most of its
    # members one domain takes ('' the cluster), for the verdict to name the short one
    by_shape: dict[Shape, dict[str, int]] = field(default_factory=dict)


def level_order(
    levels: tuple[str, ...], *, required: str, preferred: str
) -> tuple[list[int], bool]:
    """Level indexes to try, narrowest first, and whether spanning the cluster is allowed."""
    if required in levels:
        return list(range(len(levels) - 1, levels.index(required) - 1, -1)), False
    start = levels.index(preferred) if preferred in levels else len(levels) - 1
    return list(range(start, -1, -1)), True


def search(
    cluster: Cluster,
    members: dict[Shape, list[str]],
    *,
    required: str = "",
    preferred: str = "",
    excluded: frozenset[str] = frozenset(),
) -> Search:
    shapes = list(members)
    views = {s: cluster.eligible(s, excluded=excluded) for s in shapes}
    dominant = views[shapes[0]]
    levels = cluster.levels
    order, may_span = level_order(levels, required=required, preferred=preferred)
    result = Search(plan=None, eligible_nodes=dominant.eligible)
    need = len(members[shapes[0]])
    narrow = dominant.sums[-1] if levels else {}
    min_domains = _min_domains(narrow, dominant.loose(), need)
    for i in order:
        dom_sums = dominant.sums[i]
        result.best[levels[i]] = max(dom_sums.values(), default=0)
        fitting = [
            p
            for p in dom_sums
            if all(views[s].sums[i].get(p, 0) >= len(members[s]) for s in shapes)
        ]
        for path in sorted(fitting, key=lambda p: (dom_sums[p] - need, p)):
            inside = {s: views[s].members(i, path) for s in shapes}
            narrowest = i == len(levels) - 1
            if not narrowest:  # fewest racks: biggest first, best fit for the rest
                inside = {s: _rack_order(inside[s], len(members[s])) for s in shapes}
            nodes = _assign(members, inside, best_fit=narrowest)
            if nodes is not None:
                result.plan = _plan(
                    cluster,
                    nodes,
                    level=levels[i],
                    domain=domain_value(path),
                    min_domains=min_domains,
                )
                return result
    result.best[""] = dominant.total
    if may_span and all(views[s].total >= len(members[s]) for s in shapes):
        ordered = {s: _rack_order(views[s].all(), len(members[s])) for s in shapes}
        nodes = _assign(members, ordered, best_fit=False)
        if nodes is not None:
            result.plan = _plan(cluster, nodes, level="", domain="", min_domains=min_domains)
    if result.plan is None and len(shapes) > 1:
        for s in shapes:
            best = {levels[i]: max(views[s].sums[i].values(), default=0) for i in order}
            result.by_shape[s] = {**best, "": views[s].total}
    return result


def _min_domains(narrow: dict[str, int], loose: list[int], need: int) -> int:
    """Fewest narrowest-level domains (unlabelled nodes count alone) holding ``need``."""
    sizes = list(narrow.values()) + loose
    total = 0
    for used, size in enumerate(sorted(sizes, reverse=True), start=1):
        total += size
        if total >= need:
            return used
    return 0


def _rack_order(counts: Counts, need: int) -> Counts:
    """Nodes ordered so that taking them in order spans few narrowest-level domains:
    the domains a best fit over domain totals picks come first (the biggest until
    the rest fits in one, then the smallest that holds the rest), then the others."""
    by_domain: dict[str, Counts] = {}
    for item in counts:
        by_domain.setdefault(narrowest(item[0].paths, item[0].node.name), []).append(item)
    totals = sorted(((sum(n for _, n in v), p) for p, v in by_domain.items()))
    sizes = [t for t, _ in totals]
    chosen: list[str] = []
    while need > 0 and totals:
        i = bisect_left(sizes, need)
        if i < len(sizes):
            chosen.append(totals[i][1])
            del totals[i], sizes[i]
            break
        size, path = totals.pop()
        sizes.pop()
        chosen.append(path)
        need -= size
    order = chosen + [p for _, p in reversed(totals)]
    return [c for p in order for c in sorted(by_domain[p], key=lambda c: (-c[1], c[0].node.name))]


def _assign(
    members: dict[Shape, list[str]], counts: dict[Shape, Counts], *, best_fit: bool
) -> dict[str, str] | None:
    """Every member gets a node or None. Later shapes see what earlier ones took."""
    taken: dict[str, dict[str, int]] = {}
    out: dict[str, str] = {}
    for shape, keys in members.items():
        items = counts[shape]
        if taken:
            items = [(s, _count_after(s, shape, taken)) for s, _ in items]
            items = [(s, n) for s, n in items if n > 0]
        picks = _best_fit(items, len(keys)) if best_fit else _in_order(items, len(keys))
        if picks is None:
            return None
        it = iter(keys)
        for state, n in picks:
            use = taken.setdefault(state.node.name, {})
            for res, amount in shape.requests:
                use[res] = use.get(res, 0) + amount * n
            for _ in range(n):
                out[next(it)] = state.node.name
    return out


def _count_after(state: NodeView, shape: Shape, taken: dict[str, dict[str, int]]) -> int:
    use = taken.get(state.node.name)
    if not use:
        return count_fits(state.free, shape.requests)
    free = {r: state.free.get(r, 0) - use.get(r, 0) for r, _ in shape.requests}
    return count_fits(free, shape.requests)


def _best_fit(items: Counts, need: int) -> list[tuple[NodeView, int]] | None:
    """Smallest node that holds the rest, else the largest and repeat: few nodes, tight fit."""
    ordered = sorted(items, key=lambda c: (c[1], c[0].node.name))
    sizes = [n for _, n in ordered]
    picks: list[tuple[NodeView, int]] = []
    while need > 0 and ordered:
        i = bisect_left(sizes, need)
        if i < len(sizes):
            picks.append((ordered[i][0], need))
            return picks
        state, n = ordered.pop()
        sizes.pop()
        picks.append((state, n))
        need -= n
    return picks if need <= 0 else None


def _in_order(items: Counts, need: int) -> list[tuple[NodeView, int]] | None:
    picks: list[tuple[NodeView, int]] = []
    for state, n in items:
        if need <= 0:
            break
        picks.append((state, min(n, need)))
        need -= n
    return picks if need <= 0 else None


def plan(
    cluster: Cluster, nodes: dict[str, str], *, level: str, domain: str, min_domains: int
) -> Plan:
    """A plan of ``nodes`` (pod key -> node) held by the ``level`` domain ``domain``."""
    return _plan(cluster, nodes, level=level, domain=domain, min_domains=min_domains)


def _plan(
    cluster: Cluster, nodes: dict[str, str], *, level: str, domain: str, min_domains: int
) -> Plan:
    narrow: set[str] = set()
    for name in set(nodes.values()):
        narrow.add(narrowest(cluster.nodes[name].paths, name))
    return Plan(
        nodes=nodes, level=level, domain=domain, domains=len(narrow), min_domains=min_domains
    )


def reserve(
    cluster: Cluster,
    members: dict[Shape, list[str]],
    *,
    required: str = "",
    preferred: str = "",
) -> frozenset[str]:
    """Nodes the head gang will take once they are free: the domain (narrowest level
    first) that could hold it when empty and has the most room now, and in it the
    nodes with the most room now. Empty if it could never fit. Members are counted
    as the biggest shape that names a node type (GPUs...; a safe over-estimate), but
    for those asking only what every node has (cpu, memory: a launcher beside GPU
    workers), which fit beside them."""
    shape = next((s for s in members if names_node(s)), next(iter(members)))
    need = sum(len(k) for s, k in members.items() if s is shape or names_node(s))
    empty = cluster.eligible(shape, empty=True)
    now = cluster.eligible(shape)
    order, may_span = level_order(cluster.levels, required=required, preferred=preferred)
    for i in order:
        total, free = empty.sums[i], now.sums[i]
        fitting = [p for p, n in total.items() if n >= need]
        if fitting:
            path = min(fitting, key=lambda p: (-free.get(p, 0), total[p], p))
            return _soonest(empty.members(i, path), now, need)
    if may_span and empty.total >= need:
        return _soonest(empty.all(), now, need)
    return frozenset()


COMMON = frozenset({"cpu", "memory", "ephemeral-storage"})  # what every node has


def names_node(shape: Shape) -> bool:
    """The shape asks for a resource that names a node type (GPUs, RDMA...)."""
    return any(r not in COMMON for r, _ in shape.requests)


def _soonest(items: Counts, now: Eligible, need: int) -> frozenset[str]:
    out: list[str] = []
    ordered = sorted(items, key=lambda c: (-now.count(c[0].node.name), -c[1], c[0].node.name))
    for state, n in ordered:
        if need <= 0:
            break
        out.append(state.node.name)
        need -= n
    return frozenset(out)
