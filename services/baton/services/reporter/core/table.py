"""Decision -> Kubernetes Event: the one table (docs/reporter.md prints it).

Every row says which decision (a tagged event on the bus, by type), the Event's reason,
type and action, its note, and what it is about: the gang's group object (the
PodGroup of either API; a gang without one: each of its pods), its pods, or a node.
A service that wants its decisions told adds a row here and, in ``main.py``, the
subject its decisions travel on; nothing else changes (health's quarantines come in
as node taints until health publishes its own decisions).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from baton.proto.admission import GangAdmitted, GangPreempted, GangQueued
from baton.proto.placement import GangPlaced, GangRestarted, GangUnschedulable
from baton.services.reporter.core.telling import explain, level_name

About = Literal["group", "pods", "bindings", "node"]
ADMISSION, HEALTH = "baton.io/admission", "baton.io/health"


@dataclass(frozen=True, slots=True)
class Quarantine:
    """A node gained (or lost) Baton's quarantine taint, ``baton.io/unhealthy``."""

    node: str
    uid: str
    on: bool
    at: float


@dataclass(frozen=True, slots=True)
class Row:
    reason: str
    type: Literal["Normal", "Warning"]
    action: str
    note: Callable[[Any], str]
    about: About = "group"  # "group": the group object, or each pod of a gang without one
    by: str = "baton.io/gang"  # reportingController: the part of Baton that decided


def _placed(d: GangPlaced) -> str:
    where = f" in {level_name(d.level)} {d.domain}" if d.level else f" across {d.domains} racks"
    return f"placed all {len(d.bindings)} members together{where}"


def _restarted(d: GangRestarted) -> str:
    return (
        f"node {d.node} failed ({d.reason}): the whole gang restarts; {d.evicted} members "
        f"evicted, {d.recreated} recreated (restart {d.restarts})"
    )


def _taken_off(d: GangRestarted) -> str:
    return (
        f"{d.reason}: the whole gang is taken off and waits to be placed again; "
        f"{d.evicted} members evicted, {d.recreated} recreated"
    )


def _preempted(d: GangPreempted) -> str:
    if d.for_team == d.team:
        return (
            f"preempted whole for the higher-priority gang {d.for_gang} of the same team "
            f"({d.gpus} GPUs); the gang waits in its team's queue again"
        )
    return (
        f"preempted whole: team {d.for_team!r} takes back its {d.gpus} lent GPUs for gang "
        f"{d.for_gang}; the gang waits in its team's queue again"
    )


def _admitted(d: GangAdmitted) -> str:
    lent = f", {d.borrowed} of them borrowed from other teams" if d.borrowed else ""
    return f"admitted by team {d.team!r}: {d.gpus} GPUs{lent}"


def _queued(d: GangQueued) -> str:
    if d.set_aside:
        return f"not admitted, {d.reason}"
    return f"waiting for admission: {d.reason}"


def _quarantine(d: Quarantine) -> str:
    if d.on:
        return (
            "Baton quarantined the node (taint baton.io/unhealthy): nothing new is placed "
            "here and gangs on it restart elsewhere; annotation baton.io/health says why"
        )
    return "Baton returned the node to service (taint baton.io/unhealthy removed)"


TABLE: dict[type[Any], Row] = {
    GangUnschedulable: Row("FailedScheduling", "Warning", "Scheduling", explain),
    GangPlaced: Row("Scheduled", "Normal", "Binding", _placed),
    GangRestarted: Row("Restarted", "Warning", "Restarting", _restarted),
    GangPreempted: Row("Preempted", "Warning", "Preempting", _preempted, by=ADMISSION),
    GangAdmitted: Row("Admitted", "Normal", "Admitting", _admitted, by=ADMISSION),
    GangQueued: Row("Queued", "Normal", "Queueing", _queued, by=ADMISSION),
    Quarantine: Row("Quarantined", "Warning", "Quarantining", _quarantine, "node", HEALTH),
}

# A gang taken off with no node failed (``node`` ''): preempted by a higher-priority gang
# ("preempted for NS/GANG (priority N)") or moved to defragment ("moved to defragment for
# NS/GANG"): the gang service's GangRestarted, told as what it is, not as a restart.
TAKEN_OFF = Row("Preempted", "Warning", "Preempting", _taken_off)


def row_for(decision: Any) -> Row:
    """The row telling ``decision``: by its type, except a gang taken off to make room."""
    if isinstance(decision, GangRestarted) and not decision.node:
        return TAKEN_OFF
    return TABLE[type(decision)]


# Per bound pod, with GangPlaced, as kube-scheduler writes it for every pod it binds.
ASSIGNED = Row(
    "Scheduled", "Normal", "Binding",
    lambda b: f"Successfully assigned {b.namespace}/{b.pod} to {b.node}", about="bindings",
)  # fmt: skip
# Per pending pod, with its PodScheduled condition (the gang's waiting message).
WAITING = Row("FailedScheduling", "Warning", "Scheduling", lambda message: message, about="pods")
RETURNED = Row("Returned", "Normal", "Returning", _quarantine, "node", HEALTH)
