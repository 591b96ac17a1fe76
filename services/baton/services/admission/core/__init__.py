"""The admission core (pure): ``step(state, event, now) -> (state, outputs)``.

Inputs are the bridge's object events (nodes, pods, PodGroups) and ``TeamsLoaded``
when the team config is read or changes. Outputs are actions for the actuator
(labels and taints for team nodes, ``Annotate`` to admit a gang, ``EvictGang`` to
reclaim borrowed GPUs) and admission events saying what was decided and why.
"""

from __future__ import annotations

from baton.libs.view import is_bare
from baton.libs.view.devices import class_of
from baton.proto import keys
from baton.proto.actions import AnyAction
from baton.proto.admission import AnyAdmissionEvent, GangQueued, GangReleased, TeamsLoaded
from baton.proto.k8s import (
    GPU,
    SCHEDULER_NAME,
    DeviceClassEvent,
    EndpointSliceEvent,
    MachineDeploymentEvent,
    NodeEvent,
    Pod,
    PodEvent,
    PodGroup,
    PodGroupEvent,
    ResourceClaimEvent,
    ResourceSliceEvent,
)
from baton.proto.runner import Tick
from baton.services.admission.core import nodes, queueing, reclaiming, showing, unplaced
from baton.services.admission.core.gangs import ACTIVE, Gang, Member
from baton.services.admission.core.members import grow, resume
from baton.services.admission.core.state import State, recount_growth
from baton.services.admission.teams import DEFAULT, TeamConfig, is_default

__all__ = ["Input", "Output", "State", "TeamsLoaded", "initial", "step", "wants_tick"]


def wants_tick(state: State, now: float) -> bool:
    """Ticks while gangs wait (``queueing.wants_tick``) or a team's status may be stale."""
    return state.stale or queueing.wants_tick(state, now)


Input = (
    NodeEvent
    | PodEvent
    | PodGroupEvent
    | EndpointSliceEvent
    | MachineDeploymentEvent
    | TeamsLoaded
    | Tick
    | ResourceSliceEvent
    | DeviceClassEvent
    | ResourceClaimEvent
)
Output = AnyAction | AnyAdmissionEvent


def initial(config: TeamConfig = DEFAULT) -> State:
    state = State()
    _load(state, config)
    return state


def step(state: State, event: Input, now: float) -> tuple[State, tuple[Output, ...]]:
    """Decide on one event, changing ``state`` in place; returns it with the outputs."""
    if not _relevant(event):
        return state, ()
    counted, outputs = _claimed(state, event, now)
    if counted is not None:  # None: a device event, done; a pod whose claims are not made
        outputs += _decide(state, counted, now)
    return state, tuple(outputs)


def _decide(state: State, event: Input, now: float) -> list[Output]:
    outputs: list[Output] = []
    if isinstance(event, NodeEvent):
        state.refit_largest(event.node, gone=event.op == "delete")
    elif isinstance(event, MachineDeploymentEvent):
        state.largest = None  # the largest node shape is found again when asked
    match event:
        case NodeEvent(op="upsert", node=node):
            outputs += nodes.upsert(state, node, now)
            pool = node.labels.get(keys.POOL, "")
            if pool and node.allocatable.get(GPU, 0) != state.pool_gpus.get(pool, 0):
                state.pool_gpus[pool] = node.allocatable.get(GPU, 0)
                _growth(state)
        case NodeEvent(op="delete", node=node):
            outputs += nodes.delete(state, node.name, now)
        case PodGroupEvent(op=op, pod_group=group):
            outputs += _pod_group(state, group, now, deleted=op == "delete")
        case PodEvent(op=op, pod=pod) if pod.gang:
            outputs += _pod(state, pod, now, deleted=op == "delete")
        case PodEvent(op=op, pod=pod):
            outputs += _lone(state, pod, now, deleted=op == "delete")
        case MachineDeploymentEvent(op=op, machine_deployment=md):
            if op == "delete":
                state.pools.pop(md.name, None)
            else:
                state.pools[md.name] = md
            _growth(state)
        case TeamsLoaded(config=config):
            _load(state, config)
            outputs += nodes.reassign_all(state, now)
            _rehome_gangs(state)
            _growth(state)
        case Tick():  # time passed: a starving gang may reserve, a memberless one is set
            outputs += unplaced.release(state, now)  # aside, an unplaced one gives GPUs back
    outputs += queueing.admit(state, now, every=isinstance(event, Tick | TeamsLoaded))
    if isinstance(event, Tick):
        outputs += showing.show(state, now)  # what kubectl users see, once a tick at most
    else:
        state.stale = True
    return outputs


