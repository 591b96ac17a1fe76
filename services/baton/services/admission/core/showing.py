"""Showing each team to kubectl users (pure): its quota, usage, borrowing and queue as
the status of a cluster-scoped ``Team`` (``baton.io/v1alpha1``), written by the actuator.

The team file stays the source; these objects only show what admission holds. What
they cost the API server is bounded, whatever the churn of pods and gangs: the status
is computed on the core's ticks only (``BATON_ADMISSION_CYCLE_INTERVAL``), a team's
``SetTeamStatus`` is sent only when its status changed since the last one sent, so at
most one write per team per tick, and a status lists only the first ``SHOWN`` gangs of
its queue (``waiting`` counts them all). Any input marks the statuses ``stale``, which
asks for a tick (``wants_tick``) even with no gang waiting, so the last change shows.
"""

from __future__ import annotations

from baton.proto import ids
from baton.proto.actions import QueuedGang, SetTeamStatus, TeamStatus
from baton.services.admission.core.gangs import Gang
from baton.services.admission.core.state import State

SHOWN = 50  # gangs of a team's queue listed in its status (Kueue's visibility API pages too)


def team_status(state: State, team: str) -> TeamStatus:
    """What the team's object shows now: its gangs in line first, in order (position 0
    is admitted next when it fits), then those set aside, which are never the head."""
    spec = state.specs[team]
    queue = state.queues.get(team, [])
    in_line: list[Gang] = []
    aside: list[Gang] = []
    for _, key in queue:
        gang = state.gangs[key]
        if not gang.aside:
            in_line.append(gang)
            if len(in_line) == SHOWN:
                break
        elif len(aside) < SHOWN:
            aside.append(gang)
    shown = (in_line + aside)[:SHOWN]
    return TeamStatus(
        namespaces=tuple(sorted(spec.namespaces)),
        quota=state.quota(team),
        borrow_limit=state.borrow_limit(team),
        used=state.used.get(team, 0),
        borrowed=state.borrowed(team),
        admitted=len(state.holders.get(team, ())),
        waiting=len(queue),
        queue=tuple(_queued(gang, position) for position, gang in enumerate(shown)),
    )


def _queued(gang: Gang, position: int) -> QueuedGang:
    return QueuedGang(
        name=gang.key,
        position=position,
        gpus=gang.gpus if gang.known else 0,
        priority=gang.priority,
        reason=gang.aside or gang.reason,
        set_aside=bool(gang.aside),
    )


def show(state: State, now: float) -> list[SetTeamStatus]:
    """A ``SetTeamStatus`` for each team whose status changed since it was last sent, and
    a removal for each team shown before that left the team file."""
    state.stale = False
    outputs: list[SetTeamStatus] = []
    for team in sorted(state.specs):
        status = team_status(state, team)
        if state.shown.get(team) != status:
            state.shown[team] = status
            outputs.append(_action(team, now, status=status))
    for team in sorted(set(state.shown) - set(state.specs)):
        del state.shown[team]
        outputs.append(_action(team, now, remove=True))
    return outputs


def _action(
    team: str, now: float, *, status: TeamStatus | None = None, remove: bool = False
) -> SetTeamStatus:
    return SetTeamStatus(
        id=ids.make("team-status", team, "remove" if remove else "show", repr(now)),
        by="admission",
        at=now,
        priority="status",
        team=team,
        status=status or TeamStatus(),
        remove=remove,
    )
