"""Why a gang does not fit, and what would make it fit ("12 more 8-GPU nodes in one block")."""

from __future__ import annotations

from baton.libs.view import Shape, refusals
from baton.proto.k8s import MAX_GANG_MEMBERS
from baton.proto.placement import GangUnschedulable, Need
from baton.services.gang.core.gangs import Cluster
from baton.services.gang.core.topology import COMMON, Search


def verdict(
    cluster: Cluster,
    members: dict[Shape, list[str]],
    found: Search,
    *,
    gang: str,
    required: str,
    blocked_by: str,
    now: float,
    memo: Memo | None = None,
) -> GangUnschedulable:
    """Why ``members`` (a gang's quorum) found no plan. A gang of one shape counts its
    members in nodes of that shape (the autoscaler's unit is a node); a gang of several
    (a launcher and workers) is counted shape by shape and names the one that is short."""
    if len(members) > 1 and found.by_shape:
        return _mixed(cluster, members, found, gang=gang, required=required,
                      blocked_by=blocked_by, now=now, memo=memo)  # fmt: skip
    shape = next(iter(members))
    total = sum(len(k) for k in members.values())
    within = required if required in cluster.levels else ""
    fits_now = found.best.get(within, 0) if within else found.best.get("", 0)
    empty = cluster.eligible(shape, empty=True)
    if not empty.eligible:
        request = _shape(dict(shape.requests))
        return GangUnschedulable(
            gang=gang,
            at=now,
            reason=f"no node takes a member: {_no_node(cluster, shape, memo)}",
            need=Need(nodes=total, shape=request, within=within),
            members=total,
        )
    per_node, best = max((n, name) for name, n in empty.tally.n.items())
    best_node = cluster.nodes[best]
    node_shape = _shape({r: best_node.node.allocatable.get(r, 0) for r, _ in shape.requests})
    if within:
        when_free = max(empty.sums[cluster.levels.index(within)].values(), default=0)
    else:
        when_free = empty.total
    missing = max(total - fits_now, 0)
    where = f" in one {within}" if within else ""
    if blocked_by:
        reason = f"{fits_now} of {total} members fit outside the nodes reserved for {blocked_by}"
    else:
        reason = f"{fits_now} of {total} members fit{where}"
    return GangUnschedulable(
        gang=gang,
        at=now,
        reason=reason + _counts(cluster, shape, memo),
        need=Need(nodes=-(-missing // per_node), shape=node_shape, within=within),
        members=total,
        fits_when_free=when_free >= total,
        blocked_by=blocked_by,
    )


def _mixed(
    cluster: Cluster,
    members: dict[Shape, list[str]],
    found: Search,
    *,
    gang: str,
    required: str,
    blocked_by: str,
    now: float,
    memo: Memo | None = None,
) -> GangUnschedulable:
    total = sum(len(k) for k in members.values())
    within = required if required in cluster.levels else ""
    fits, short = 0, None
    for shape, names in members.items():  # biggest first: the first short one is named
        empty = cluster.eligible(shape, empty=True)
        if not empty.eligible:
            return GangUnschedulable(
                gang=gang, at=now, members=total,
                reason=(f"no node takes the {len(names)} members asking {text(shape)}: "
                        f"{_no_node(cluster, shape, memo)}"),
                need=Need(nodes=len(names), shape=_shape(dict(shape.requests)), within=within),
            )  # fmt: skip
        best = found.by_shape.get(shape, {}).get(within, 0)
        fits += min(best, len(names))
        if best < len(names) and short is None:
            short = (shape, len(names), best)
    where = f" outside the nodes reserved for {blocked_by}" if blocked_by else (
        f" in one {within}" if within else "")  # fmt: skip
    if short is None:  # each shape fits on its own, not all of them together
        shape, missing = next(iter(members)), 1
        reason = f"{total} members fit{where} shape by shape, not all together"
    else:
        shape, count, best = short
        missing = count - best
        reason = f"{fits} of {total} members fit{where}: {best} of the {count} asking {text(shape)}"
        reason += _counts(cluster, shape, memo)
    empty = cluster.eligible(shape, empty=True)
    per_node, name = max((n, name) for name, n in empty.tally.n.items())
    node = cluster.nodes[name].node
    return GangUnschedulable(
        gang=gang, at=now, reason=reason, members=total, blocked_by=blocked_by,
        need=Need(nodes=-(-missing // per_node), within=within,
                  shape=_shape({r: node.allocatable.get(r, 0) for r, _ in shape.requests})),
        fits_when_free=all(_when_free(cluster, s, within) >= len(k) for s, k in members.items()),
    )  # fmt: skip


def beyond_quorum(
    cluster: Cluster,
    extras: dict[Shape, list[str]],
    *,
    gang: str,
    running: int,
    quorum: int,
    required: str,
    now: float,
) -> GangUnschedulable:
    """Why members of a running gang (beyond its quorum, or joining it) wait: no room
    for them now (in its domain of ``required``), and how many nodes would hold them."""
    left = sum(len(k) for k in extras.values())
    shape, names = next(iter(extras.items()))  # the biggest shape waiting
    within = required if required in cluster.levels else ""
    where = f" in its {within.rpartition('/')[2]}" if within else ""
    reason = f"{running} members run (minMember {quorum}); {left} more wait for room{where}"
    empty = cluster.eligible(shape, empty=True)
    if not empty.eligible:
        reason += f": no node takes them: {refusals(cluster, shape, empty=True).text(shape)}"
        need = Need(nodes=len(names), shape=_shape(dict(shape.requests)), within=within)
        return GangUnschedulable(gang=gang, at=now, reason=reason, need=need, members=left)
    per_node, name = max((n, name) for name, n in empty.tally.n.items())
    node = cluster.nodes[name].node
    return GangUnschedulable(
        gang=gang, at=now, reason=reason, members=left,
        need=Need(nodes=-(-len(names) // per_node), within=within,
                  shape=_shape({r: node.allocatable.get(r, 0) for r, _ in shape.requests})),
        fits_when_free=_when_free(cluster, shape, within) - running >= len(names),
    )  # fmt: skip


# A cycle's node counts by shape (``_counts``, ``_no_node``): each is a pass over every
# node, the same for every gang of the shape until a placement changes the cluster.
Memo = dict[tuple[Shape, bool], str]


def _counts(cluster: Cluster, shape: Shape, memo: Memo | None = None) -> str:
    """``; 2/16 nodes are available: 9 node(s) didn't match ...``: the nodes refused
    by reason, when more than room refuses some (a taint, selector, affinity, a node
    down); '' when room alone is short (then the need says it). Every node taking a
    member when empty (the kept count) means none is refused by more than room: the
    pass over the nodes is skipped."""
    if cluster.eligible(shape, empty=True).eligible == len(cluster.nodes):
        return ""
    if memo is not None and (shape, False) in memo:
        return memo[shape, False]
    found = refusals(cluster, shape)
    said = f"; {found.text(shape)}" if found.constrained else ""
    if memo is not None:
        memo[shape, False] = said
    return said


def _no_node(cluster: Cluster, shape: Shape, memo: Memo | None = None) -> str:
    """Why no node takes a member of ``shape`` even empty, by reason."""
    if memo is not None and (shape, True) in memo:
        return memo[shape, True]
    said = refusals(cluster, shape, empty=True).text(shape)
    if memo is not None:
        memo[shape, True] = said
    return said


def _when_free(cluster: Cluster, shape: Shape, within: str) -> int:
    """Most members of ``shape`` one domain of ``within`` (or the cluster) takes when empty."""
    empty = cluster.eligible(shape, empty=True)
    if within:
        return max(empty.sums[cluster.levels.index(within)].values(), default=0)
    return empty.total


def text(shape: Shape) -> str:
    """``8 nvidia.com/gpu``: what a shape asks that names a node type (cpu in millicores)."""
    asked = _shape(dict(shape.requests))
    if not asked:
        return "no resources"
    return ", ".join(f"{n}m cpu" if r == "cpu" else f"{n} {r}" for r, n in sorted(asked.items()))


def _shape(resources: dict[str, int]) -> dict[str, int]:
    """The resources that name a node type (GPUs, RDMA...), or cpu/memory if only those."""
    special = {r: n for r, n in resources.items() if r not in COMMON}
    return special or resources


def identity(event: GangUnschedulable) -> tuple[object, ...]:
    """What must change for the verdict to be published again."""
    need = event.need
    return (
        event.reason,
        need.nodes,
        tuple(sorted(need.shape.items())),
        need.within,
        event.fits_when_free,
        event.blocked_by,
    )


def unknown_level(
    gang: str, members: dict[Shape, list[str]], required: str, levels: tuple[str, ...], now: float
) -> GangUnschedulable:
    """The gang must fit in one domain of a label key that is not a topology level of the
    search: it is never placed rather than placed ignoring its constraint."""
    total = sum(len(k) for k in members.values())
    return GangUnschedulable(
        gang=gang,
        at=now,
        reason=(
            f"topology key {required!r} is not one of the gang service's topology levels "
            f"({', '.join(levels)}); ask your platform team to add it to "
            "BATON_GANG_TOPOLOGY_KEYS, or use one of those keys"
        ),
        need=Need(nodes=0),
        members=total,
    )


def too_large(gang: str, members: int, now: float) -> GangUnschedulable:
    """More members than one bind may name (``MAX_GANG_MEMBERS``, the actuator's limit):
    never placed, since the actuator would refuse the bind, every cycle."""
    return GangUnschedulable(
        gang=gang,
        at=now,
        reason=(
            f"{members} members to place, more than the {MAX_GANG_MEMBERS} one bind may name "
            f"(a gang is bound in one all-or-nothing action); split the job into gangs of at "
            f"most {MAX_GANG_MEMBERS} pods"
        ),
        need=Need(nodes=0),
        members=members,
    )


def shortfall(
    members: dict[Shape, list[str]], free: dict[str, int], *, floor: dict[str, int]
) -> dict[str, int]:
    """What free capacity lacks for the gang: its members' requests summed, or the
    PodGroup's ``minResources`` where that is more (scheduler-plugins' PreFilter check);
    {} when the totals allow it (placement may still fail on fit or topology)."""
    need = dict(floor)
    asked: dict[str, int] = {}
    for shape, names in members.items():
        for res, amount in shape.requests:
            asked[res] = asked.get(res, 0) + amount * len(names)
    for res, amount in asked.items():
        need[res] = max(need.get(res, 0), amount)
    return {r: n - free.get(r, 0) for r, n in need.items() if free.get(r, 0) < n}