def _relevant(event: Input) -> bool:
    if isinstance(event, PodEvent):
        return bool(event.pod.gang) or event.pod.scheduler_name == SCHEDULER_NAME
    return isinstance(
        event,
        NodeEvent | PodGroupEvent | TeamsLoaded | MachineDeploymentEvent | Tick
        | ResourceSliceEvent | DeviceClassEvent | ResourceClaimEvent,
    )  # fmt: skip


def _claimed(state: State, event: Input, now: float) -> tuple[Input | None, list[Output]]:
    """GPUs asked through DRA claims count like ``nvidia.com/gpu`` (``libs.view.claimed``).
    A pod whose claims are not all made is not counted yet: it arrives, with its claimed
    GPUs, once they are (so no member is ever admitted for fewer GPUs than it gets).
    Returns the event to go on with (None: nothing more) and what the devices changed."""
    claimed = state.claimed
    match event:
        case NodeEvent(op="upsert", node=node):
            return NodeEvent(op="upsert", at=event.at, node=claimed.node(node)), []
        case PodEvent(op="delete", pod=pod):
            claimed.forget(pod)
            return event, []
        case PodEvent(pod=pod) if pod.claims:
            counted = claimed.pod(pod)
            if not claimed.ready(pod):
                return None, []
            return PodEvent(op="upsert", at=event.at, pod=counted), []
        case ResourceSliceEvent() | DeviceClassEvent() | ResourceClaimEvent():
            outputs: list[Output] = []
            for pod in claimed.apply(event):
                if claimed.ready(pod):
                    outputs += _decide(state, PodEvent(op="upsert", at=now, pod=pod), now)
            if isinstance(event, ResourceSliceEvent):
                known = state.view.nodes.get(event.resource_slice.node)
                if known is not None:
                    outputs += nodes.upsert(state, claimed.node(known.node), now)
            return None, outputs
    return event, []


def _growth(state: State) -> None:
    recount_growth(state, state.config.teams[0].name if is_default(state.config) else None)


def _load(state: State, config: TeamConfig) -> None:
    state.config = config
    state.specs = config.by_name
    state.ns_team = {ns: t.name for t in config.teams for ns in t.namespaces}
    state.pool_team = {p: t.name for t in config.teams for p in t.pools}


def _pod_group(state: State, group: PodGroup, now: float, *, deleted: bool) -> list[Output]:
    known = state.gangs.get(group.key)
    if deleted:
        return _forget(state, known, now) if known is not None else []
    per_pod = _int_annotation(group.annotations.get(keys.GPUS_PER_POD))
    min_member, min_gpus = max(1, group.min_member), group.min_resources.get(keys.GPU, 0)
    if known is not None:
        known.min_member, known.gpus_per_pod, known.min_gpus = min_member, per_pod, min_gpus
        known.api, known.carrier = group.api, ""  # the group object carries the marks now
        known.schedule_timeout = _timeout(group)
        return _changed(state, known, now)
    gang = Gang(
        key=group.key,
        team=state.team_of(group.namespace),
        min_member=min_member,
        created_at=group.created_at or now,
        gpus_per_pod=per_pod,
        members=state.pending_pods.pop(group.key, {}),
        min_gpus=min_gpus,
        api=group.api,
        schedule_timeout=_timeout(group),
    )
    return _new_gang(state, gang, group.annotations, now)


