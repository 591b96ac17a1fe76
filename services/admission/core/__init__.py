"""The admission core (pure): ``step(state, event, now) -> (state, outputs)``.

Inputs are the bridge's object events (nodes, pods, PodGroups) and ``TeamsLoaded``
when the team config is read or changes. Outputs are actions for the actuator
(labels and taints for team nodes, ``Annotate`` to admit a gang, ``EvictGang`` to
reclaim borrowed GPUs) and admission events saying what was decided and why.
"""

from __future__ import annotations

import msgspec

from proto.actions import AnyAction
from proto.admission import AnyAdmissionEvent, GangQueued, GangReleased
from proto.k8s import (
    GPU,
    SCHEDULER_NAME,
    EndpointSliceEvent,
    NodeEvent,
    Pod,
    PodEvent,
    PodGroup,
    PodGroupEvent,
)
from services.admission.core import nodes, queueing
from services.admission.core.gangs import ADMITTED, BORROWING, GPUS_PER_POD, Gang, Member
from services.admission.core.state import State
from services.admission.teams import DEFAULT, TeamConfig

__all__ = ["Input", "Output", "State", "TeamsLoaded", "initial", "step"]


class TeamsLoaded(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="admission.teams-loaded.v1"
):
    """The team config was (re)read and validated by the shell."""

    config: TeamConfig
    at: float


Input = NodeEvent | PodEvent | PodGroupEvent | EndpointSliceEvent | TeamsLoaded
Output = AnyAction | AnyAdmissionEvent


def initial(config: TeamConfig = DEFAULT) -> State:
    state = State()
    _load(state, config)
    return state


def step(state: State, event: Input, now: float) -> tuple[State, tuple[Output, ...]]:
    """Decide on one event. ``state`` is never changed: the new state is a copy on write
    of it, so a caller may drop the result (outputs not published) and step again."""
    if not _relevant(event):
        return state, ()
    state = state.fork()
    outputs: list[Output] = []
    match event:
        case NodeEvent(op="upsert", node=node):
            outputs += nodes.upsert(state, node, now)
        case NodeEvent(op="delete", node=node):
            outputs += nodes.delete(state, node.name, now)
        case PodGroupEvent(op=op, pod_group=group):
            outputs += _pod_group(state, group, now, deleted=op == "delete")
        case PodEvent(op=op, pod=pod) if pod.gang:
            outputs += _pod(state, pod, now, deleted=op == "delete")
        case PodEvent(op=op, pod=pod):
            outputs += _lone(state, pod, now, deleted=op == "delete")
        case TeamsLoaded(config=config):
            _load(state, config)
            outputs += nodes.reassign_all(state, now)
            _rehome_gangs(state)
    outputs += queueing.admit(state, now)
    return state, tuple(outputs)


def _relevant(event: Input) -> bool:
    if isinstance(event, PodEvent):
        return bool(event.pod.gang) or event.pod.scheduler_name == SCHEDULER_NAME
    return isinstance(event, NodeEvent | PodGroupEvent | TeamsLoaded)


def _load(state: State, config: TeamConfig) -> None:
    state.config = config
    state.specs = config.by_name
    state.ns_team = {ns: t.name for t in config.teams for ns in t.namespaces}
    state.pool_team = {p: t.name for t in config.teams for p in t.pools}


def _pod_group(state: State, group: PodGroup, now: float, *, deleted: bool) -> list[Output]:
    known = state.gangs.get(group.key)
    if deleted:
        return _forget(state, state.edit(group.key), now) if known is not None else []
    per_pod = _int_annotation(group.annotations.get(GPUS_PER_POD))
    min_member = max(1, group.min_member)
    if known is not None:
        if (known.min_member, known.gpus_per_pod) == (min_member, per_pod):
            return _changed(state, known, now)
        gang = state.edit(group.key)
        gang.min_member, gang.gpus_per_pod = min_member, per_pod
        return _changed(state, gang, now)
    gang = Gang(
        key=group.key,
        team=state.team_of(group.namespace),
        min_member=min_member,
        created_at=group.created_at or now,
        gpus_per_pod=per_pod,
        members=state.take_pending(group.key),
    )
    return _new_gang(state, gang, group.annotations, now)


