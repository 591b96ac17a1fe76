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

    @property
    def gpus(self) -> int:
        per_pod = self.gpus_per_pod
        if per_pod is None:
            per_pod = max((m.gpus for m in self.members.values()), default=0)
        return max(per_pod * self.min_member, self.min_gpus)

    @property
    def known(self) -> bool:
        return self.gpus_per_pod is not None or bool(self.members) or self.min_gpus > 0

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


def queue_key(gang: Gang) -> tuple[int, float, str]:
    """Order within a team's queue: priority (high first), then age, then name."""
    return (-gang.priority, gang.created_at, gang.key)


# member phases that hold (or will hold) GPUs
ACTIVE = ("Pending", "Running", "Unknown")