def _new_gang(state: State, gang: Gang, marks: dict[str, str], now: float) -> list[Output]:
    """Queue a gang seen for the first time, or adopt it if it was admitted before a restart."""
    state.gangs[gang.key] = gang
    state.arrivals += 1
    gang.arrival = state.arrivals
    gang.complete = len(gang.members) >= gang.min_member
    if not gang.team:
        gang.reason = f"namespace {gang.namespace!r} belongs to no team in the team config"
        return [
            GangQueued(
                at=now, gang=gang.key, team="", reason=gang.reason, position=0, gpus=gang.gpus
            )
        ]
    adopt = marks.get(keys.ADMITTED) == "true"
    if _done(gang) or (adopt and _ended(gang)):  # it ended before the restart (finished
        gang.finished = True  # pods stay in the API)
        return []
    if adopt:  # admitted before a restart: adopt
        gang.admitted = True
        borrowing = marks.get(keys.BORROWING) == "true"
        state.hold(gang, gang.gpus, borrowing=borrowing, devices=gang.devices)
        return []
    state.enqueue(gang)
    return [queueing.queued(state, gang, now)]


def _pod(state: State, pod: Pod, now: float, *, deleted: bool) -> list[Output]:
    key = f"{pod.namespace}/{pod.gang}"
    known = state.gangs.get(key)
    if known is None and not deleted and _counted(pod):
        return _objectless(state, pod, now)
    if known is not None and known.carrier:
        return _carried(state, known, pod, now, deleted=deleted)
    members = known.members if known is not None else state.pending_pods.setdefault(key, {})
    member = None if deleted else _member(pod)
    if members.get(pod.name) != member:
        if member is None:
            members.pop(pod.name, None)
        else:
            members[pod.name] = member
    if known is None:
        if not members:
            del state.pending_pods[key]
        return []
    return _changed(state, known, now)


def _lone(state: State, pod: Pod, now: float, *, deleted: bool) -> list[Output]:
    """A Baton pod with no PodGroup is a gang of one, marked admitted on the pod itself."""
    known = state.gangs.get(pod.key)
    if known is not None and not known.lone:
        return []  # a PodGroup of the same name holds the key
    if deleted:
        return _forget(state, known, now) if known is not None else []
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
    known.members[pod.name] = member
    return _changed(state, known, now)


def _counted(pod: Pod) -> bool:
    """A Baton pod whose group has no object but says its own size (Kueue's total
    count, Volcano's group-min-member): the pods are the gang."""
    return (
        pod.group is not None
        and pod.group.min_member > 0
        and pod.scheduler_name == SCHEDULER_NAME
        and pod.phase not in ("Succeeded", "Failed")
        and not pod.terminating
    )


def _objectless(state: State, pod: Pod, now: float) -> list[Output]:
    """The first member of a gang without a group object: it carries the gang's marks."""
    assert pod.group is not None
    key = f"{pod.namespace}/{pod.gang}"
    members = state.pending_pods.pop(key, {})
    members[pod.name] = _member(pod)
    gang = Gang(
        key=key,
        team=state.team_of(pod.namespace),
        min_member=pod.group.min_member,
        created_at=pod.created_at or now,
        members=members,
        carrier=pod.name,
    )
    return _new_gang(state, gang, pod.annotations, now)


def _carried(state: State, gang: Gang, pod: Pod, now: float, *, deleted: bool) -> list[Output]:
    """A member of a gang without a group object changed. The gang goes with its last
    member; an admitted gang whose carrier left has its marks put on another member."""
    if deleted:
        gang.members.pop(pod.name, None)
    else:
        gang.members[pod.name] = _member(pod)
        if pod.group is not None and pod.group.min_member:
            gang.min_member = max(gang.min_member, pod.group.min_member)
    if not gang.members:
        return _forget(state, gang, now)
    outputs: list[Output] = []
    if gang.carrier not in gang.members:
        gang.carrier = min(gang.members)
        if gang.admitted:
            outputs.append(queueing.remark(gang, now))
    return outputs + _changed(state, gang, now)


