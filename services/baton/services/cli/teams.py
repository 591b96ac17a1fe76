"""Per-team lines of the status: quota, GPUs used, gangs waiting, the head of the queue
and why it waits.

They come from admission's own core, fed the objects the status holds (as admission
bootstraps from the bus), so quota, use and queue order are computed exactly as the
admission service computes them, with no second implementation. The reason shown for
the head of a queue is the one admission last published for that gang (``GangQueued``),
else the core's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from baton.proto import keys
from baton.proto.actions import TeamStatus
from baton.proto.k8s import NodeEvent, PodEvent, PodGroupEvent
from baton.proto.teams import TeamConfig
from baton.services.admission import core as admission

if TYPE_CHECKING:
    from baton.services.cli.view import View


@dataclass(frozen=True)
class TeamRow:
    name: str
    quota: int
    used: int
    borrowed: int
    waiting: int
    head: str = ""  # the gang first in the team's queue
    reason: str = ""  # why it waits, in full

    def line(self) -> str:
        used = f"used {self.used}" + (f" (+{self.borrowed} borrowed)" if self.borrowed else "")
        text = f"{self.name}  quota {self.quota}  {used}  waiting {self.waiting}"
        if self.head:
            text += f"  head {self.head}: {self.reason or 'queued'}"
        return text


def _in_admission_order(view: View, *, now: float) -> list[Any]:
    """Nodes, then gang members, then what admission admitted before (it adopts them:
    their GPUs are held), then the rest oldest first, which it decides on with every
    hold known; so the queues are those admission keeps, not artefacts of a replay
    that met a waiting gang before the gangs holding the GPUs it waits for."""

    def admitted(marks: dict[str, str]) -> bool:
        return marks.get(keys.ADMITTED) == "true"

    events: list[Any] = [NodeEvent(op="upsert", at=now, node=n) for n in view.nodes.values()]
    members = [p for p in view.pods.values() if p.gang]
    lone = sorted((p for p in view.pods.values() if not p.gang),
                  key=lambda p: (not admitted(p.annotations), p.created_at))  # fmt: skip
    groups = sorted(view.groups.values(),
                    key=lambda g: (not admitted(g.annotations), g.created_at))  # fmt: skip
    events += [PodEvent(op="upsert", at=now, pod=p) for p in members]
    events += [PodGroupEvent(op="upsert", at=now, pod_group=g) for g in groups]
    events += [PodEvent(op="upsert", at=now, pod=p) for p in lone]
    return events


def shown_row(name: str, status: TeamStatus) -> TeamRow:
    """A team's row from the status admission showed it with (its Team object)."""
    head = next((q for q in status.queue if q.position == 0), None)
    return TeamRow(name=name, quota=status.quota, used=status.used, borrowed=status.borrowed,
                   waiting=status.waiting, head=head.name if head else "",
                   reason=head.reason if head else "")  # fmt: skip


def team_rows(view: View, config: TeamConfig, *, now: float = 0.0) -> tuple[TeamRow, ...]:
    """One row per team of ``config``, from the view's nodes, PodGroups and pods."""
    state: Any = admission.initial(config)
    for event in _in_admission_order(view, now=now):
        state, _ = admission.step(state, event, now)
    rows = []
    for team in config.teams:
        queue = state.queues.get(team.name, [])
        head = queue[0][1] if queue else ""
        said = view.queued.get(head)
        reason = said.reason if said is not None else getattr(state.gangs.get(head), "reason", "")
        rows.append(
            TeamRow(
                name=team.name,
                quota=state.quota(team.name),
                used=state.used.get(team.name, 0),
                borrowed=state.borrowed(team.name),
                waiting=len(queue),
                head=head,
                reason=reason,
            )
        )
    return tuple(rows)
