"""Gangs as the admission core sees them: a PodGroup (or a lone pod) and its member pods,
what they hold against their team's quota, and their order in the team's queue."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from baton.proto.k8s import PLUGINS_API


@dataclass(frozen=True, slots=True)
class Member:
    gpus: int
    priority: int
    phase: str
    uid: str
    node: str
    bare: bool = True  # no controller recreates it: taken off, Baton recreates it
    devices: tuple[tuple[str, int], ...] = ()  # (<class> devices resource, count) its claims ask


@dataclass(slots=True)
class Gang:
    """A PodGroup as admission sees it. ``demand`` is what the gang needs to start,
    ``gpus`` what it counts against its team (0: unknown)."""

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
    # its entry in the team's queue, when queued (``queue_key``)
    qkey: tuple[int, float, int, str] | None = None
    arrival: int = 0  # when admission first saw it, among all gangs (``State.arrivals``)
    lone: bool = False  # a pod with schedulerName baton and no PodGroup: a gang of one
    min_gpus: int = 0  # the PodGroup's spec.minResources GPUs: the least the gang needs
    api: str = PLUGINS_API  # which PodGroup API carries the marks (or UPSTREAM_API)
    carrier: str = ""  # a gang without a group object (Kueue, Volcano): the pod marked
    schedule_timeout: float | None = None  # the PodGroup's scheduleTimeoutSeconds
    aside: str = ""  # why the gang is set aside (never fits, members missing); '' if not
    admitted_at: float = 0.0  # when it was last admitted (0: before a restart)
    told_gpus: int = -1  # its demand when it was last told why it waits
    complete: bool = False  # it has had all its member pods at once (any phase)
    qneed: int | None = None  # its demand as counted in the team's ``needs`` (queued, known)
    ranked: int | None = None  # the priority it is counted at while holding (``State.ranks``)
    paused: bool = False  # admitted, its marks taken back: new members beyond its quota
    releases: int = 0  # times given back unplaced since it last had a member bound
    retry_at: float = 0.0  # given back unplaced: not admitted again before then
    held_devices: dict[str, int] = field(default_factory=dict)  # counted against caps

    @property
    def demand(self) -> int:
        """GPUs the gang needs to start, counted from what its members ask, shape by
        shape: ``spec.minResources`` when given, else ``baton.io/gpus-per-pod`` x
        minMember, else its minMember smallest members (0 while fewer exist)."""
        if self.min_gpus:
            return self.min_gpus
        if self.gpus_per_pod is not None:
            return self.gpus_per_pod * self.min_member
        if len(self.members) < self.min_member:
            return 0
        return sum(sorted(m.gpus for m in self.members.values())[: self.min_member])

    @property
    def gpus(self) -> int:
        """What the gang counts against its team: its demand, or every live member's
        GPUs when they ask more (every member counts, whatever order they came in)."""
        live = sum(m.gpus for m in self.members.values() if m.phase in ACTIVE)
        return max(self.demand, live)

    @property
    def devices(self) -> dict[str, int]:
        """What its live members' claims ask of classes other than whole GPUs, by the
        class's ``<class>.deviceclass.resource.k8s.io/devices`` resource."""
        out: dict[str, int] = {}
        for m in self.members.values():
            if m.phase in ACTIVE:
                for resource, count in m.devices:
                    out[resource] = out.get(resource, 0) + count
        return out

    @property
    def declared(self) -> bool:
        """Its PodGroup says its GPUs (``spec.minResources``, ``baton.io/gpus-per-pod``)."""
        return self.gpus_per_pod is not None or self.min_gpus > 0

    @property
    def known(self) -> bool:
        """Its demand is known: declared, or its minMember members exist."""
        return self.declared or len(self.members) >= self.min_member

    @property
    def sized(self) -> int:
        """Its GPUs as it is told why it waits (-1 while unknown): a change is news."""
        return self.gpus if self.known else -1

    @property
    def waiting_members(self) -> bool:
        """Fewer member pods than minMember, and nothing else to count its demand from
        (or it had them all and they went: it waits for them to come back). Such a
        gang is never admitted nor a queue's head."""
        if self.lone or len(self.members) >= self.min_member:
            return False
        return not self.declared or self.complete

    @property
    def bound(self) -> bool:
        """A member is bound to a node: placement has begun."""
        return any(m.node for m in self.members.values())

    @property
    def priority(self) -> int:
        return max((m.priority for m in self.members.values()), default=0)

    @property
    def kind(self) -> Literal["Pod", "PodGroup"]:
        """What carries the gang's admission marks."""
        return "Pod" if self.lone or self.carrier else "PodGroup"

    @property
    def marked(self) -> str:
        """The name of the object carrying the marks: the PodGroup, the lone pod, or the
        carrier pod of a gang without a group object."""
        return self.carrier or self.name

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    @property
    def name(self) -> str:
        return self.key.partition("/")[2]


def queue_key(gang: Gang) -> tuple[int, float, int, str]:
    """Order within a team's queue: priority (high first), then age, then the order
    admission saw them in. ``creationTimestamp`` counts whole seconds: gangs created in
    the same one (a controller's burst, a replayed trace) are served as they arrived, in
    the API server's order, as kube-scheduler and Kueue serve theirs, not by name."""
    return (-gang.priority, gang.created_at, gang.arrival, gang.key)


# member phases that hold (or will hold) GPUs
ACTIVE = ("Pending", "Running", "Unknown")
