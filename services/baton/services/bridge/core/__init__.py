"""What the bridge publishes for each object event: ``(state, event, now) -> (state, outputs)``.

Subjects: ``baton.<c>.k8s.<kind>.<name>`` for cluster-scoped kinds (node, resourceslice,
deviceclass) and ``baton.<c>.k8s.<kind>.<ns>.<name>`` for the others.
Each publish carries ``Nats-Msg-Id`` ``<uid>:<resourceVersion>`` (``:del`` appended for a
deletion), so a relist or a restart inside the stream's duplicate window stores
nothing twice. Beyond the window, ``State.held`` (what the K8S stream holds per
subject, read back when the bridge starts) skips what is already there. Deletions
are tombstones with a TTL, so they reach consumers and then go.

``State`` is owned by the core and updated in place (100k subjects; copying it per
event would cost more than the event); no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from baton.proto import k8s, subjects
from baton.proto.dra import DeviceClass, ResourceSlice
from baton.services.bridge.core.bounds import Bounds, impossible

DEFAULT_TOMBSTONE_TTL = "1h"


class Publish(msgspec.Struct, frozen=True, kw_only=True, tag="bridge.publish.v1"):
    subject: str
    event: k8s.K8sEvent
    msg_id: str
    ttl: str | None = None  # set on deletions: the tombstone expires


class Rejected(msgspec.Struct, frozen=True, kw_only=True, tag="bridge.rejected.v1"):
    """An object whose name cannot be carried in a subject, or with values no real object
    has (``bounds``): bad input, dead-lettered with the reason and skipped."""

    kind: str
    key: str
    reason: str


class Held(msgspec.Struct, frozen=True, kw_only=True, tag="bridge.held.v1"):
    """What the K8S stream holds (its last event per subject), read when the bridge starts:
    the first input, so the core skips what consumers already have."""

    events: list[k8s.K8sEvent]


class Policy(msgspec.Struct, frozen=True, kw_only=True):
    cluster: str
    tombstone_ttl: str = DEFAULT_TOMBSTONE_TTL
    bounds: Bounds = Bounds()


Output = Publish | Rejected
Input = k8s.K8sEvent | Held
Obj = k8s.KubeObject


class State(msgspec.Struct, kw_only=True):
    cluster: str
    tombstone_ttl: str = DEFAULT_TOMBSTONE_TTL
    held: dict[str, str] = {}  # subject -> msg id of what the K8S stream holds there
    bounds: Bounds = Bounds()


def kind_of(event: k8s.K8sEvent) -> str:
    """The subject's kind token for an event."""
    match event:
        case k8s.NodeEvent():
            return "node"
        case k8s.PodEvent():
            return "pod"
        case k8s.PodGroupEvent(pod_group=group):
            if group.volcano:
                return "volcano-podgroup"
            return "upstream-podgroup" if group.upstream else "podgroup"
        case k8s.EndpointSliceEvent():
            return "endpointslice"
        case k8s.MachineDeploymentEvent():
            return "machinedeployment"
        case k8s.CapacityBufferEvent():
            return "capacitybuffer"
        case k8s.ResourceSliceEvent():
            return "resourceslice"
        case k8s.DeviceClassEvent():
            return "deviceclass"
        case k8s.ResourceClaimEvent():
            return "resourceclaim"
    raise TypeError(f"not an object event: {event!r}")


object_of = k8s.object_of


def names_of(obj: Obj) -> tuple[str, ...]:
    """``(name,)`` for a cluster-scoped object, ``(namespace, name)`` otherwise."""
    if isinstance(obj, k8s.Node | ResourceSlice | DeviceClass):
        return (obj.name,)
    return (obj.namespace, obj.name)


def subject_of(cluster: str, event: k8s.K8sEvent) -> str:
    """Raises ``subjects.InvalidName`` for a name that cannot be a subject token."""
    return subjects.subject(cluster, subjects.K8S, kind_of(event), *names_of(object_of(event)))


def msg_id_of(event: k8s.K8sEvent) -> str:
    obj = object_of(event)
    suffix = ":del" if event.op == "delete" else ""
    return f"{obj.uid}:{obj.resource_version}{suffix}"


def initial(policy: Policy) -> State:
    return State(cluster=subjects.check_cluster(policy.cluster), tombstone_ttl=policy.tombstone_ttl,
                 bounds=policy.bounds)  # fmt: skip


def hold(state: State, held: Iterable[k8s.K8sEvent]) -> None:
    """Remember what the K8S stream already holds (its last event per subject)."""
    for event in held:
        try:
            state.held[subject_of(state.cluster, event)] = msg_id_of(event)
        except subjects.InvalidName:
            continue


def step(state: State, event: Input, now: float) -> tuple[State, tuple[Output, ...]]:
    """One object event -> at most one publish (or a rejection)."""
    del now  # the event's own ``at`` (receive time) is what travels
    if isinstance(event, Held):
        hold(state, event.events)
        return state, ()
    key = "/".join(names_of(object_of(event)))
    try:
        subject = subject_of(state.cluster, event)
    except subjects.InvalidName as exc:
        return state, (Rejected(kind=kind_of(event), key=key, reason=str(exc)),)
    why = impossible(event, state.bounds)
    if why:
        return state, (Rejected(kind=kind_of(event), key=key, reason=why),)
    msg_id = msg_id_of(event)
    if state.held.get(subject) == msg_id:
        return state, ()
    state.held[subject] = msg_id
    ttl = state.tombstone_ttl if event.op == "delete" else None
    return state, (Publish(subject=subject, event=event, msg_id=msg_id, ttl=ttl),)


def seeds(held: Iterable[k8s.K8sEvent], kind: str) -> list[k8s.KubeObject]:
    """Objects of one kind that consumers currently have (upserts; tombstones excluded)."""
    return [object_of(e) for e in held if e.op == "upsert" and kind_of(e) == kind]