def _new_gang(state: State, gang: Gang, marks: dict[str, str], now: float) -> list[Output]:
    """Queue a gang seen for the first time, or adopt it if it was admitted before a restart."""
    state.add_gang(gang)
    if not gang.team:
        gang.reason = f"namespace {gang.namespace!r} belongs to no team in the team config"
        return [
            GangQueued(
                at=now, gang=gang.key, team="", reason=gang.reason, position=0, gpus=gang.gpus
            )
        ]
    if marks.get(ADMITTED) == "true":  # admitted before a restart: adopt
        gang.admitted = True
        state.hold(gang, gang.gpus, borrowing=marks.get(BORROWING) == "true")
        return []
    state.enqueue(gang)
    return [queueing.queued(state, gang, now)]


def _pod(state: State, pod: Pod, now: float, *, deleted: bool) -> list[Output]:
    key = f"{pod.namespace}/{pod.gang}"
    known = state.gangs.get(key)
    have = known.members if known is not None else state.pending_pods.get(key, {})
    member = None if deleted else _member(pod)
    if have.get(pod.name) == member:
        return [] if known is None else _changed(state, known, now)
    members = state.w_members(key) if known is not None else state.w_pending(key)
    if member is None:
        members.pop(pod.name, None)
    else:
        members[pod.name] = member
    if known is None:
        if not members:
            state.take_pending(key)
        return []
    return _changed(state, state.gangs[key], now)


def _lone(state: State, pod: Pod, now: float, *, deleted: bool) -> list[Output]:
    """A Baton pod with no PodGroup is a gang of one, marked admitted on the pod itself."""
    known = state.gangs.get(pod.key)
    if known is not None and not known.lone:
        return []  # a PodGroup of the same name holds the key
    if deleted:
        return _forget(state, state.edit(pod.key), now) if known is not None else []
    member = _member(pod)
    if known is None:
        if pod.phase in ("Succeeded", "Failed") or pod.terminating:
            return []
        gang = Gang(
            key=pod.key,
            team=state.team_of(pod.namespace),
            min_member=1,
            created_at=pod.created_at or now,
            members={pod.name: member},
            lone=True,
        )
        return _new_gang(state, gang, pod.annotations, now)
    if known.members.get(pod.name) != member:
        state.w_members(pod.key)[pod.name] = member
    return _changed(state, state.gangs[pod.key], now)


def _member(pod: Pod) -> Member:
    return Member(
        gpus=pod.requests.get(GPU, 0),
        priority=pod.priority,
        phase=pod.phase,
        uid=pod.uid,
        node=pod.node_name,
    )


def _changed(state: State, gang: Gang, now: float) -> list[Output]:
    """A gang's demand, priority or members changed: re-account, finish, or re-queue it."""
    if gang.admitted:
        if gang.held != gang.gpus:
            gang = state.edit(gang.key)
            state.hold(gang, gang.gpus)
        members = gang.members.values()
        if len(gang.members) >= gang.min_member and all(
            m.phase in ("Succeeded", "Failed") for m in members
        ):
            return _release(state, state.edit(gang.key), now, finished=True)
        return []
    if gang.team and not gang.finished and gang.qkey != queueing.queue_key(gang):
        state.enqueue(state.edit(gang.key))  # its priority changed: move it
    return []


def _forget(state: State, gang: Gang, now: float) -> list[Output]:
    outputs = _release(state, gang, now, finished=True) if gang.admitted else []
    state.dequeue(gang)
    state.drop_gang(gang.key)
    return outputs


def _release(state: State, gang: Gang, now: float, *, finished: bool) -> list[Output]:
    gpus = gang.held
    state.hold(gang, 0, borrowing=False)
    gang.admitted, gang.finished = False, finished
    state.dequeue(gang)
    return [GangReleased(at=now, gang=gang.key, team=gang.team, gpus=gpus)]


def _rehome_gangs(state: State) -> None:
    """Namespaces may have moved between teams: move gangs (admitted ones keep running)."""
    for known in sorted(state.gangs.values(), key=lambda g: g.key):
        team = state.team_of(known.namespace)
        if team == known.team:
            continue
        gang = state.edit(known.key)
        if gang.admitted:
            held, borrowing = gang.held, gang.borrowed > 0
            state.hold(gang, 0)
            gang.team = team
            state.hold(gang, held, borrowing=borrowing)
        else:
            state.dequeue(gang)
            gang.team, gang.reason = team, ""
            if team and not gang.finished:
                state.enqueue(gang)


def _int_annotation(value: str | None) -> int | None:
    if value is None or not value.isdigit():
        return None
    return int(value)
