"""The admission core's in-memory state: teams, nodes, gangs, per-team usage and queues.

The core owns it and changes it in place (the runner never steps an input twice,
``libs/baton/libs/runner/spec.py``). Nodes are the shared cluster view (``libs.view``), fed
nodes only: admission's gangs keep their own members, with what quota needs (GPUs,
phases, nodes), including pods seen before their PodGroup.
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from dataclasses import dataclass, field

from baton.libs.view import GangView, NodeView, View
from baton.libs.view.claimed import Claimed
from baton.libs.view.devices import class_of
from baton.libs.view.pools import owns
from baton.proto import keys
from baton.proto.actions import TeamStatus
from baton.proto.k8s import MachineDeployment, Node
from baton.services.admission.core.gangs import ACTIVE, Gang, Member, queue_key
from baton.services.admission.teams import DEFAULT, Team, TeamConfig, is_default

Entry = tuple[tuple[int, float, int, str], str]  # a gang in its team's queue: (queue_key, key)


def _nodes() -> View[GangView]:
    return View(levels=(), new_gang=GangView)


@dataclass(slots=True)
class State:
    config: TeamConfig = DEFAULT
    specs: dict[str, Team] = field(default_factory=dict)  # team name -> its config
    ns_team: dict[str, str] = field(default_factory=dict)
    pool_team: dict[str, str] = field(default_factory=dict)
    view: View[GangView] = field(default_factory=_nodes)  # the cluster's nodes
    claimed: Claimed = field(default_factory=Claimed)  # GPUs pods ask through DRA claims
    node_team: dict[str, str] = field(default_factory=dict)  # desired owner, '' = none
    counted: dict[str, str] = field(default_factory=dict)  # node -> team, by `nodes: N`
    counts: dict[str, int] = field(default_factory=dict)  # team -> nodes in `counted`
    contribution: dict[str, tuple[str, int]] = field(default_factory=dict)  # node -> team, GPUs
    asked: dict[str, str] = field(default_factory=dict)  # node -> team we last asked for
    capacity: dict[str, int] = field(default_factory=dict)  # team -> GPUs of its ready nodes
    used: dict[str, int] = field(default_factory=dict)  # team -> GPUs of its in-quota gangs
    lent: dict[str, int] = field(default_factory=dict)  # team -> GPUs of its borrowing gangs
    # team -> <class> devices resource -> what its admitted gangs' claims ask (``devices``)
    devices_used: dict[str, dict[str, int]] = field(default_factory=dict)
    gangs: dict[str, Gang] = field(default_factory=dict)
    arrivals: int = 0  # gangs seen so far: each new one's place among those of its second
    queues: dict[str, list[Entry]] = field(default_factory=dict)
    pending_pods: dict[str, dict[str, Member]] = field(default_factory=dict)  # gang key -> pods
    holders: dict[str, set[str]] = field(default_factory=dict)  # team -> gangs holding GPUs
    borrowers: set[str] = field(default_factory=set)  # gangs holding borrowed GPUs
    # Autoscaled pools (Cluster API MachineDeployments with min/max size): the GPUs each
    # team's pools can still add, counted as capacity (docs/admission.md, "Elastic pools")
    pools: dict[str, MachineDeployment] = field(default_factory=dict)  # by name
    pool_gpus: dict[str, int] = field(default_factory=dict)  # pool name -> GPUs a node
    growth: dict[str, int] = field(default_factory=dict)  # team -> GPUs its pools may add
    untold: set[str] = field(default_factory=set)  # queued, not yet told why they wait
    # Each team's queue less its hushed gangs: set aside or short of member pods, told
    # so, unchanged since. A walk goes through this (``queueing._serve``); a hushed gang
    # wakes when it changes (``wake``), when what it was told depends on changes, or at
    # its time-out (``wake_due``).
    loud: dict[str, list[Entry]] = field(default_factory=dict)
    hushed: dict[str, float] = field(default_factory=dict)  # gang -> until when
    hushed_until: list[tuple[float, str]] = field(default_factory=list)  # a heap of those
    # team -> its hushed gangs whose demand is known: told against the team's quota
    # (``queueing._aside``), woken when the quota or borrowing limit changes
    hushed_sized: dict[str, set[str]] = field(default_factory=dict)
    hushed_quota: dict[str, tuple[int, int]] = field(default_factory=dict)  # team -> as told
    hushed_shape: tuple[object, ...] = ()  # the largest node and the config, as told
    # team -> need -> how many known queued gangs need that many GPUs (the least need of
    # a team's queue at a glance; kept as gangs come, go and change)
    needs: dict[str, dict[int, int]] = field(default_factory=dict)
    # team -> priority -> its gangs holding GPUs within quota at that priority (counted
    # as gangs start and stop holding and change priority: ``least_priority``)
    ranks: dict[str, Counter[int]] = field(default_factory=dict)
    short: set[str] = field(default_factory=set)  # admitted PodGroups whose pods never all came
    paused: set[str] = field(default_factory=set)  # admitted gangs whose new members wait
    unplaced: set[str] = field(default_factory=set)  # admitted, no member bound yet (may be stale)
    largest: tuple[int, str] | None = None  # (GPUs, name) of the largest node shape; None: stale
    # Team objects (``showing``): the status last sent per team; inputs since then
    shown: dict[str, TeamStatus] = field(default_factory=dict)
    stale: bool = True

    @property
    def nodes(self) -> dict[str, NodeView]:
        return self.view.nodes

    def largest_node(self) -> tuple[int, str]:
        """The most GPUs one node has, and which (a known node, ready or not, or a new
        node of a pool, by its capacity annotations); (0, '') when none is known, or
        when an autoscaled pool's node shape is not (it may grow nodes of any size)."""
        if self.largest is None and self.unknown_pool():
            self.largest = (0, "")
        if self.largest is None:
            shapes = [(n.node.allocatable.get(keys.GPU, 0), f"node {name}")
                      for name, n in self.nodes.items()]  # fmt: skip
            shapes += [(md.capacity.get(keys.GPU, 0), f"a new node of pool {name}")
                       for name, md in self.pools.items() if md.capacity]  # fmt: skip
            self.largest = min(shapes, key=lambda s: (-s[0], s[1]), default=(0, ""))
        return self.largest

    def refit_largest(self, node: Node, *, gone: bool) -> None:
        """Keep ``largest_node`` as one node changes: found again (a pass over every node)
        only when the largest shrank or went, not on every node event (at 7,500 nodes
        under preflight, thousands a minute)."""
        if self.largest is None:
            return
        most, which = self.largest
        gpus, name = node.allocatable.get(keys.GPU, 0), f"node {node.name}"
        if not which or (name == which and (gone or gpus < most)):
            self.largest = None  # an unknown pool may be known now; or the largest went
        elif not gone and (-gpus, name) < (-most, which):
            self.largest = (gpus, name)

    def unknown_pool(self) -> bool:
        """An autoscaled pool whose node shape is unknown: no capacity annotations and
        no node of it seen (a pool scaled from zero)."""
        return any(
            md.max_size and not md.capacity and not self.pool_gpus.get(name)
            and not any(owns(md, n.node) for n in self.nodes.values())
            for name, md in self.pools.items()
        )  # fmt: skip

    # -- teams ----------------------------------------------------------------

    def team_of(self, namespace: str) -> str:
        if is_default(self.config):
            return self.config.teams[0].name
        return self.ns_team.get(namespace, "")

    def quota(self, team: str) -> int:
        spec = self.specs.get(team)
        if spec is None:
            return 0
        if spec.quota is not None:
            return spec.quota.gpus
        return self.capacity.get(team, 0) + self.growth.get(team, 0)

    def borrow_limit(self, team: str) -> int:
        spec = self.specs.get(team)
        return spec.borrow.gpus if spec is not None else 0

    def lenders(self, team: str) -> tuple[str, ...]:
        """Teams whose nodes ``team`` may run on when it borrows."""
        if self.borrow_limit(team) == 0:
            return ()
        return tuple(t.name for t in self.config.teams if t.lend and t.name != team)

    def total_capacity(self) -> int:
        return sum(self.capacity.values()) + sum(self.growth.values())

    def free(self) -> int:
        return self.total_capacity() - sum(self.used.values()) - sum(self.lent.values())

    def borrowed(self, team: str) -> int:
        return self.lent.get(team, 0)

    def lendable(self, team: str) -> int:
        """GPUs ``team`` could still borrow: idle lender quota minus what others borrowed."""
        idle = sum(
            max(0, self.quota(t.name) - self.used.get(t.name, 0))
            for t in self.config.teams
            if t.lend and t.name != team
        )
        taken = sum(self.borrowed(t.name) for t in self.config.teams if t.name != team)
        return max(0, idle - taken)

    def lendables(self) -> dict[str, int]:
        """``lendable`` of every team at once (one pass over the teams, not one each)."""
        idle = {
            t.name: max(0, self.quota(t.name) - self.used.get(t.name, 0))
            for t in self.config.teams
            if t.lend
        }
        borrowed = {t.name: self.borrowed(t.name) for t in self.config.teams}
        all_idle, all_taken = sum(idle.values()), sum(borrowed.values())
        return {
            t.name: max(0, all_idle - idle.get(t.name, 0) - (all_taken - borrowed[t.name]))
            for t in self.config.teams
        }

    def ceiling(self, team: str) -> int:
        """The largest gang a team could ever run: one runs either within its quota on
        the team's nodes, or wholly on GPUs borrowed from other teams."""
        return max(self.quota(team), self.borrow_limit(team))

    def fixed_ceiling(self, team: str) -> bool:
        """Whether ``ceiling`` is set by the config: a quota that follows the team's
        nodes (none set) moves as nodes join, pass their preflight, or go NotReady; on a
        new cluster it is 0 until the first is counted. A gang over it waits (set aside,
        woken as it grows); only a set quota is a "never"."""
        spec = self.specs.get(team)
        return spec is None or spec.quota is not None

    def room(self, team: str) -> int:
        """GPUs free on the team's nodes for its in-quota gangs: its capacity less its
        in-quota gangs and what other teams' borrowing gangs take there (``on_team``)."""
        borrowing = (self.gangs[k] for k in self.borrowers if k in self.gangs)
        taken = sum(on_team(self, g, team) for g in borrowing if g.team != team)
        return (
            self.capacity.get(team, 0) + self.growth.get(team, 0) - self.used.get(team, 0) - taken
        )

    # -- queues ---------------------------------------------------------------

    def enqueue(self, gang: Gang) -> int:
        """Put ``gang`` in its team's queue, in order."""
        if gang.qkey is not None:
            self.dequeue(gang)
        queue = self.queues.setdefault(gang.team, [])
        self.untold.add(gang.key)
        gang.qkey = queue_key(gang)
        self.renew(gang)
        entry = (gang.qkey, gang.key)
        position = bisect.bisect_left(queue, entry)
        queue.insert(position, entry)
        bisect.insort(self.loud.setdefault(gang.team, []), entry)
        return position

    def dequeue(self, gang: Gang) -> None:
        self.untold.discard(gang.key)
        self._count(gang, -1)
        gang.qneed = None
        if gang.qkey is None:
            return
        entry = (gang.qkey, gang.key)
        _remove(self.queues.setdefault(gang.team, []), entry)
        _remove(self.loud.get(gang.team, []), entry)
        self._unhush(gang)
        gang.qkey = None

    def hush(self, gang: Gang, until: float) -> None:
        """Leave a queued gang out of walks: it was told why it waits, and that holds
        until it changes (``wake``), what it was told depends on changes, or ``until``
        (``wake_due``)."""
        assert gang.qkey is not None, gang.key  # a walk hushes only queued gangs
        _remove(self.loud.get(gang.team, []), (gang.qkey, gang.key))
        self.hushed[gang.key] = until
        if gang.known:
            self.hushed_sized.setdefault(gang.team, set()).add(gang.key)
        if until != float("inf"):
            heapq.heappush(self.hushed_until, (until, gang.key))

    def _unhush(self, gang: Gang) -> bool:
        self.hushed_sized.get(gang.team, set()).discard(gang.key)
        return self.hushed.pop(gang.key, None) is not None

    def wake(self, gang: Gang) -> None:
        """A hushed gang goes back into its team's walks."""
        if self._unhush(gang) and gang.qkey is not None:
            bisect.insort(self.loud.setdefault(gang.team, []), (gang.qkey, gang.key))

    def wake_due(self, team: str, now: float) -> None:
        """Wake the hushed gangs whose time-out has come; every hushed gang when the
        largest node or the config changed; the team's hushed gangs of known demand when
        its quota or borrowing limit changed (a node joining a team without a set quota
        changes it: the others are told the same whatever its quota)."""
        shape = (self.largest_node(), self.config)
        quota = (self.quota(team), self.borrow_limit(team))
        while self.hushed_until and self.hushed_until[0][0] <= now:
            _, key = heapq.heappop(self.hushed_until)
            if self.hushed.get(key, float("inf")) <= now:
                self.wake(self.gangs[key])
        if shape != self.hushed_shape:
            self.hushed_shape = shape
            for key in list(self.hushed):
                self.wake(self.gangs[key])
        if quota != self.hushed_quota.get(team):
            self.hushed_quota[team] = quota
            for key in list(self.hushed_sized.get(team, ())):
                self.wake(self.gangs[key])

    def wake_all(self) -> None:
        """Every queued gang back in the walks (as if none had ever been hushed)."""
        self.hushed.clear()
        self.hushed_until.clear()
        self.hushed_sized.clear()
        self.hushed_quota.clear()
        self.hushed_shape = ()
        self.loud = {team: list(queue) for team, queue in self.queues.items()}

    def renew(self, gang: Gang) -> None:
        """Count a queued gang's demand as it is now (after it changed) in ``needs``."""
        need = gang.gpus if gang.qkey is not None and gang.known else None
        if need != gang.qneed:
            self._count(gang, -1)
            gang.qneed = need
            self._count(gang, 1)

    def _count(self, gang: Gang, by: int) -> None:
        if gang.qneed is None:
            return
        needs = self.needs.setdefault(gang.team, {})
        left = needs.get(gang.qneed, 0) + by
        if left:
            needs[gang.qneed] = left
        else:
            del needs[gang.qneed]

    def least_need(self, team: str) -> int:
        """The least GPUs a known gang in the team's queue needs; a very large number
        when there is none."""
        needs = self.needs.get(team)
        return min(needs) if needs else 1 << 62

    def least_priority(self, team: str) -> int:
        """The lowest priority of the team's gangs holding GPUs within its quota; a very
        large number when there is none. Read from counts kept per priority: recounting
        every holder (on each change, then on each release of one at the floor) was
        most of admission's time at 7,500 nodes."""
        return min(self.ranks.get(team, ()), default=1 << 62)

    def rank(self, gang: Gang, *, holds: bool) -> None:
        """Count the gang at its priority while it holds GPUs within quota, and only then."""
        counts = self.ranks.setdefault(gang.team, Counter())
        if gang.ranked is not None:
            counts[gang.ranked] -= 1
            if counts[gang.ranked] <= 0:
                del counts[gang.ranked]
        gang.ranked = gang.priority if holds else None
        if gang.ranked is not None:
            counts[gang.ranked] += 1

    def position(self, gang: Gang) -> int:
        queue = self.queues.get(gang.team, [])
        return bisect.bisect_left(queue, (gang.qkey, gang.key)) if gang.qkey else len(queue)

    def holding(self, team: str | None = None) -> list[Gang]:
        """Gangs holding GPUs (of one team, or of every team)."""
        teams = [team] if team is not None else list(self.holders)
        return [self.gangs[k] for t in teams for k in self.holders.get(t, ()) if k in self.gangs]

    def over_devices(self, gang: Gang) -> str:
        """Why the gang, with all it asks now, would take its team past a cap of
        ``devices`` ("" if it would not); what it holds already is its own."""
        spec = self.specs.get(gang.team)
        caps = spec.devices if spec is not None else {}
        if not caps:
            return ""
        used = self.devices_used.get(gang.team, {})
        for resource, need in sorted(gang.devices.items()):
            cls = class_of(resource)
            others = used.get(resource, 0) - gang.held_devices.get(resource, 0)
            if cls in caps and others + need > caps[cls]:
                return (
                    f"team {gang.team!r} holds {others} of its {caps[cls]} {cls} devices "
                    f"for other gangs; the gang's claims ask {need} (teams[].devices caps "
                    "are not borrowed past)"
                )
        return ""

    def hold(
        self, gang: Gang, gpus: int, *, borrowing: bool | None = None,
        devices: dict[str, int] | None = None,
    ) -> None:  # fmt: skip
        """Count ``gpus`` against the gang's team (replacing what it held): against its
        quota, or as borrowed (``borrowing``; None: as before); and ``devices`` (its
        claims' other devices, by class resource; None: none) against its caps."""
        used = self.devices_used.setdefault(gang.team, {})
        for resource, count in gang.held_devices.items():
            used[resource] = used.get(resource, 0) - count
        gang.held_devices = dict(devices or {})
        for resource, count in gang.held_devices.items():
            used[resource] = used.get(resource, 0) + count
        if gang.held:
            was = self.lent if gang.borrowed else self.used
            was[gang.team] -= gang.held
        borrowing = gang.borrowed > 0 if borrowing is None else borrowing
        if gpus:
            now = self.lent if borrowing else self.used
            now[gang.team] = now.get(gang.team, 0) + gpus
        gang.held, gang.borrowed = gpus, gpus if borrowing else 0
        (self.borrowers.add if gang.borrowed else self.borrowers.discard)(gang.key)
        self.rank(gang, holds=gpus > 0 and not borrowing)
        holders = self.holders.setdefault(gang.team, set())
        if gpus > 0:
            holders.add(gang.key)
            if not gang.complete and gang.kind == "PodGroup":
                self.short.add(gang.key)
        else:
            holders.discard(gang.key)
            self.short.discard(gang.key)


