"""The admission core's in-memory state: teams, nodes, gangs, per-team usage and queues.

Copy on write: ``step`` never changes the state it is given. It works on ``fork()``, a
draft that shares every container with its parent and copies one (a top-level dict, a
team's queue, a gang) the first time the draft changes it, through the ``w_*`` and
``edit`` accessors. So a caller that drops a step's outputs (a failed publish) and
steps again from the old state gets the same decisions again, at the cost of copying
only what the event touched.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace
from typing import Any, cast

from proto.k8s import GPU, Node
from services.admission.core.gangs import ACTIVE, Gang, Member, queue_key
from services.admission.teams import DEFAULT, Team, TeamConfig, is_default


@dataclass(slots=True)
class State:
    config: TeamConfig = DEFAULT
    specs: dict[str, Team] = field(default_factory=dict)  # team name -> its config
    ns_team: dict[str, str] = field(default_factory=dict)
    pool_team: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    node_team: dict[str, str] = field(default_factory=dict)  # desired owner, '' = none
    counted: dict[str, str] = field(default_factory=dict)  # node -> team, by `nodes: N`
    counts: dict[str, int] = field(default_factory=dict)  # team -> nodes in `counted`
    contribution: dict[str, tuple[str, int]] = field(default_factory=dict)  # node -> team, GPUs
    asked: dict[str, str] = field(default_factory=dict)  # node -> team we last asked for
    capacity: dict[str, int] = field(default_factory=dict)  # team -> GPUs of its ready nodes
    used: dict[str, int] = field(default_factory=dict)  # team -> GPUs of its in-quota gangs
    lent: dict[str, int] = field(default_factory=dict)  # team -> GPUs of its borrowing gangs
    gangs: dict[str, Gang] = field(default_factory=dict)
    queues: dict[str, list[tuple[tuple[int, float, str], str]]] = field(default_factory=dict)
    pending_pods: dict[str, dict[str, Member]] = field(default_factory=dict)  # gang key -> pods
    holders: dict[str, set[str]] = field(default_factory=dict)  # team -> gangs holding GPUs
    # what this draft has copied already (see ``fork``); not part of the value
    _own: set[str] = field(default_factory=set, compare=False, repr=False)
    _own_gangs: set[str] = field(default_factory=set, compare=False, repr=False)
    _own_members: set[str] = field(default_factory=set, compare=False, repr=False)
    _own_queues: set[str] = field(default_factory=set, compare=False, repr=False)
    _own_holders: set[str] = field(default_factory=set, compare=False, repr=False)
    _own_pending: set[str] = field(default_factory=set, compare=False, repr=False)

    # -- copy on write --------------------------------------------------------

    def fork(self) -> State:
        """A draft sharing everything with this state, which the draft never changes."""
        return replace(
            self,
            _own=set(),
            _own_gangs=set(),
            _own_members=set(),
            _own_queues=set(),
            _own_holders=set(),
            _own_pending=set(),
        )

    def _mut(self, name: str) -> Any:
        if name not in self._own:
            setattr(self, name, getattr(self, name).copy())
            self._own.add(name)
        return getattr(self, name)

    def w_nodes(self) -> dict[str, Node]:
        return cast(dict[str, Node], self._mut("nodes"))

    def w_str(self, name: str) -> dict[str, str]:
        """``node_team``, ``counted`` or ``asked``, writable."""
        return cast(dict[str, str], self._mut(name))

    def w_int(self, name: str) -> dict[str, int]:
        """``counts``, ``capacity`` or ``used``, writable."""
        return cast(dict[str, int], self._mut(name))

    def w_contribution(self) -> dict[str, tuple[str, int]]:
        return cast(dict[str, tuple[str, int]], self._mut("contribution"))

    def w_gangs(self) -> dict[str, Gang]:
        return cast(dict[str, Gang], self._mut("gangs"))

    def edit(self, key: str) -> Gang:
        """The gang ``key``, writable (its members are not: see ``w_members``)."""
        gang = self.gangs[key]
        if key not in self._own_gangs:
            gang = gang.copy()
            self.w_gangs()[key] = gang
            self._own_gangs.add(key)
        return gang

    def add_gang(self, gang: Gang) -> None:
        self.w_gangs()[gang.key] = gang
        self._own_gangs.add(gang.key)
        self._own_members.add(gang.key)

    def drop_gang(self, key: str) -> None:
        del self.w_gangs()[key]

    def w_members(self, key: str) -> dict[str, Member]:
        gang = self.edit(key)
        if key not in self._own_members:
            gang.members = dict(gang.members)
            self._own_members.add(key)
        return gang.members

    def w_pending(self, key: str) -> dict[str, Member]:
        """Pods seen before their PodGroup, writable (created when missing)."""
        pending = cast(dict[str, dict[str, Member]], self._mut("pending_pods"))
        if key not in self._own_pending:
            pending[key] = dict(pending.get(key, {}))
            self._own_pending.add(key)
        return pending[key]

    def take_pending(self, key: str) -> dict[str, Member]:
        if key not in self.pending_pods:
            return {}
        return cast(dict[str, dict[str, Member]], self._mut("pending_pods")).pop(key)

    def _w_queue(self, team: str) -> list[tuple[tuple[int, float, str], str]]:
        queues = cast(dict[str, list[tuple[tuple[int, float, str], str]]], self._mut("queues"))
        if team not in self._own_queues:
            queues[team] = list(queues.get(team, ()))
            self._own_queues.add(team)
        return queues[team]

    def _w_holders(self, team: str) -> set[str]:
        holders = cast(dict[str, set[str]], self._mut("holders"))
        if team not in self._own_holders:
            holders[team] = set(holders.get(team, ()))
            self._own_holders.add(team)
        return holders[team]

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
        return self.capacity.get(team, 0)

    def borrow_limit(self, team: str) -> int:
        spec = self.specs.get(team)
        return spec.borrow.gpus if spec is not None else 0

    def lenders(self, team: str) -> tuple[str, ...]:
        """Teams whose nodes ``team`` may run on when it borrows."""
        if self.borrow_limit(team) == 0:
            return ()
        return tuple(t.name for t in self.config.teams if t.lend and t.name != team)

    def total_capacity(self) -> int:
        return sum(self.capacity.values())

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

    def ceiling(self, team: str) -> int:
        """The largest gang a team could ever run: one runs either within its quota on
        the team's nodes, or wholly on GPUs borrowed from other teams."""
        return max(self.quota(team), self.borrow_limit(team))

    def room(self, team: str) -> int:
        """GPUs free on the team's nodes for its in-quota gangs: its capacity less its
        in-quota gangs and what other teams' borrowing gangs take there (``on_team``)."""
        taken = sum(
            on_team(self, g, team) for g in self.holding() if g.borrowed > 0 and g.team != team
        )
        return self.capacity.get(team, 0) - self.used.get(team, 0) - taken

    # -- queues ---------------------------------------------------------------

    def enqueue(self, gang: Gang) -> int:
        """Put ``gang`` (an ``edit`` copy) in its team's queue, in order."""
        if gang.qkey is not None:
            self.dequeue(gang)
        queue = self._w_queue(gang.team)
        gang.qkey = queue_key(gang)
        entry = (gang.qkey, gang.key)
        position = bisect.bisect_left(queue, entry)
        queue.insert(position, entry)
        return position

    def dequeue(self, gang: Gang) -> None:
        if gang.qkey is None:
            return
        queue = self._w_queue(gang.team)
        entry = (gang.qkey, gang.key)
        i = bisect.bisect_left(queue, entry)
        if i < len(queue) and queue[i] == entry:
            del queue[i]
        gang.qkey = None

    def position(self, gang: Gang) -> int:
        queue = self.queues.get(gang.team, [])
        return bisect.bisect_left(queue, (gang.qkey, gang.key)) if gang.qkey else len(queue)

    def holding(self, team: str | None = None) -> list[Gang]:
        """Gangs holding GPUs (of one team, or of every team)."""
        teams = [team] if team is not None else list(self.holders)
        return [self.gangs[k] for t in teams for k in self.holders.get(t, ()) if k in self.gangs]

    def hold(self, gang: Gang, gpus: int, *, borrowing: bool | None = None) -> None:
        """Count ``gpus`` against the gang's team (replacing what it held): against its
        quota, or as borrowed (``borrowing``; None: as before). ``gang`` is an ``edit``."""
        if gang.held:
            was = self.w_int("lent" if gang.borrowed else "used")
            was[gang.team] -= gang.held
        borrowing = gang.borrowed > 0 if borrowing is None else borrowing
        if gpus:
            now = self.w_int("lent" if borrowing else "used")
            now[gang.team] = now.get(gang.team, 0) + gpus
        gang.held, gang.borrowed = gpus, gpus if borrowing else 0
        holders = self._w_holders(gang.team)
        if gpus > 0:
            holders.add(gang.key)
        else:
            holders.discard(gang.key)


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


def node_gpus(node: Node) -> int:
    """GPUs a node contributes to capacity: schedulable and ready only."""
    if not node.ready or node.unschedulable:
        return 0
    return node.allocatable.get(GPU, 0)
