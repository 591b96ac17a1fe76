"""Gangs as the gang core places them: the view's gang plus the state of its placement.

The cluster itself (nodes, free capacity, pods, members) is the shared view
(``libs.view``). What only placement needs lives here, per gang: the attempt
counter and backoff, the placement in flight (*assumed*: its members count against
their nodes until they show up bound, or the placement is forgotten), the restart in
progress and the last verdict published.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from baton.libs.view import GangView, Shape, View, gang_key
from baton.proto.k8s import Pod


@dataclass(slots=True)
class Assumption:
    """An in-flight placement: members accounted on their nodes until bound or forgotten."""

    action_id: str
    nodes: dict[str, str]  # pod key -> node
    at: float


@dataclass(frozen=True, slots=True, eq=False)
class Kind:
    """What a failed search and its verdict read of a gang: its members' shapes with
    their counts and its topology levels. The hash is kept: the queue looks a kind up
    for every waiting gang every cycle, and a shape's hash walks all its fields."""

    shapes: tuple[tuple[Shape, int], ...]
    required: str
    preferred: str
    digest: int
    exclusive: str = ""  # a JobSet's exclusive level: each Job in a domain of its own
    parts: tuple[tuple[tuple[Shape, int], ...], ...] = ()  # then each Job's shapes

    def __hash__(self) -> int:
        return self.digest

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, Kind)
            and self.digest == other.digest
            and (self.shapes, self.required, self.preferred, self.exclusive, self.parts)
            == (other.shapes, other.required, other.preferred, other.exclusive, other.parts)
        )


@dataclass(frozen=True, slots=True)
class Ask:
    """What placement reads of a waiting gang (``asks.ask``), kept on it until it changes."""

    members: dict[Shape, list[str]]  # the quorum: minMember pending members by shape
    kind: Kind
    floor: dict[str, int]  # the PodGroup's ``minResources`` ({}: none)
    parts: tuple[dict[Shape, list[str]], ...] = ()  # members by Job (``exclusive``)
    # pending members beyond the quorum, by shape: placed once the quorum is (``growing``)
    extras: dict[Shape, list[str]] = field(default_factory=dict)

    @property
    def required(self) -> str:
        return self.kind.required

    @property
    def preferred(self) -> str:
        return self.kind.preferred


@dataclass(slots=True)
class Gang(GangView):
    attempt: int = 0
    retry_after: float = 0.0
    assumed: Assumption | None = None
    restarting: bool = False
    restarts: int = 0
    verdict: tuple[object, ...] | None = None  # last published unschedulable verdict
    # what the last verdict said in kind (could it fit when free, within which domain,
    # timed out), when, and how long until one that says only new numbers may follow
    told: tuple[object, ...] = ()
    told_at: float = 0.0
    told_gap: float = 0.0
    checked_at: float = -1.0
    started: float = 0.0  # when this core last placed it (0: before it started)
    room_after: float = 0.0  # no new try at making room for it before then
    # Kept until one of its pods or its PodGroup changes (``changed``): the queue reads
    # them for every waiting gang every cycle.
    rank: int | None = None  # its priority in the queue
    order: tuple[int, float, float, str] | None = None  # its place in the queue (``ordering.key``)
    quorate: bool | None = None  # minMember pending pods (``ordering.quorate``)
    admitted: bool | None = None  # marked admitted (``ordering.is_admitted``)
    asks_gpus: bool | None = None  # a pending member asks for GPUs
    claims_waiting: str | None = None  # why members' ResourceClaims are not ready ("": they are)
    pins: frozenset[str] | None = None  # nodes its members' claims are allocated on
    ask: Ask | None = None  # what it asks of the cluster (``asks.ask``)
    estimate: float | None = None  # expected run time when this core placed it (None: none)
    ran_gpus: int = -1  # GPUs of its members when this core placed it (-1: not placed)
    ran_team: str = ""  # its team then (``estimates.team``): whose runs it adds to
    backfilled: bool = False  # placed on the head's reserved nodes on its estimate (EASY)

    def changed(self) -> None:
        """One of its pods or its PodGroup changed: what is kept is computed again."""
        self.rank = self.order = self.quorate = self.admitted = self.asks_gpus = None
        self.ask = self.claims_waiting = self.pins = None

    def holds(self, pod: str) -> bool:
        """An assumed member stays accounted on its node until it is bound or forgotten."""
        return self.assumed is not None and pod in self.assumed.nodes

    def settle(self, pods: dict[str, Pod]) -> bool:
        """Clear a placement whose members are all bound and a restart whose evicted
        members are all gone; idle once nothing refers to it and nothing is in flight."""
        assumed = self.assumed
        if assumed is not None and all(
            pods.get(k) is not None and pods[k].node_name for k in assumed.nodes
        ):
            self.assumed = None  # every member is bound: the assumption became fact
        if self.restarting and not self.bound:
            self.restarting = False
        return GangView.settle(self, pods) and self.assumed is None


Cluster = View[Gang]


def new_cluster(levels: tuple[str, ...]) -> Cluster:
    return View(levels=levels, new_gang=Gang, balloons_free=True)


def delete_pod(cluster: Cluster, pod: Pod) -> None:
    """A pod is gone: it leaves its gang's placement in flight, then the view."""
    gang = cluster.gangs.get(gang_key(pod))
    if gang is not None and gang.assumed is not None:
        gang.assumed.nodes.pop(pod.key, None)
    cluster.delete_pod(pod)
