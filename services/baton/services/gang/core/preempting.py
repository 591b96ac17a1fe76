"""Making room for a waiting gang: priority preemption and defragmentation.

Both take running gangs off whole (never some members), and only when that lets the
waiting gang start: the search is run with the victims' members taken off their
nodes, and a set that does not make the gang fit is never evicted.

- Priority preemption: gangs of lower priority (the highest pod priority of the
  gang), lowest priority first, then least work lost (GPUs x time run), then name.
- Defragmentation: enough GPUs are free in total but scattered (the seed case: 200
  free, a 160-GPU gang cannot start); gangs marked ``baton.io/preemptible: "true"``
  (PodGroup or pod) of no higher priority are moved (evicted, placed again wherever
  they fit) to free whole nodes, at most ``defrag_moves_per_hour`` gangs in any hour.
  Since free capacity covers the waiting gang in total, what the moved gangs need is
  still free (in total) once it has started.

A gang is taken off only after it has run ``preempt_min_run_s``, with
``preempt_grace_s`` for its pods to checkpoint. The victims are found greedily in that
order, then any whose removal turned out not to be needed is kept. The nodes the
waiting gang will use are nominated for it: nobody else is placed there while its
victims leave.
"""

from __future__ import annotations

from dataclasses import dataclass

from baton.proto import keys
from baton.proto.k8s import GPU
from baton.services.gang.core import ordering
from baton.services.gang.core.asks import place
from baton.services.gang.core.gangs import Ask, Cluster, Gang
from baton.services.gang.core.needs import shortfall

MAX_VICTIMS = 32  # candidates tried for one waiting gang (each try is one search)
HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class Room:
    victims: tuple[Gang, ...]
    nodes: frozenset[str]  # where the waiting gang will go once they have left
    why: str  # what the victims are told


@dataclass(frozen=True, slots=True)
class Limits:
    preemption: bool
    min_run_s: float
    moves_per_hour: int
    moved: tuple[float, ...]  # when gangs were moved to defragment (last hour counts)
    loans: bool = False  # gangs backfilled on reserved nodes (EASY) may be taken back


def make_room(
    cluster: Cluster, gang: Gang, ask: Ask, *, excluded: frozenset[str], limits: Limits, now: float
) -> Room | None:
    """Running gangs to take off so that ``gang`` (asking ``ask``) fits, or None (nothing
    will do). Tried with ``asks.place``, as the gang will be placed: an exclusive JobSet
    needs a domain freed for each of its Jobs, not only GPUs."""
    members = ask.members
    mine = ordering.priority(cluster, gang)
    running = [g for g in cluster.gangs.values() if _runs(g) and g.key != gang.key]
    if limits.preemption:
        lower = [
            g for g in running if priority(cluster, g) < mine and _ran(cluster, g, limits, now)
        ]
        found = _victims(cluster, ask, lower, excluded, now)
        if found is not None:
            victims, nodes = found
            why = f"preempted for {gang.key} (priority {mine})"
            return Room(victims=victims, nodes=nodes, why=why)
    if limits.loans:  # EASY backfill on a head's nodes is a loan: a head may take it back
        loaned = [g for g in running if g.backfilled and priority(cluster, g) <= mine]
        found = _victims(cluster, ask, loaned, excluded, now)
        if found is not None:
            victims, nodes = found
            why = f"backfilled on reserved nodes, taken back for {gang.key}"
            return Room(victims=victims, nodes=nodes, why=why)
    budget = limits.moves_per_hour - sum(1 for t in limits.moved if now - t < HOUR)
    if budget <= 0 or shortfall(members, cluster.free_totals(), floor={}):
        return None  # not scattered: short in total, or no moves left this hour
    movable = [
        g
        for g in running
        if preemptible(cluster, g)
        and priority(cluster, g) <= mine
        and _ran(cluster, g, limits, now)
    ]
    found = _victims(cluster, ask, movable, excluded, now)
    if found is None or len(found[0]) > budget:
        return None
    victims, nodes = found
    return Room(victims=victims, nodes=nodes, why=f"moved to defragment for {gang.key}")