def on_team(state: State, gang: Gang, team: str) -> int:
    """GPUs a borrowing ``gang`` takes (or may take) on ``team``'s nodes: its members
    bound there, plus what it has not placed yet if ``team`` lends to it."""
    here = placed = 0
    for m in gang.members.values():
        if m.node and m.phase in ACTIVE:
            placed += m.gpus
            if state.node_team.get(m.node) == team:
                here += m.gpus
    if placed < gang.held and team in state.lenders(gang.team):
        here += gang.held - placed
    return here


def node_gpus(node: NodeView) -> int:
    """GPUs a node contributes to capacity: schedulable and ready only."""
    return node.node.allocatable.get(keys.GPU, 0) if node.schedulable else 0


def recount_growth(state: State, owner: str | None) -> None:
    """What each team's autoscaled pools may still add: (max size - ready machines) x GPUs
    a node, for the pool's owner (``owner``: the one team of the default config, else
    the team owning the pool by name; a pool no team owns adds to nobody)."""
    growth: dict[str, int] = {}
    for name, md in state.pools.items():
        if md.min_size is None or md.max_size is None:
            continue  # not autoscaled: its nodes are all it will have
        gpus = md.capacity.get(keys.GPU) or state.pool_gpus.get(name, 0)
        team = owner if owner is not None else state.pool_team.get(name, "")
        room = max(0, md.max_size - md.ready_replicas) * gpus
        if team and room:
            growth[team] = growth.get(team, 0) + room
    state.growth = growth


def _remove(entries: list[Entry], entry: Entry) -> None:
    """Take ``entry`` out of a sorted list of queue entries, if it is there."""
    i = bisect.bisect_left(entries, entry)
    if i < len(entries) and entries[i] == entry:
        del entries[i]
