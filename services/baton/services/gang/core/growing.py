"""Members beyond a gang's quorum, and members that join a running gang.

minMember is a quorum, as in scheduler-plugins' coscheduling (a group's pods are
permitted once minMember of them are assigned) and Volcano (a job is ready at
minAvailable): a gang starts when its quorum fits together, all or none
(``core.cycle``). Its other members are placed once every waiting gang's quorum had
its turn in the cycle: in the same bind when room is left, later as room appears. They
never reserve nodes, never make room by preemption and never take nodes held for
another gang; they stay in the gang's domain of its required level, near its other
members first.
"""

from __future__ import annotations

from collections.abc import Collection

from baton.libs.view import Shape, count_fits, domain_value, group_by_shape, narrowest
from baton.services.gang.core import ordering
from baton.services.gang.core.gangs import Ask, Cluster, Gang
from baton.services.gang.core.topology import Plan, Search, plan, search


def pending(cluster: Cluster, gang: Gang) -> dict[Shape, list[str]]:
    """A running gang's pending members by shape (where admission put the gang)."""
    return group_by_shape(ordering.members(cluster, gang))


def running_on(cluster: Cluster, gang: Gang) -> set[str]:
    """The nodes of a running gang's bound members."""
    pods = cluster.pods
    return {pods[k].node_name for k in gang.bound if k in pods and pods[k].node_name}


def where_all_fit(cluster: Cluster, asked: Ask, *, excluded: frozenset[str]) -> Search | None:
    """The quorum's part of a plan for every pending member, when all fit now: the gang
    starts in a domain that also holds the members beyond its quorum (they follow once
    every waiting gang's quorum had its turn). None when they do not all fit."""
    merged = {s: list(k) for s, k in asked.members.items()}
    for shape, names in asked.extras.items():
        merged[shape] = sorted(merged.get(shape, []) + names)
    everyone = {s: merged[s] for s in sorted(merged, key=lambda s: (s.size, repr(s)))}
    found = search(cluster, everyone, required=asked.required, preferred=asked.preferred,
                   excluded=excluded)  # fmt: skip
    if found.plan is None:
        return None
    quorum = {k for names in asked.members.values() for k in names}
    nodes = {k: n for k, n in found.plan.nodes.items() if k in quorum}
    kept = plan(cluster, nodes, level=found.plan.level, domain=found.plan.domain,
                min_domains=found.plan.min_domains)  # fmt: skip
    return Search(plan=kept, best=found.best, eligible_nodes=found.eligible_nodes)


def fill(
    cluster: Cluster,
    extras: dict[Shape, list[str]],
    *,
    nodes: Collection[str],
    required: str,
    excluded: frozenset[str],
) -> dict[str, str]:
    """As many of ``extras`` as fit now (smallest shape first, each member alone), in
    the ``required`` domain of the gang's ``nodes``, on the narrowest domains it already
    uses first, then on the nodes with the most room. Pod key -> node."""
    within = _within(cluster, nodes, required)
    if within is None:
        return {}
    racks = {narrowest(cluster.nodes[n].paths, n) for n in nodes if n in cluster.nodes}
    taken: dict[str, dict[str, int]] = {}
    out: dict[str, str] = {}
    for shape in sorted(extras, key=lambda s: (s.size, repr(s)), reverse=True):
        view = cluster.eligible(shape, excluded=excluded)
        if view.total <= 0:
            continue
        items = view.members(*within) if within[0] >= 0 else view.all()
        counted = [(state, _count(state.free, shape, taken.get(state.name))) for state, _ in items]
        counted.sort(key=lambda c: (narrowest(c[0].paths, c[0].name) not in racks, -c[1],
                                    c[0].name))  # fmt: skip
        names = iter(extras[shape])
        need = len(extras[shape])
        for state, n in counted:
            if need <= 0:
                break
            if n <= 0:
                continue
            k = min(n, need)
            use = taken.setdefault(state.name, {})
            for res, amount in shape.requests:
                use[res] = use.get(res, 0) + amount * k
            for _ in range(k):
                out[next(names)] = state.name
            racks.add(narrowest(state.paths, state.name))
            need -= k
    return out


def widened(cluster: Cluster, started: Plan, extra: dict[str, str]) -> Plan:
    """The quorum's plan with the members placed beside it; the domain it names is kept
    only while it still holds every member."""
    nodes = {**started.nodes, **extra}
    level, domain = started.level, started.domain
    if level:
        i = cluster.levels.index(level)
        path = cluster.nodes[next(iter(started.nodes.values()))].paths[i]
        if any(cluster.nodes[n].paths[i] != path for n in extra.values()):
            level, domain = "", ""
    return plan(cluster, nodes, level=level, domain=domain, min_domains=started.min_domains)


def joining(cluster: Cluster, placed: dict[str, str], *, required: str) -> Plan:
    """The plan of members placed beside a running gang (in its ``required`` domain)."""
    level, domain = "", ""
    if required in cluster.levels:
        path = cluster.nodes[next(iter(placed.values()))].paths[cluster.levels.index(required)]
        level, domain = required, domain_value(path or "")
    return plan(cluster, placed, level=level, domain=domain, min_domains=0)


def _within(cluster: Cluster, nodes: Collection[str], required: str) -> tuple[int, str] | None:
    """(level index, domain path) the members must go in; (-1, '') anywhere; None when
    the gang's nodes are not in one known domain of the required level."""
    if required not in cluster.levels:
        return -1, ""
    i = cluster.levels.index(required)
    paths = {cluster.nodes[n].paths[i] for n in nodes if n in cluster.nodes}
    if len(paths) != 1:
        return None
    (path,) = paths
    return None if path is None else (i, path)


def _count(free: dict[str, int], shape: Shape, use: dict[str, int] | None) -> int:
    if use:
        free = {r: free.get(r, 0) - use.get(r, 0) for r, _ in shape.requests}
    return count_fits(free, shape.requests)