def priority(cluster: Cluster, gang: Gang) -> int:
    """A running gang's priority: its highest member's."""
    pods = (cluster.pods[k] for k in gang.bound if k in cluster.pods)
    return max((p.priority for p in pods), default=0)


def preemptible(cluster: Cluster, gang: Gang) -> bool:
    if gang.group is not None and gang.group.annotations.get(keys.PREEMPTIBLE) == "true":
        return True
    return any(
        cluster.pods[k].annotations.get(keys.PREEMPTIBLE) == "true"
        for k in gang.bound
        if k in cluster.pods
    )


def work(cluster: Cluster, gang: Gang, now: float) -> float:
    """What taking the gang off loses: GPUs x seconds run (since its last checkpoint,
    as far as Baton knows: since it was placed)."""
    gpus = sum(cluster.pods[k].requests.get(GPU, 0) for k in gang.bound if k in cluster.pods)
    return max(gpus, 1) * max(now - _started(cluster, gang), 0.0)


def _runs(gang: Gang) -> bool:
    return bool(gang.bound) and not gang.restarting and gang.assumed is None and not gang.pending


def _ran(cluster: Cluster, gang: Gang, limits: Limits, now: float) -> bool:
    return now - _started(cluster, gang) >= limits.min_run_s


def _started(cluster: Cluster, gang: Gang) -> float:
    """When Baton placed it; for a gang placed before this core started, its pods'
    creation (an over-estimate of the time run: it may be preempted sooner)."""
    if gang.started:
        return gang.started
    pods = (cluster.pods[k] for k in gang.bound if k in cluster.pods)
    return min((p.created_at for p in pods), default=0.0)


def _victims(
    cluster: Cluster, ask: Ask, candidates: list[Gang], excluded: frozenset[str], now: float
) -> tuple[tuple[Gang, ...], frozenset[str]] | None:
    """Greedy: take candidates off in order until the gang fits, then put back those
    not needed. The cluster is left as it was."""
    if not candidates:
        return None
    order = sorted(candidates, key=lambda g: (priority(cluster, g), work(cluster, g, now), g.key))[
        :MAX_VICTIMS
    ]
    freed = cluster.free_totals()
    for g in order:
        for key in g.bound:
            for res, amount in cluster.accounted.get(key, ("", {}))[1].items():
                freed[res] = freed.get(res, 0) + amount
    if shortfall(ask.members, freed, floor={}):
        return None  # even all of them would not free enough
    taken: dict[str, list[tuple[str, str, dict[str, int]]]] = {}
    chosen: list[Gang] = []
    try:
        plan = None
        for g in order:
            taken[g.key] = _take_off(cluster, g)
            chosen.append(g)
            plan = place(cluster, ask, excluded=excluded).plan
            if plan is not None:
                break
        if plan is None:
            return None
        for g in reversed(chosen[:-1]):  # keep those it turns out we do not need
            _put_back(cluster, taken.pop(g.key))
            again = place(cluster, ask, excluded=excluded).plan
            if again is None:
                taken[g.key] = _take_off(cluster, g)
            else:
                chosen.remove(g)
                plan = again
        return tuple(chosen), frozenset(plan.nodes.values())
    finally:
        for held in taken.values():
            _put_back(cluster, held)


def _take_off(cluster: Cluster, gang: Gang) -> list[tuple[str, str, dict[str, int]]]:
    held = []
    for key in sorted(gang.bound):
        where = cluster.accounted.get(key)
        if where is not None:
            held.append((key, where[0], dict(where[1])))
            cluster.account(key, None, {})
    return held


def _put_back(cluster: Cluster, held: list[tuple[str, str, dict[str, int]]]) -> None:
    for key, node, requests in held:
        cluster.account(key, node, requests)
