"""Gang admission: quota, borrowing, and each team's queue in order (whom to take off
for a gang, by reclaim or preemption: ``reclaiming``).

One cycle (``admit``), one gang at a time, teams in order of team priority, then
weighted fair share (``team_order``):

1. snapshot: the team's queue in order (StrictFIFO: its head only; BestEffortFIFO:
   past gangs that cannot go now, less what a starving gang reserves; gangs that can
   never go, or whose pods did not come, are set aside) and what the team uses;
2. decide: in quota (room on the team's own nodes, reclaiming other teams' borrowing
   gangs there if short), or borrowing, whole, within the team's limit and what
   lenders have idle (it then runs on lenders' nodes only), or wait with a reason;
3. assume: count the gang's GPUs against its team at once;
4. commit: an ``Annotate`` action marks the PodGroup admitted (``EvictGang`` and
   un-annotate for a preempted borrower).

Borrowed capacity is reclaimed whole-gang only, lowest team priority first, then
lowest gang priority, then newest.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

import msgspec

from baton.proto import ids, keys
from baton.proto.actions import Annotate
from baton.proto.admission import GangAdmitted, GangPreempted, GangQueued
from baton.services.admission.core import members
from baton.services.admission.core.gangs import ACTIVE, Gang, queue_key
from baton.services.admission.core.members import grow, members_reason
from baton.services.admission.core.reclaiming import (
    Output,
    fits_without,
    lower_priority,
    preempt,
    reclaim_plan,
    unadmit,
)
from baton.services.admission.core.state import State

__all__ = ["admit", "grow_paused", "queue_key", "queued", "remark", "team_order", "wants_tick"]


def admit(state: State, now: float, *, every: bool = True) -> list[Output]:
    """Admit gangs until none more can go: one gang at a time, from the team served
    first (``team_order``), so shares are re-weighed after every admission. Unless
    ``every`` (a tick, a new config), a team with no room of any kind is passed over
    without going through its queue (with many gangs queued, most events change
    nothing); only its gangs not yet told why they wait are looked at.

    A team found stuck stays stuck while gangs are admitted (an admission only takes
    GPUs, from the cluster and from what lenders have idle), so after an admission
    only the teams that could still admit are looked at again; all of them after a
    preemption, which gives GPUs back."""
    outputs: list[Output] = release_memberless(state, now) if every and state.short else []
    outputs += grow_paused(state, now)
    stuck = set() if every else _stuck_teams(state, [t.name for t in state.config.teams])
    teams = [t for t in team_order(state) if t not in stuck or not _tell(state, t, now, outputs)]
    walks: dict[str, Walk] = {}
    while True:
        seen = len(outputs)
        served = next(
            (t for t in teams if _serve(state, t, now, outputs, walks.setdefault(t, Walk()))), None
        )
        if served is None:
            return outputs
        preempted = any(isinstance(o, GangPreempted) for o in outputs[seen:])
        if preempted:
            walks = {}  # GPUs came back: gangs passed over may go now
        if not every:
            if preempted:
                stuck = set()  # GPUs came back: any team may go again
            stuck -= {served}
            again = [t.name for t in state.config.teams if t.name not in stuck]
            stuck |= _stuck_teams(state, again)
        teams = [t for t in team_order(state) if t not in stuck]


def _stuck_teams(state: State, teams: list[str]) -> set[str]:
    """Which of ``teams`` are stuck (``_stuck``), with what lenders have idle and the
    free GPUs counted once for all of them."""
    lendable, free = state.lendables(), state.free()
    return {t for t in teams if _stuck(state, t, min(lendable[t], free))}


def _tell(state: State, team: str, now: float, outputs: list[Output]) -> bool:
    """Tell a stuck team's new gangs why they wait (False: one might be admitted after
    all, a gang that needs no GPU: go through the queue)."""
    for key in sorted(k for k in state.untold if state.gangs[k].team == team):
        gang = state.gangs[key]
        if gang.known and gang.gpus == 0:
            return False
        aside = _aside(state, gang, now)
        outputs.extend(
            _wait(state, gang, now, reason=aside, aside=True) if aside else _try(state, gang, now)
        )
    return True


def _stuck(state: State, team: str, lendable: int) -> bool:
    """No gang of the team that needs GPUs could be admitted: not even its smallest fits
    what is left of its quota, nor what it could borrow (``lendable``: what lenders have
    idle, at most the free GPUs), and it has no gang in quota to preempt."""
    least = max(state.least_need(team), 1)
    if state.quota(team) - state.used.get(team, 0) >= least:
        return False  # room in quota (what blocks it, borrowers, may be reclaimed)
    borrow = state.borrow_limit(team) - state.borrowed(team)
    if borrow >= least and lendable >= least:
        return False
    queue = state.queues.get(team)
    if not queue or not state.config.queueing.preempt_within_team:
        return True
    top = -queue[0][0][0]  # the queue is by priority (kept in its key), highest first
    return state.least_priority(team) >= top


def team_order(state: State) -> list[str]:
    """Teams by priority (high first), then weighted fair share: the GPUs a team holds
    (in quota and borrowed) over its weight, lowest first; then name."""
    return [
        t.name
        for t in sorted(
            state.config.teams,
            key=lambda t: (-t.priority, share(state, t.name) / t.weight, t.name),
        )
    ]


def share(state: State, team: str) -> float:
    """What the team holds, relative to its quota (its GPUs if it has no quota)."""
    held = state.used.get(team, 0) + state.lent.get(team, 0)
    return held / max(state.quota(team), 1)


@dataclass(slots=True)
class Walk:
    """Where one ``admit`` has got to in a team's queue. An admission only takes GPUs,
    so the gangs passed over before it still cannot go: the next ``_serve`` of the team
    goes on after the gang admitted instead of from the head again (with 11,000 gangs
    queued at 7,500 nodes, each admission walked them all). A preemption, which gives
    GPUs back, starts every walk again."""

    after: tuple[tuple[int, float, int, str], str] | None = None  # the last queue entry admitted
    tried: dict[int, str] = field(default_factory=dict)  # need -> why it waits
    reserve: Gang | None = None  # a starving gang those behind must leave room for


def _serve(state: State, team: str, now: float, outputs: list[Output], walk: Walk) -> bool:
    """Admit the next gang of the team's queue that may go (True), in the team's
    queueing strategy: StrictFIFO stops at the head; BestEffortFIFO goes on past gangs
    that cannot go now, less what a starving gang (waited ``starvation_s``) reserves."""
    queueing = state.config.queueing
    strict = queueing.strategy == "StrictFIFO"
    tried = walk.tried  # the same need fares the same
    ceiling = state.ceiling(team)
    state.wake_due(team, now)
    queue = state.loud.get(team, [])  # less the gangs hushed: told, nothing new to say
    start = bisect.bisect_right(queue, walk.after) if walk.after is not None else 0
    for entry in queue[start:]:
        key = entry[1]
        gang = state.gangs[key]
        if gang.retry_at > now:  # given back unplaced: it backs off (``unplaced``)
            outputs.extend(_wait(state, gang, now, reason=gang.reason))
            continue
        need, known = gang.gpus, gang.known
        if known and need in tried and need <= ceiling and len(gang.members) >= gang.min_member:
            if tried[need] != gang.reason:  # the common case, cheaply: nothing new to say
                outputs.extend(_wait(state, gang, now, reason=tried[need]))
            continue
        aside = _aside(state, gang, now)
        if aside:
            outputs.extend(_wait(state, gang, now, reason=aside, aside=True))
            if len(gang.members) < gang.min_member:  # (all there: others' reasons apply)
                state.hush(gang, _quiet_until(state, gang, now))
            continue
        gang.aside = ""
        if gang.waiting_members:  # never a head: it may have no pods for a long time
            outputs.extend(_wait(state, gang, now, reason=members_reason(gang)))
            state.hush(gang, _quiet_until(state, gang, now))
            continue
        reserve = walk.reserve
        held = reserve.gpus if reserve is not None else 0
        if known and need in tried:
            outputs.extend(_wait(state, gang, now, reason=tried[need]))
            continue
        outputs.extend(_try(state, gang, now, reserve=held, behind=reserve))
        if gang.admitted:
            walk.after = entry
            return True
        if strict:
            return False
        if known:
            tried[need] = gang.reason
            if reserve is None and now - gang.created_at >= queueing.starvation_s:
                walk.reserve, walk.tried = gang, {}  # those behind must leave it room
                tried = walk.tried
    walk.after = queue[-1] if queue else None
    return False


def _quiet_until(state: State, gang: Gang, now: float) -> float:
    """Until when ``_aside`` says the same of an unchanged gang: its members' time-out
    (``scheduleTimeoutSeconds``, else ``members_timeout_s``) sets it aside. Besides the
    time, what a gang set aside or short of members is told depends on the gang (a
    change wakes it), the largest node, the config, and for a gang of known demand its
    team's quota and borrowing limit (``State.wake_due``). With 20,000 gangs queued,
    most of them waiting for their pods, each event's walk told every one of them the
    same again (94% of admission's time at 15,000 nodes); hushed, they are left out."""
    if gang.lone or gang.carrier or gang.aside:
        return float("inf")
    limit = gang.schedule_timeout or state.config.queueing.members_timeout_s
    return gang.created_at + limit if now < gang.created_at + limit else float("inf")


def _aside(state: State, gang: Gang, now: float) -> str:
    """Why a gang is set aside rather than waiting its turn ('' if it is not): it could
    never be admitted, or its member pods did not come."""
    if gang.known and gang.gpus > state.ceiling(gang.team):
        team, (how, fix) = gang.team, members.sized_by(gang)
        return (
            f"set aside: needs {gang.gpus} GPUs ({how}) but a gang of team {team!r} runs "
            f"either within its quota ({state.quota(team)}) or wholly on borrowed GPUs (at "
            f"most {state.borrow_limit(team)}), so at most {state.ceiling(team)}; {fix} "
            "or ask for a larger quota"
        )
    if problem := _no_node(state, gang):
        return problem
    if gang.lone or gang.carrier:
        return ""
    active = sum(1 for m in gang.members.values() if m.phase in ACTIVE)
    limit = gang.schedule_timeout or state.config.queueing.members_timeout_s
    if active < gang.min_member and now - gang.created_at >= limit:
        which = "scheduleTimeoutSeconds" if gang.schedule_timeout else "members_timeout_s"
        return (
            f"set aside: {active} of {gang.min_member} member pods after {limit:g} s "
            f"({which}); check the pods' pod-group label and the namespace's Events for "
            "pods the webhook refused"
        )
    return ""


def _no_node(state: State, gang: Gang) -> str:
    """A member asks more GPUs than any node has (the nodes shrank or went since the
    webhook let it in): it could never be placed, so it holds no quota."""
    widest = max((m.gpus for m in gang.members.values() if m.phase in ACTIVE), default=0)
    widest = max(widest, gang.gpus_per_pod or 0)
    if not widest:
        return ""
    most, name = state.largest_node()
    if not name or widest <= most:
        return ""
    return (
        f"set aside: a member asks {widest} GPUs but no node has more than {most} (the "
        f"largest: {name}); use pods of at most {most} GPUs, or wait for larger nodes"
    )


def wants_tick(state: State, now: float) -> bool:
    """Time alone changes decisions while gangs wait: a gang starts to starve, a PodGroup
    short of members is set aside, a running gang passes its minimum run time."""
    return any(state.queues.values()) or bool(state.short or state.paused or state.unplaced)


def grow_paused(state: State, now: float) -> list[Output]:
    """Admitted gangs whose new members wait for room (``members.grow``): counted and
    marked admitted again once their team can hold them, first in a cycle."""
    outputs: list[Output] = []
    for key in sorted(state.paused):
        outputs.extend(grow(state, state.gangs[key], now))
    return outputs


def release_memberless(state: State, now: float) -> list[Output]:
    """Admitted PodGroups whose member pods never all came, past their
    ``scheduleTimeoutSeconds`` (else ``members_timeout_s``) since creation: a gang
    declaring its GPUs (``baton.io/gpus-per-pod``, ``spec.minResources``) is admitted
    before its pods exist, and without this held its team's quota forever. Its
    admission is taken back, its GPUs go back to the team, and it is set aside (a
    status and an Event, like a queued gang short of members) until its pods come."""
    outputs: list[Output] = []
    limit_s = state.config.queueing.members_timeout_s
    for key in sorted(state.short):
        gang = state.gangs[key]
        limit = gang.schedule_timeout or limit_s
        if now - gang.created_at < limit:
            continue
        gpus = gang.held
        state.hold(gang, 0, borrowing=False)
        gang.admitted = False
        members.resume(state, gang)
        state.enqueue(gang)
        outputs.append(unadmit(gang, now, reason="its member pods did not come"))
        aside = _aside(state, gang, now)
        gang.aside = gang.reason = aside
        gang.told_gpus = gang.gpus
        state.untold.discard(gang.key)
        outputs.append(
            GangQueued(
                at=now, gang=gang.key, team=gang.team, position=0, gpus=gang.gpus,
                reason=f"{aside}; it was admitted and held {gpus} GPUs of the quota of "
                f"team {gang.team!r}, now given back", set_aside=True,
            )
        )  # fmt: skip
    return outputs


def _try(
    state: State, gang: Gang, now: float, *, reserve: int = 0, behind: Gang | None = None
) -> list[Output]:
    if not gang.known or gang.waiting_members:
        return _wait(state, gang, now, reason=members_reason(gang))
    if over := state.over_devices(gang):
        return _wait(state, gang, now, reason=over)
    need, team = gang.gpus, gang.team
    used, quota, limit = state.used.get(team, 0), state.quota(team), state.borrow_limit(team)
    kept = f" and {reserve} reserved for {behind.key}, which has waited longest" if behind else ""
    if used + reserve + need <= quota:
        return _in_quota(state, gang, now, reserve=reserve, kept=kept)
    borrowed = state.borrowed(team)
    lendable = min(state.lendable(team), state.free()) - reserve
    if limit and borrowed + need <= limit and need <= lendable:
        return _commit(state, gang, now, borrowing=True)
    victims = lower_priority(state, gang, now) if behind is None else []  # nothing ahead reserves
    if victims and fits_without(state, gang, victims, now):
        outputs: list[Output] = []
        for victim in victims:
            outputs.extend(preempt(state, victim, now, for_gang=gang))
        return outputs + _in_quota(state, gang, now, reserve=0, kept="")
    if limit == 0:
        reason = (
            f"team {team!r} uses {used} of its {quota} GPU quota{kept}; the gang needs "
            f"{need} and the team may not borrow"
        )
    elif borrowed + need > limit:
        reason = (
            f"team {team!r} uses {used} of its {quota} GPU quota and borrows {borrowed}; "
            f"the gang needs {need}, which would borrow {borrowed + need} of at most {limit}"
        )
    else:
        reason = (
            f"team {team!r} is at quota ({used}/{quota} GPUs{kept}) and other teams lend "
            f"only {max(lendable, 0)} idle GPUs; the gang needs {need}"
        )
    return _wait(state, gang, now, reason=reason)


def _in_quota(state: State, gang: Gang, now: float, *, reserve: int, kept: str) -> list[Output]:
    """Within quota: on the team's own nodes, reclaiming borrowed GPUs if they are short
    (less what a starving gang ahead reserves)."""
    need, team = gang.gpus, gang.team
    room, free = state.room(team) - reserve, state.free() - reserve
    outputs: list[Output] = []
    if need > room or need > free:
        victims = reclaim_plan(state, team=team, short_own=need - room, short=need - free, now=now)
        if not victims:
            return _wait(
                state,
                gang,
                now,
                reason=(
                    f"within team {team!r} quota, waiting for capacity: needs {need} GPUs, "
                    f"{max(0, min(room, free))} free on the team's nodes{kept}"
                ),
            )
        for victim in victims:
            outputs.extend(preempt(state, victim, now, for_gang=gang))
    return outputs + _commit(state, gang, now, borrowing=False)


def _commit(state: State, gang: Gang, now: float, *, borrowing: bool) -> list[Output]:
    state.dequeue(gang)
    gang.admitted, gang.reason, gang.admitted_at = True, "", now
    state.hold(gang, gang.gpus, borrowing=borrowing, devices=gang.devices)
    if not gang.bound:
        state.unplaced.add(gang.key)
    borrowed = gang.borrowed
    annotations: dict[str, str | None] = {
        keys.ADMITTED: "true",
        keys.BORROWING: "true" if borrowed else None,
    }
    reason = "borrowing" if borrowed else "within quota"
    return [
        members.mark(gang, now, what="admit", reason=reason, annotations=annotations),
        GangAdmitted(at=now, gang=gang.key, team=gang.team, gpus=gang.gpus, borrowed=borrowed),
    ]


def remark(gang: Gang, now: float) -> Annotate:
    """Put an admitted gang's marks on its carrier again (a new carrier pod)."""
    return Annotate(
        id=ids.make("remark", gang.key, gang.carrier, f"{now:.6f}"),
        by="admission",
        at=now,
        priority="admission",
        reason="the pod that carried the gang's admission is gone",
        kind=gang.kind,
        namespace=gang.namespace,
        name=gang.marked,
        annotations={
            keys.ADMITTED: "true",
            keys.BORROWING: "true" if gang.borrowed else None,
        },
    )


def _wait(
    state: State, gang: Gang, now: float, *, reason: str, aside: bool = False
) -> list[Output]:
    said = reason == gang.reason or _gist(reason) == _gist(gang.reason)  # equal: no regex
    same = said and gang.sized == gang.told_gpus
    gang.aside, gang.told_gpus = (reason if aside else ""), gang.sized
    state.untold.discard(gang.key)
    gang.reason = reason
    if same:
        return []
    event = GangQueued(
        at=now, gang=gang.key, team=gang.team, reason=reason, position=0, gpus=gang.gpus
    )
    return [msgspec.structs.replace(event, set_aside=True) if aside else event]


def _gist(reason: str) -> str:
    """A reason without its counts: a waiting gang is not told again each time its team's
    usage or its place in the queue moves by a few GPUs or gangs (on a busy cluster that
    re-published every waiting gang after every admission), only when why it waits does."""
    return re.sub(r"\d+", "#", reason)


def queued(state: State, gang: Gang, now: float) -> GangQueued:
    """The event for a gang entering its queue behind others."""
    position = state.position(gang)
    reason = (
        f"waiting behind {position} earlier gangs of team {gang.team!r}"
        if position
        else f"first in team {gang.team!r}'s queue, about to be considered"
    )
    gang.reason = reason
    return GangQueued(
        at=now, gang=gang.key, team=gang.team, reason=reason, position=position, gpus=gang.gpus
    )
