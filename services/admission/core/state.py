"""The admission core's in-memory state: teams, nodes, gangs, per-team usage and queues.

Mutable on purpose (the core assumes its decisions in place, Kueue style); only the
core's ``step`` mutates it, so replaying the same events gives the same state.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from proto.k8s import GPU, Node
from services.admission.teams import DEFAULT, Team, TeamConfig, is_default

ADMITTED = "baton.io/admitted"
BORROWING = "baton.io/borrowing"
GPUS_PER_POD = "baton.io/gpus-per-pod"


@dataclass(slots=True)
class Member:
    gpus: int
    priority: int
    phase: str
    uid: str
    node: str


@dataclass(slots=True)
class Gang:
    """A PodGroup as admission sees it. ``gpus`` is the whole gang's demand (0: unknown)."""

    key: str
    team: str
    min_member: int
    created_at: float
    gpus_per_pod: int | None = None  # from the PodGroup annotation, else from member pods
    members: dict[str, Member] = field(default_factory=dict)
    admitted: bool = False
    held: int = 0  # GPUs counted against the team while admitted
    borrowed: int = 0
    finished: bool = False
    reason: str = ""  # last published queue reason
    qkey: tuple[int, float, str] | None = None  # its entry in the team's queue, when queued

    @property
    def gpus(self) -> int:
        per_pod = self.gpus_per_pod
        if per_pod is None:
            if not self.members:
                return 0
            per_pod = max(m.gpus for m in self.members.values())
        return per_pod * self.min_member

    @property
    def known(self) -> bool:
        return self.gpus_per_pod is not None or bool(self.members)

    @property
    def priority(self) -> int:
        return max((m.priority for m in self.members.values()), default=0)

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    @property
    def name(self) -> str:
        return self.key.partition("/")[2]


def queue_key(gang: Gang) -> tuple[int, float, str]:
    """Order within a team's queue: priority (high first), then age, then name."""
    return (-gang.priority, gang.created_at, gang.key)


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
    used: dict[str, int] = field(default_factory=dict)  # team -> GPUs held by admitted gangs
    gangs: dict[str, Gang] = field(default_factory=dict)
    queues: dict[str, list[tuple[tuple[int, float, str], str]]] = field(default_factory=dict)
    pending_pods: dict[str, dict[str, Member]] = field(default_factory=dict)  # gang key -> pods
    holders: dict[str, set[str]] = field(default_factory=dict)  # team -> gangs holding GPUs

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
        return self.total_capacity() - sum(self.used.values())

    def borrowed(self, team: str) -> int:
        return max(0, self.used.get(team, 0) - self.quota(team))

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
        """The most GPUs a team could ever hold: its quota plus what it may borrow."""
        return self.quota(team) + self.borrow_limit(team)

    # -- queues ---------------------------------------------------------------

    def enqueue(self, gang: Gang) -> int:
        if gang.qkey is not None:
            self.dequeue(gang)
        queue = self.queues.setdefault(gang.team, [])
        gang.qkey = queue_key(gang)
        entry = (gang.qkey, gang.key)
        position = bisect.bisect_left(queue, entry)
        queue.insert(position, entry)
        return position

    def dequeue(self, gang: Gang) -> None:
        if gang.qkey is None:
            return
        queue = self.queues.get(gang.team, [])
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

    def hold(self, gang: Gang, gpus: int) -> None:
        """Count ``gpus`` against the gang's team (replacing what it held)."""
        self.used[gang.team] = self.used.get(gang.team, 0) - gang.held + gpus
        gang.held = gpus
        holders = self.holders.setdefault(gang.team, set())
        if gpus > 0:
            holders.add(gang.key)
        else:
            holders.discard(gang.key)


def node_gpus(node: Node) -> int:
    """GPUs a node contributes to capacity: schedulable and ready only."""
    if not node.ready or node.unschedulable:
        return 0
    return node.allocatable.get(GPU, 0)
