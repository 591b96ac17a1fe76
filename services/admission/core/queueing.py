"""Gang admission: quota, borrowing, reclaim, and each team's queue in order.

One cycle (``admit``), per team in order of team priority:

1. snapshot: the head of the team's queue and what the team uses;
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

from proto import ids, keys
from proto.actions import Annotate, AnyAction, Binding, EvictGang
from proto.admission import GangAdmitted, GangPreempted, GangQueued
from services.admission.core.gangs import ACTIVE, Gang, queue_key
from services.admission.core.state import State, on_team

__all__ = ["admit", "preempt", "queue_key", "queued", "reclaim_plan", "remark"]

Output = AnyAction | GangAdmitted | GangQueued | GangPreempted


def admit(state: State, now: float) -> list[Output]:
    """Admit every queue head that fits, team by team, until nothing changes."""
    outputs: list[Output] = []
    teams = sorted(state.config.teams, key=lambda t: (-t.priority, t.name))
    changed = True
    while changed:
        changed = False
        for team in teams:
            while state.queues.get(team.name):
                key = state.queues[team.name][0][1]
                outputs.extend(_try(state, state.gangs[key], now))
                if not state.gangs[key].admitted:
                    break
                changed = True
    return outputs


def _try(state: State, gang: Gang, now: float) -> list[Output]:
    if not gang.known:
        return _wait(
            state,
            gang,
            now,
            reason=(
                f"waiting for a member pod (or the PodGroup annotation {keys.GPUS_PER_POD}) "
                "to learn the gang's GPU demand"
            ),
        )
    need, team = gang.gpus, gang.team
    used, quota, limit = state.used.get(team, 0), state.quota(team), state.borrow_limit(team)
    if need > state.ceiling(team):
        return _wait(
            state,
            gang,
            now,
            reason=(
                f"needs {need} GPUs but a gang of team {team!r} runs either within its quota "
                f"({quota}) or wholly on borrowed GPUs (at most {limit}), so at most "
                f"{state.ceiling(team)}"
            ),
        )
    if used + need <= quota:
        return _in_quota(state, gang, now)
    if limit == 0:
        return _wait(
            state,
            gang,
            now,
            reason=(
                f"team {team!r} uses {used} of its {quota} GPU quota; the gang needs {need} "
                "and the team may not borrow"
            ),
        )
    borrowed = state.borrowed(team)
    if borrowed + need > limit:
        return _wait(
            state,
            gang,
            now,
            reason=(
                f"team {team!r} uses {used} of its {quota} GPU quota and borrows {borrowed}; "
                f"the gang needs {need}, which would borrow {borrowed + need} of at most {limit}"
            ),
        )
    lendable = min(state.lendable(team), state.free())
    if need > lendable:
        return _wait(
            state,
            gang,
            now,
            reason=(
                f"team {team!r} is at quota ({used}/{quota} GPUs) and other teams lend only "
                f"{lendable} idle GPUs; the gang needs {need}"
            ),
        )
    return _commit(state, gang, now, borrowing=True)


def _in_quota(state: State, gang: Gang, now: float) -> list[Output]:
    """Within quota: on the team's own nodes, reclaiming borrowed GPUs if they are short."""
    need, team = gang.gpus, gang.team
    room, free = state.room(team), state.free()
    outputs: list[Output] = []
    if need > room or need > free:
        victims = reclaim_plan(state, team=team, short_own=need - room, short=need - free)
        if not victims:
            return _wait(
                state,
                gang,
                now,
                reason=(
                    f"within team {team!r} quota, waiting for capacity: needs {need} GPUs, "
                    f"{max(0, min(room, free))} free on the team's nodes"
                ),
            )
        for victim in victims:
            outputs.extend(preempt(state, victim, now, for_gang=gang))
    return outputs + _commit(state, gang, now, borrowing=False)


def reclaim_plan(state: State, *, team: str, short_own: int, short: int) -> list[Gang]:
    """Borrowing gangs of other teams to preempt whole ([]: not enough): first those
    bound to ``team``'s nodes until ``short_own`` GPUs are back there, then any until
    ``short`` GPUs are free in the cluster; lowest team priority, then lowest gang
    priority, then newest first."""
    priority = {t.name: t.priority for t in state.config.teams}
    candidates = sorted(
        (g for g in state.holding() if g.admitted and g.borrowed > 0 and g.team != team),
        key=lambda g: (priority.get(g.team, 0), g.priority, -g.created_at, g.key),
    )
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
    """Evict the whole gang, take back its admission and put it back in its queue."""
    pods = tuple(
        Binding(namespace=gang.namespace, pod=name, uid=m.uid, node=m.node)
        for name, m in sorted(gang.members.items())
        if m.phase in ACTIVE
    )
    gpus = gang.held
    state.hold(gang, 0, borrowing=False)
    gang.admitted, gang.reason = False, ""
    state.enqueue(gang)
    reason = f"reclaimed by team {for_gang.team!r} for {for_gang.key}"
    when = f"{now:.6f}"  # a gang is preempted at most once at one time
    return [
        Annotate(
            id=ids.make("unadmit", gang.key, when),
            by="admission",
            at=now,
            priority="admission",
            reason=reason,
            kind=gang.kind,
            api=gang.api,
            namespace=gang.namespace,
            name=gang.marked,
            annotations={keys.ADMITTED: None, keys.BORROWING: None},
        ),
        EvictGang(
            id=ids.make("evict", gang.key, when),
            by="admission",
            at=now,
            priority="admission",
            reason=reason,
            gang=gang.key,
            pods=pods,
        ),
        GangPreempted(
            at=now,
            gang=gang.key,
            team=gang.team,
            for_team=for_gang.team,
            for_gang=for_gang.key,
            gpus=gpus,
        ),
    ]


def _commit(state: State, gang: Gang, now: float, *, borrowing: bool) -> list[Output]:
    state.dequeue(gang)
    gang.admitted, gang.reason = True, ""
    state.hold(gang, gang.gpus, borrowing=borrowing)
    borrowed = gang.borrowed
    annotations: dict[str, str | None] = {
        keys.ADMITTED: "true",
        keys.BORROWING: "true" if borrowed else None,
    }
    return [
        Annotate(
            id=ids.make("admit", gang.key, f"{now:.6f}"),
            by="admission",
            at=now,
            priority="admission",
            reason="borrowing" if borrowed else "within quota",
            kind=gang.kind,
            api=gang.api,
            namespace=gang.namespace,
            name=gang.marked,
            annotations=annotations,
        ),
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


def _wait(state: State, gang: Gang, now: float, *, reason: str) -> list[Output]:
    if reason == gang.reason:
        return []
    gang.reason = reason
    return [
        GangQueued(at=now, gang=gang.key, team=gang.team, reason=reason, position=0, gpus=gang.gpus)
    ]


def queued(state: State, gang: Gang, now: float) -> GangQueued:
    """The event for a gang entering its queue behind others."""
    position = state.position(gang)
    reason = f"waiting behind {position} earlier gangs of team {gang.team!r}"
    gang.reason = reason
    return GangQueued(
        at=now, gang=gang.key, team=gang.team, reason=reason, position=position, gpus=gang.gpus
    )
