"""Whom admission takes off for a gang, whole: borrowing gangs of other teams reclaimed
(``reclaim_plan``) and lower-priority gangs of its own team preempted (``lower_priority``,
``fits_without``); ``preempt`` takes one off and puts it back in its queue, ``unadmit``
takes its marks back. Pure, like the rest of the core; ``queueing`` decides when.
"""

from __future__ import annotations

from baton.proto import keys
from baton.proto.actions import Annotate, AnyAction
from baton.proto.admission import GangAdmitted, GangPreempted, GangQueued
from baton.services.admission.core import members
from baton.services.admission.core.gangs import ACTIVE, Gang
from baton.services.admission.core.state import State, on_team

Output = AnyAction | GangAdmitted | GangQueued | GangPreempted


def unadmit(gang: Gang, now: float, *, reason: str) -> Annotate:
    return members.mark(gang, now, what="unadmit", reason=reason,
                        annotations={keys.ADMITTED: None, keys.BORROWING: None})  # fmt: skip


def fits_without(state: State, gang: Gang, victims: list[Gang], now: float) -> bool:
    """The gang is admitted once ``victims`` (in-quota gangs of its team) are off: its
    team's nodes and the cluster then have its GPUs, or borrowers can be reclaimed for
    them. If not, preempting them would only lose their work (and, re-admitted in the
    same cycle, they would be preempted again and again)."""
    freed = sum(v.held for v in victims)
    need, team = gang.gpus, gang.team
    room, free = state.room(team) + freed, state.free() + freed
    if need <= room and need <= free:
        return True
    short_own, short = need - room, need - free
    return bool(reclaim_plan(state, team=team, short_own=short_own, short=short, now=now))


def lower_priority(state: State, gang: Gang, now: float) -> list[Gang]:
    """In-quota gangs of the gang's team to preempt so that it fits its quota ([]: none
    will do): lower priority only, run at least ``preempt_min_run_s``, lowest priority
    then least GPU-time lost first."""
    queueing = state.config.queueing
    if not queueing.preempt_within_team or gang.borrowed:
        return []
    team, mine = gang.team, gang.priority
    if state.least_priority(team) >= mine:
        return []  # no in-quota gang of the team runs at a lower priority (kept counts)
    candidates = sorted(
        (
            g
            for g in state.holding(team)
            if g.admitted
            and not g.borrowed
            and g.priority < mine
            and now - g.admitted_at >= queueing.preempt_min_run_s
        ),
        key=lambda g: (g.priority, g.held * (now - g.admitted_at), g.key),
    )
    short = state.used.get(team, 0) + gang.gpus - state.quota(team)
    victims: list[Gang] = []
    for victim in candidates:
        if short <= 0:
            break
        victims.append(victim)
        short -= victim.held
    return victims if short <= 0 else []


def reclaim_plan(
    state: State, *, team: str, short_own: int, short: int, now: float = 0.0
) -> list[Gang]:
    """Borrowing gangs of other teams to preempt whole ([]: not enough): first those
    bound to ``team``'s nodes until ``short_own`` GPUs are back there, then any until
    ``short`` GPUs are free in the cluster; lowest team priority, then lowest gang
    priority, then least GPU-time lost (newest admitted), then newest first. Borrowed
    GPUs are taken back at once: no minimum run time (the quota is its owner's)."""
    priority = {t.name: t.priority for t in state.config.teams}
    candidates = sorted(
        (g for g in state.holding() if g.admitted and g.borrowed > 0 and g.team != team),
        key=lambda g: (
            priority.get(g.team, 0), g.priority, g.held * (now - g.admitted_at), -g.created_at,
            g.key,
        ),
    )  # fmt: skip
    victims: list[Gang] = []
    back = freed = 0
    for gang in candidates:
        if back >= short_own:
            break
        here = on_team(state, gang, team)
        if here:
            victims.append(gang)
            back, freed = back + here, freed + gang.held
    for gang in candidates:
        if freed >= short:
            break
        if gang not in victims:
            victims.append(gang)
            freed += gang.held
    return victims if back >= short_own and freed >= short else []


def preempt(state: State, gang: Gang, now: float, *, for_gang: Gang) -> list[Output]:
    """Take the whole gang off (its bare pods recreated, ``members.evictions``), take
    back its admission and put it back in its queue."""
    gpus = gang.held
    state.hold(gang, 0, borrowing=False)
    members.resume(state, gang)
    gang.admitted, gang.reason = False, ""
    if for_gang.team == gang.team:
        reason = f"preempted for {for_gang.key} (priority {for_gang.priority})"
    else:
        reason = f"reclaimed by team {for_gang.team!r} for {for_gang.key}"
    taken = members.evictions(gang, now, reason=reason)
    for name, m in list(gang.members.items()):
        if m.phase in ACTIVE:  # they go: it waits for its pods to come back
            del gang.members[name]
    gang.complete = True  # (declared or not: admitted again only once they are back)
    state.enqueue(gang)
    return [
        unadmit(gang, now, reason=reason),
        *taken,
        GangPreempted(
            at=now,
            gang=gang.key,
            team=gang.team,
            for_team=for_gang.team,
            for_gang=for_gang.key,
            gpus=gpus,
        ),
    ]