def _member(pod: Pod) -> Member:
    return Member(
        gpus=pod.requests.get(keys.GPU, 0),
        priority=pod.priority,
        phase=pod.phase,
        uid=pod.uid,
        node=pod.node_name,
        bare=is_bare(pod),
        devices=tuple((r, n) for r, n in sorted(pod.requests.items()) if class_of(r)),
    )


def _changed(state: State, gang: Gang, now: float) -> list[Output]:
    """A gang's demand, priority or members changed: re-account, finish, or re-queue it."""
    state.wake(gang)  # looked at again by the next walk
    if not gang.complete and len(gang.members) >= gang.min_member:
        gang.complete = True  # its pods all came: it holds quota for as long as it runs
        state.short.discard(gang.key)
    if gang.admitted:
        if gang.ranked is not None and gang.priority != gang.ranked:  # counted anew
            state.rank(gang, holds=True)
        if gang.key in state.unplaced and gang.bound:
            state.unplaced.discard(gang.key)
            gang.releases = 0
        if _ended(gang):
            return _release(state, gang, now, finished=True)
        # members joined (or left a paused gang), or its devices by class changed
        if gang.gpus > gang.held or gang.paused or gang.devices != gang.held_devices:
            return list(grow(state, gang, now))
        return []
    outputs: list[Output] = []
    if gang.finished and any(m.phase in ACTIVE for m in gang.members.values()):
        gang.finished = False  # new members after it ended: a new run, queued again
        reason = "new member pods after the gang ended: it waits in its team's queue again"
        outputs.append(reclaiming.unadmit(gang, now, reason=reason))
    if gang.team and not gang.finished and gang.qkey != queueing.queue_key(gang):
        state.enqueue(gang)  # its priority changed: move it
    elif gang.qkey is not None:
        state.renew(gang)  # its demand may have changed: count it as it is
        if gang.sized != gang.told_gpus or not gang.known:  # (its count of members)
            state.untold.add(gang.key)  # it is looked at again
    return outputs


def _done(gang: Gang) -> bool:
    """Every member it needs is there and has ended."""
    return len(gang.members) >= gang.min_member and _ended(gang)


def _ended(gang: Gang) -> bool:
    """The members there are (one at least) have all ended. Enough for an admitted gang
    to be done: an MPIJob's launcher ends and the operator deletes its workers, leaving
    fewer than minMember. A gang whose members all went, none ended, is not done: its
    controller brings them back."""
    members = gang.members.values()
    return bool(members) and all(m.phase in ("Succeeded", "Failed") for m in members)


def _forget(state: State, gang: Gang, now: float) -> list[Output]:
    outputs = _release(state, gang, now, finished=True) if gang.admitted else []
    state.dequeue(gang)
    del state.gangs[gang.key]
    return outputs


def _release(state: State, gang: Gang, now: float, *, finished: bool) -> list[Output]:
    gpus = gang.held
    state.hold(gang, 0, borrowing=False)
    resume(state, gang)
    gang.admitted, gang.finished = False, finished
    state.dequeue(gang)
    return [GangReleased(at=now, gang=gang.key, team=gang.team, gpus=gpus)]


def _rehome_gangs(state: State) -> None:
    """Namespaces may have moved between teams: move gangs (admitted ones keep running)."""
    for gang in sorted(state.gangs.values(), key=lambda g: g.key):
        team = state.team_of(gang.namespace)
        if team == gang.team:
            continue
        if gang.admitted:
            held, borrowing, devices = gang.held, gang.borrowed > 0, gang.held_devices
            state.hold(gang, 0)
            gang.team = team
            state.hold(gang, held, borrowing=borrowing, devices=devices)
        else:
            state.dequeue(gang)
            gang.team, gang.reason = team, ""
            if team and not gang.finished:
                state.enqueue(gang)


def _timeout(group: PodGroup) -> float | None:
    seconds = group.schedule_timeout_seconds
    return float(seconds) if seconds is not None and seconds > 0 else None


def _int_annotation(value: str | None) -> int | None:
    if value is None or not value.isdigit():
        return None
    return int(value)
