"""Why a gang does not fit, and what would make it fit ("12 more 8-GPU nodes in one block")."""

from __future__ import annotations

from baton.libs.view import Shape
from baton.proto.k8s import MAX_GANG_MEMBERS
from baton.proto.placement import GangUnschedulable, Need
from baton.services.gang.gangs import Cluster
from baton.services.gang.topology import Search

_COMMON = frozenset({"cpu", "memory", "ephemeral-storage"})


def verdict(
    cluster: Cluster,
    members: dict[Shape, list[str]],
    found: Search,
    *,
    gang: str,
    required: str,
    blocked_by: str,
    now: float,
) -> GangUnschedulable:
    """All members are counted as the biggest shape (the autoscaler's unit is a node)."""
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
            reason="no ready node matches the members' requests, selector, affinity, tolerations",
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
        reason=reason,
        need=Need(nodes=-(-missing // per_node), shape=node_shape, within=within),
        members=total,
        fits_when_free=when_free >= total,
        blocked_by=blocked_by,
    )


def _shape(resources: dict[str, int]) -> dict[str, int]:
    """The resources that name a node type (GPUs, RDMA...), or cpu/memory if only those."""
    special = {r: n for r, n in resources.items() if r not in _COMMON}
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
