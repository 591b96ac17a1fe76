"""Admission decisions: gang admission against team quotas, and what the webhook did.

Published on ``baton.<cluster>.admission.<kind>.<namespace>.<name>`` (EVENTS stream).
A gang is ``"<namespace>/<podgroup>"``. ``at`` is the decision's time; cores use it
as ``now`` on replay.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from baton.proto.teams import TeamConfig


class AdmissionEvent(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type"
):
    at: float


class GangAdmitted(AdmissionEvent, frozen=True, tag="admission.admitted.v1"):
    """The team's quota (plus ``borrowed`` GPUs lent by other teams) covers the whole gang."""

    gang: str
    team: str
    gpus: int
    borrowed: int = 0  # GPUs beyond the team's quota; reclaimable by their owners


class GangQueued(AdmissionEvent, frozen=True, tag="admission.queued.v1"):
    """The gang waits in its team's queue; ``position`` 0 is the head (at publication)."""

    gang: str
    team: str
    reason: str
    position: int
    gpus: int = 0
    set_aside: bool = False  # never admitted as it is (too large, members missing): no head


class GangPreempted(AdmissionEvent, frozen=True, tag="admission.preempted.v1"):
    """A borrowing gang evicted whole so that ``for_team`` gets its quota back."""

    gang: str
    team: str
    for_team: str
    for_gang: str
    gpus: int


class GangReleased(AdmissionEvent, frozen=True, tag="admission.released.v1"):
    """The gang finished or was deleted; its GPUs count against its team no more."""

    gang: str
    team: str
    gpus: int


Kind = Literal["Pod", "PodGroup", "Workload"]


class PodMutated(AdmissionEvent, frozen=True, tag="admission.mutated.v1"):
    """What the mutating webhook changed (JSON Patch paths) on an object at creation."""

    kind: Kind
    namespace: str
    name: str
    team: str
    paths: tuple[str, ...]
    borrowing: bool = False


class PodRejected(AdmissionEvent, frozen=True, tag="admission.rejected.v1"):
    """The validating webhook refused an object; ``message`` is what the user saw."""

    kind: Kind
    namespace: str
    name: str
    message: str
    team: str = ""


class NodeTeamChanged(AdmissionEvent, frozen=True, tag="admission.node-team.v1"):
    """A node moved to ``team`` ('' when no team owns it any more)."""

    node: str
    team: str
    previous: str = ""


AnyAdmissionEvent = (
    GangAdmitted
    | GangQueued
    | GangPreempted
    | GangReleased
    | PodMutated
    | PodRejected
    | NodeTeamChanged
)


class WebhookServing(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type",
    tag="admission.webhook.v1",
):  # fmt: skip
    """Whether an admission replica serves the webhook, said once at its start on
    ``baton.<cluster>.admission.webhook`` (the last one stands): without a certificate
    it serves none, and pods of gangs keep their scheduler (``baton status`` says so)."""

    serving: bool
    at: float
    port: int = 0  # where it listens, when serving
    reason: str = ""  # why not, when not
    instance: str = ""  # host/pid of the replica


# Subject kinds (the fourth token) for each event type.
class TeamsLoaded(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="admission.teams-loaded.v1"
):
    """The team config file changed and was validated: an input of the admission core,
    on ``baton.<cluster>.admission.teams``, so a change takes effect in stream order."""

    config: TeamConfig
    at: float


SUBJECT_KIND: dict[type[AdmissionEvent], str] = {
    GangAdmitted: "admitted",
    GangQueued: "queued",
    GangPreempted: "preempted",
    GangReleased: "released",
    PodMutated: "mutated",
    PodRejected: "rejected",
    NodeTeamChanged: "node-team",
}
