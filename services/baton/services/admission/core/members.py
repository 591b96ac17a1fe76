"""What a gang's member pods mean for its team's quota (pure).

- A gang's demand is counted from what its members ask, shape by shape
  (``Gang.demand``); while fewer than minMember members exist and its PodGroup
  declares nothing, it waits for members (``members_reason``).
- Every member counts against its team from the moment the gang is admitted: a member
  that joins an admitted gang is counted if the team can hold it (within its quota, or
  what it may still borrow); if not, the gang's admission marks are taken back
  (``paused``) so the gang service places none of its new members, and put back once
  the team can hold them (``grow``), GPUs and devices under a ``teams[].devices`` cap
  alike. What it held stays counted meanwhile: its running members keep running.
- A gang taken off by admission (reclaimed, preempted) has its bare pods recreated
  (``RecreatePod``) and the others evicted for their controller (``evictions``).
"""

from __future__ import annotations

from baton.proto import ids, keys
from baton.proto.actions import Annotate, Binding, EvictGang, RecreatePod
from baton.proto.admission import GangAdmitted, GangQueued
from baton.services.admission.core.gangs import ACTIVE, Gang
from baton.services.admission.core.state import State

Taken = EvictGang | RecreatePod
Grown = Annotate | GangAdmitted | GangQueued


def members_reason(gang: Gang) -> str:
    """Why a gang short of member pods waits."""
    have = len(gang.members)
    if gang.complete:
        return (
            f"waiting for members: {have} of {gang.min_member} member pods; its pods went "
            "(evicted, recreated by Baton or their controller) and it is admitted again "
            "once they are back"
        )
    return (
        f"waiting for members: {have} of {gang.min_member} member pods exist; the gang's "
        "GPU demand is counted from what its members ask (or declare it on the PodGroup: "
        f"spec.minResources, or annotation {keys.GPUS_PER_POD})"
    )


def sized_by(gang: Gang, *, joining: bool = False) -> tuple[str, str]:
    """What says the GPUs a gang counts, and how its author lowers them (for a refusal's
    advice: the real cause, never minMember x the largest pod)."""
    need = gang.gpus
    if gang.min_gpus and need == gang.min_gpus:
        return "spec.minResources", "lower spec.minResources"
    if gang.gpus_per_pod is not None and need == gang.demand:
        how = f"minMember {gang.min_member} x {gang.gpus_per_pod}, annotation {keys.GPUS_PER_POD}"
        return how, "lower minMember"
    asks = sorted((m.gpus for m in gang.members.values() if m.phase in ACTIVE), reverse=True)
    shown = " + ".join(map(str, asks[:8])) + (" + ..." if len(asks) > 8 else "")
    which = "with this one" if joining else "ask"
    how = f"{len(asks)} member pods {which}: {shown}; every member counts"
    return how, "use fewer or smaller member pods"


def grow(state: State, gang: Gang, now: float) -> list[Grown]:
    """An admitted gang whose live members ask more than it holds: count them if its
    team can hold them, else take its marks back until it can."""
    extra = gang.gpus - gang.held
    devices = state.over_devices(gang) if gang.devices != gang.held_devices else ""
    if (extra > 0 and not _fits(state, gang, extra)) or devices:
        if gang.paused:
            return []
        gang.paused = True
        state.paused.add(gang.key)
        reason = devices or _over(state, gang, extra)
        gang.reason = reason
        return [
            _marks(gang, now, admitted=False, reason=reason),
            GangQueued(
                at=now, gang=gang.key, team=gang.team, reason=reason, position=0, gpus=gang.gpus
            ),
        ]
    if extra > 0 or gang.devices != gang.held_devices:
        state.hold(gang, gang.gpus, devices=gang.devices)
    if not gang.paused:
        return []
    resume(state, gang)
    gang.reason = ""
    return [
        _marks(gang, now, admitted=True, reason="its new members fit its team's quota"),
        GangAdmitted(at=now, gang=gang.key, team=gang.team, gpus=gang.held, borrowed=gang.borrowed),
    ]


def resume(state: State, gang: Gang) -> None:
    """Forget that the gang was paused (resumed, taken off or gone)."""
    gang.paused = False
    state.paused.discard(gang.key)


def _fits(state: State, gang: Gang, extra: int) -> bool:
    team = gang.team
    if gang.borrowed:
        lendable = min(state.lendable(team), state.free())
        return state.borrowed(team) + extra <= state.borrow_limit(team) and extra <= lendable
    return state.used.get(team, 0) + extra <= state.quota(team)


def _over(state: State, gang: Gang, extra: int) -> str:
    team = gang.team
    if gang.borrowed:
        where = (
            f"team {team!r} borrows {state.borrowed(team)} of at most "
            f"{state.borrow_limit(team)} GPUs"
        )
    else:
        where = f"team {team!r} uses {state.used.get(team, 0)} of its {state.quota(team)} GPU quota"
    return (
        f"admitted with {gang.held} GPUs; members that joined since ask {extra} more and "
        f"{where}: they are not placed until it can hold them (every member counts "
        "against its team)"
    )


def _marks(gang: Gang, now: float, *, admitted: bool, reason: str) -> Annotate:
    what = "resume" if admitted else "pause"
    return mark(gang, now, what=what, reason=reason,
                annotations={keys.ADMITTED: "true" if admitted else None})  # fmt: skip


def mark(
    gang: Gang, now: float, *, what: str, reason: str, annotations: dict[str, str | None]
) -> Annotate:
    """Set (or, None, remove) admission's annotations on what carries the gang's marks."""
    return Annotate(
        id=ids.make(what, gang.key, f"{now:.6f}"),
        by="admission",
        at=now,
        priority="admission",
        reason=reason,
        kind=gang.kind,
        api=gang.api,
        namespace=gang.namespace,
        name=gang.marked,
        annotations=annotations,
    )


def evictions(gang: Gang, now: float, *, reason: str) -> list[Taken]:
    """Every live member off: bare pods each recreated as a faithful unbound copy (so the
    gang can run again when it is admitted again), the others evicted in one
    ``EvictGang`` for their controller to recreate. The actuator copies no pod that
    has a controller (ownerReferences): those it only deletes."""
    live = sorted((name, m) for name, m in gang.members.items() if m.phase in ACTIVE)
    when = f"{now:.6f}"  # a gang is taken off at most once at one time
    outputs: list[Taken] = []
    evicted = tuple(
        Binding(namespace=gang.namespace, pod=name, uid=m.uid, node=m.node)
        for name, m in live
        if not m.bare
    )
    if evicted:
        outputs.append(
            EvictGang(
                id=ids.make("evict", gang.key, when), by="admission", at=now,
                priority="admission", reason=reason, gang=gang.key, pods=evicted,
            )
        )  # fmt: skip
    for name, m in live:
        if m.bare:
            outputs.append(
                RecreatePod(
                    id=ids.make("recreate", m.uid, "admission", when), by="admission", at=now,
                    priority="admission", reason=reason, gang=gang.key,
                    namespace=gang.namespace, pod=name, uid=m.uid,
                )
            )  # fmt: skip
    return outputs
