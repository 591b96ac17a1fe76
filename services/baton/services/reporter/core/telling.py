"""What a gang is, in the words Kubernetes users read: its PodGroup status (phase and
counts as scheduler-plugins' controller writes them, or Volcano's scheduler for a
Volcano PodGroup), what it waits for, and the
verdict in one line ("need 10 more nodes with 8 nvidia.com/gpu in one rack").

Pure functions over slim objects, shared by the reporter's core and ``baton why``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from baton.proto import keys
from baton.proto.actions import GroupStatus, StatusCondition
from baton.proto.k8s import Pod, PodGroup
from baton.proto.placement import GangUnschedulable, Need

_DIGITS = re.compile(r"\d+")
SCHEDULED = "PodGroupScheduled"  # the condition, as upstream's PodGroup names it

# How each format names a group: for "waiting for PodGroup x (named by ...)".
NAMED_BY = {
    "scheduler-plugins": f"label {keys.POD_GROUP}",
    "kubernetes": "spec.schedulingGroup.podGroupName",
    "volcano": f"annotation {keys.VOLCANO_GROUP}",
    "kueue": f"label {keys.KUEUE_GROUP}",
    "jobset": f"label {keys.JOBSET_NAME}",
}


@dataclass(frozen=True, slots=True)
class Counts:
    members: int = 0  # pods of the gang, in any phase
    pending: int = 0  # not bound yet
    scheduled: int = 0  # bound to a node (finished ones included)
    running: int = 0
    succeeded: int = 0
    failed: int = 0


def counts(pods: Iterable[Pod]) -> Counts:
    members = pending = scheduled = running = succeeded = failed = 0
    for pod in pods:
        members += 1
        if pod.node_name:
            scheduled += 1
        elif pod.phase == "Pending" and not pod.terminating:
            pending += 1
        running += pod.phase == "Running"
        succeeded += pod.phase == "Succeeded"
        failed += pod.phase == "Failed"
    return Counts(members, pending, scheduled, running, succeeded, failed)


def phase(c: Counts, need: int) -> str:
    """scheduler-plugins' phases, in its controller's order of precedence, with
    ``Scheduled`` (every member Baton placed is bound, not yet running) in between."""
    need = max(need, 1)
    if c.failed and c.failed + c.running + c.succeeded >= need:
        return "Failed"
    if c.succeeded >= need:
        return "Finished"
    if c.running + c.succeeded >= need:
        return "Running"
    if c.scheduled >= need:
        return "Scheduled"
    return "Pending"


def volcano_phase(c: Counts, need: int, *, admitted: bool) -> str:
    """Volcano's phases as its scheduler sets them: ``Running`` once minMember members
    are bound or done (``Completed`` when all of those succeeded), ``Unknown`` when some
    run but fewer than minMember hold a node, else ``Inqueue`` once admitted (Volcano's
    enqueue; Baton's admission) and ``Pending`` before."""
    allocated = c.scheduled - c.failed
    if allocated >= max(need, 1):
        return "Completed" if c.succeeded == allocated else "Running"
    if c.running:
        return "Unknown"
    return "Inqueue" if admitted else "Pending"


def waiting(
    *, key: str, group: PodGroup | None, pods: list[Pod], need: int, queued: str = "",
    verdict: GangUnschedulable | None = None,
) -> str:  # fmt: skip
    """What the gang waits for now ('' when nothing: it is placed, or being placed).
    Stable while the situation is the same: no running counts, so a message written on
    every member changes only when the reason does. A running gang's pending members
    (beyond its quorum, or joining it) wait for what its verdict says."""
    c = counts(pods)
    if not c.pending:
        return ""
    if c.scheduled >= max(need, 1):
        return explain(verdict) if verdict is not None else ""
    name = key.partition("/")[2]
    if group is None and need == 0:
        source = next((p.group.source for p in pods if p.group is not None), "")
        named = NAMED_BY.get(source, "its pods")
        extra = (
            f" or annotation {keys.VOLCANO_MIN_MEMBER} on its pods" if source == "volcano" else ""
        )
        return f"waiting for PodGroup {key} (named by {named}) to be created{extra}"
    if c.pending < need:
        return f"waiting for all {need} members of gang {name} to be created (minMember {need})"
    if queued:
        return f"waiting for admission: {queued}"
    if verdict is not None:
        return explain(verdict)
    return ""


def explain(verdict: GangUnschedulable) -> str:
    """One line: the verdict and what would unblock it."""
    hint = need_text(verdict.need)
    if verdict.fits_when_free:
        hint += ("; " if hint else "") + "it fits once running work finishes"
    return f"{verdict.reason}; {hint}" if hint else verdict.reason


def need_text(need: Need) -> str:
    if need.nodes <= 0:
        return ""
    shape = ", ".join(f"{amount} {res}" for res, amount in sorted(need.shape.items()))
    where = f" in one {level_name(need.within)}" if need.within else ""
    plural = "s" if need.nodes != 1 else ""
    return f"need {need.nodes} more node{plural} with {shape}{where}"


def level_name(key: str) -> str:
    """``baton.io/rack`` -> ``rack``, ``topology.kubernetes.io/zone`` -> ``zone``."""
    return key.rpartition("/")[2] or key


def group_status(c: Counts, need: int, *, message: str, placed: str, since: float) -> GroupStatus:
    """The status to write on a PodGroup: phase, counts and ``PodGroupScheduled``."""
    current = phase(c, need)
    if current != "Pending":
        condition = StatusCondition(
            type=SCHEDULED, status="True", reason="Scheduled",
            message=placed or f"{c.scheduled} members bound", since=since,
        )  # fmt: skip
    else:
        condition = StatusCondition(
            type=SCHEDULED, status="False", reason="Unschedulable",
            message=message or "waiting to be placed", since=since,
        )  # fmt: skip
    return GroupStatus(
        phase=current, scheduled=c.scheduled, running=c.running, succeeded=c.succeeded,
        failed=c.failed, conditions=(condition,),
    )  # fmt: skip


def volcano_status(
    c: Counts, need: int, *, admitted: bool, message: str, placed: str, since: float
) -> GroupStatus:  # fmt: skip
    """The status to write on a Volcano PodGroup: Volcano's phase and counts, and its two
    conditions, ``Scheduled`` and ``Unschedulable`` (the verdict), one True at a time."""
    current = volcano_phase(c, need, admitted=admitted)
    on = current in ("Running", "Completed")
    told = (placed or f"{c.scheduled} members bound") if on else (message or "waiting to be placed")
    conditions = (
        StatusCondition(type="Scheduled", status="True" if on else "False",
                        reason="Scheduled" if on else "NotEnoughResources", message=told,
                        since=since),
        StatusCondition(type="Unschedulable", status="False" if on else "True",
                        reason="Scheduled" if on else "NotEnoughResources", message=told,
                        since=since),
    )  # fmt: skip
    return GroupStatus(
        phase=current, scheduled=c.scheduled, running=c.running, succeeded=c.succeeded,
        failed=c.failed, conditions=conditions,
    )  # fmt: skip


def same_status(a: GroupStatus | None, b: GroupStatus, *, numbers: bool = True) -> bool:
    """Equal but for when the condition was computed (and, ``numbers=False``, but for the
    numbers in the conditions' messages: "uses 506 of its 512" and "uses 512 of its 512",
    "waiting behind 3 earlier gangs" and "behind 2" are the same words)."""
    if a is None:
        return False
    said = (lambda m: m) if numbers else (lambda m: _DIGITS.sub("#", m))
    strip = tuple((c.type, c.status, c.reason, said(c.message)) for c in b.conditions)
    have = tuple((c.type, c.status, c.reason, said(c.message)) for c in a.conditions)
    return have == strip and (a.phase, a.scheduled, a.running, a.succeeded, a.failed) == (
        b.phase, b.scheduled, b.running, b.succeeded, b.failed,
    )  # fmt: skip
