"""Actions: what a service asks the actuator (the one writer) to do, and results.

Every action carries an ``id`` that is stable for the decision that made it
(the actuator applies each id once, and JetStream dedups its publish on it), a
``priority`` class for the actuator's rate limiter, and ``by`` (the deciding
service). ``at`` is the decision's time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import msgspec

from baton.proto import subjects
from baton.proto.dra import ClaimAllocation
from baton.proto.k8s import PLUGINS_API, Resources, Taint, Toleration

# Lower number = applied first when the actuator is rate limited. ``health``: taking a
# node out of service; ``validation``: preflight work (a brand-new 7,500-node cluster
# asks for ~15,000 such writes; it has an assured share of the rate ahead of binds, as
# binds need the capacity it makes: the actuator's ``pacing.ASSURED``); ``status``: what
# Baton tells Kubernetes users (PodGroup status, pod conditions, Events), after all else.
Priority = Literal["health", "placement", "admission", "validation", "scaling", "balloon", "status"]
PRIORITY_ORDER: dict[str, int] = {
    "health": 0,
    "placement": 1,
    "admission": 2,
    "validation": 3,
    "scaling": 4,
    "balloon": 5,
    "status": 6,
}


class Action(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type"):
    id: str
    by: str
    at: float
    priority: Priority = "placement"
    reason: str = ""
    # Fencing: the producer's lease epoch when it published (0: no lease). The actuator
    # refuses an action whose epoch is older than its producer's current leader's.
    epoch: int = 0
    # The producer's bound on the action's validity (0: none): the actuator answers
    # "stale" after it, e.g. a bind the gang will have re-decided by then.
    expires: float = 0.0


# The most one action may take on the bus: nats-server's default max_payload (1 MiB),
# less room for headers. A gang's bind is one action; with DRA claims it names every
# member's devices (~900 KB for 1,024 pods of 8 GPU+NIC pairs each).
MAX_ACTION_BYTES = 1024 * 1024 - 4096


class Binding(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    namespace: str
    pod: str
    uid: str = ""  # when set, the bind is refused if the pod was replaced
    node: str
    # DRA: the pod's claims, allocated on ``node`` and reserved for it before the bind
    claims: tuple[ClaimAllocation, ...] = ()


class BindGang(Action, frozen=True, tag="action.bind-gang.v1"):
    """Bind every member or none: the actuator rolls back a partial gang.

    ``evict``: placeholders (balloons) on the target nodes, deleted first; if one cannot
    be deleted nothing is bound (the gang is decided again)."""

    gang: str  # "<namespace>/<podgroup>" or "<namespace>/<pod>" for a gang of one
    bindings: tuple[Binding, ...]
    evict: tuple[Binding, ...] = ()


class Evict(Action, frozen=True, tag="action.evict.v1"):
    namespace: str
    pod: str
    uid: str = ""


class EvictGang(Action, frozen=True, tag="action.evict-gang.v1"):
    """Evict every listed member (a gang restart or a whole-gang preemption)."""

    gang: str
    pods: tuple[Binding, ...]  # node is informational
    grace_seconds: int | None = None  # the pods' termination grace (None: their own)


class SetTaint(Action, frozen=True, tag="action.taint.v1"):
    node: str
    taint: Taint
    present: bool = True  # False removes every taint with this key and effect


class SetLabels(Action, frozen=True, tag="action.label.v1"):
    """Set (value) or remove (None) node labels in one patch."""

    node: str
    labels: dict[str, str | None]


class Annotate(Action, frozen=True, tag="action.annotate.v1"):
    """Set (value) or remove (None) annotations on an object in one merge patch.

    ``kind`` is ``PodGroup``, ``Pod``, or ``Node`` (cluster-scoped: ``namespace`` is '');
    a PodGroup's ``api`` says which (scheduler-plugins' ``scheduling.x-k8s.io/v1alpha1``,
    the default, or upstream's ``scheduling.k8s.io``). Admission uses it to mark a gang
    ``baton.io/admitted: "true"`` (and to take that mark back); health records who
    changed a node, why and when (``baton.io/health``); the autoscaler marks the
    Cluster API ``Machine`` (``cluster.x-k8s.io/v1beta1``) it removes next.
    """

    kind: Literal["Pod", "PodGroup", "Node", "Machine"]
    namespace: str
    name: str
    annotations: dict[str, str | None]
    api: str = PLUGINS_API


class MarkNode(Action, frozen=True, tag="action.mark-node.v1"):
    """A service's own marks on one node, in one merge patch: taints it must carry
    (``taints``) and must not (``untaint``: every taint with that key and effect), labels
    and annotations to set (value) or remove (None). What the action does not name is
    left as it is, so marks of other services and people are never overwritten. One
    decision about a node costs the API server one write (health's verdicts)."""

    node: str
    taints: tuple[Taint, ...] = ()
    untaint: tuple[Taint, ...] = ()
    labels: dict[str, str | None] = {}
    annotations: dict[str, str | None] = {}


class Cordon(Action, frozen=True, tag="action.cordon.v1"):
    node: str
    unschedulable: bool = True


class PodTemplate(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Enough of a pod for placeholders and preflight checks (a user's pod is recreated
    with ``RecreatePod``, from the live object, never from a template)."""

    namespace: str
    name: str = ""
    generate_name: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    image: str = "registry.k8s.io/pause:3.9"
    command: tuple[str, ...] = ()  # the container's command ('': the image's entrypoint)
    restart_policy: str = ""  # '' is Kubernetes' Always; a check that ends says "Never"
    requests: Resources = {}
    priority_class_name: str = ""
    priority: int | None = None
    scheduler_name: str = ""
    node_name: str = ""
    tolerations: tuple[Toleration, ...] = ()
    node_selector: dict[str, str] = {}
    # Pod Security "restricted": non-root, no privilege escalation, no capabilities,
    # RuntimeDefault seccomp (a balloon's pause container in baton-system needs no more)
    restricted: bool = False


class CreatePod(Action, frozen=True, tag="action.create-pod.v1"):
    pod: PodTemplate


class RecreatePod(Action, frozen=True, tag="action.recreate-pod.v1"):
    """Replace a pod no controller owns with a faithful, unbound copy of the live pod.

    The actuator reads the pod, deletes it (uid precondition; ``grace_seconds`` None:
    the pod's own grace period), waits until it is gone and creates the copy under the
    same name: spec and metadata as written (image, command, env, volumes, affinity,
    tolerations, labels, annotations, priority, ...) without ``nodeName``, status,
    server-set fields or ``keys.PLACEMENT_MARKS``; the copy is annotated
    ``keys.RECREATED_FROM``.
    A pod with a controller is only deleted: its controller makes the replacement.
    """

    gang: str  # "<namespace>/<podgroup>" or "<namespace>/<pod>" for a gang of one
    namespace: str
    pod: str
    uid: str  # the pod to replace: a pod of that name with another uid is left alone
    grace_seconds: int | None = None


class DeletePod(Action, frozen=True, tag="action.delete-pod.v1"):
    namespace: str
    pod: str
    grace_seconds: int | None = None


class ScaleMachineDeployment(Action, frozen=True, tag="action.scale.v1"):
    """Cluster API ``MachineDeployment`` scale subresource."""

    namespace: str
    name: str
    replicas: int


# -- telling Kubernetes users what Baton decided (docs/reporter.md) -----------------
# Their producer sends them with ``priority="status"``: the actuator writes them after
# every other class, from what is left of its token bucket.


class StatusCondition(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A Kubernetes condition as Baton writes it; ``since`` is when it last changed
    (``lastTransitionTime``; the actuator keeps the API's when the status is unchanged)."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    since: float = 0.0


class GroupStatus(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A PodGroup's status as scheduler-plugins' controller writes it (phase, counts),
    with Baton's conditions. An upstream PodGroup has conditions only."""

    phase: str = ""  # Pending, Scheduled, Running, Finished, Failed
    scheduled: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    conditions: tuple[StatusCondition, ...] = ()


class SetGroupStatus(Action, frozen=True, tag="action.group-status.v1"):
    """Write a PodGroup's status (its status subresource). Only the latest status of an
    object matters: the actuator drops a queued older one when a newer one arrives."""

    namespace: str
    name: str
    status: GroupStatus
    uid: str = ""  # when set, a PodGroup of that name with another uid is left alone
    api: str = PLUGINS_API  # or proto.k8s.UPSTREAM_API


class QueuedGang(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One gang in a team's queue as a Team object shows it (``position`` 0: the head)."""

    name: str  # "<namespace>/<name>"
    position: int
    gpus: int  # what it counts against its team (0: not known yet)
    priority: int
    reason: str  # why it waits, as GangQueued last said
    set_aside: bool = False  # skipped, never the head (too large, members missing)


class TeamStatus(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A team's quota, usage and queue: the ``status`` of its ``teams.baton.io`` object,
    field for field (camelCase on the wire, as Kubernetes writes it)."""

    namespaces: tuple[str, ...] = ()  # none: the one-team default, which owns every one
    quota: int = 0  # GPUs
    borrow_limit: int = 0  # GPUs it may borrow beyond its quota
    used: int = 0  # GPUs of its in-quota gangs
    borrowed: int = 0  # GPUs of its borrowing gangs
    admitted: int = 0  # gangs holding GPUs
    waiting: int = 0  # gangs in its queue (all of them; ``queue`` shows the first few)
    queue: tuple[QueuedGang, ...] = ()


class SetTeamStatus(Action, frozen=True, tag="action.team-status.v1"):
    """Show a team as a cluster-scoped ``Team`` (``baton.io/v1alpha1``), created if it is
    missing; ``remove``: delete it (the team left the team file). Only the latest per
    team matters (coalesced)."""

    team: str
    status: TeamStatus = TeamStatus()
    remove: bool = False


class PodRef(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    name: str
    uid: str = ""


class SetPodCondition(Action, frozen=True, tag="action.pod-condition.v1"):
    """Set one condition (``PodScheduled``, Baton's reason) on a gang's pending pods, as
    kube-scheduler does on a pod it cannot place; bound pods are left as binding set
    them. Only the latest per gang, condition type and set of pods matters (coalesced;
    a write naming other pods replaces nothing)."""

    gang: str  # "<namespace>/<group>"
    namespace: str
    pods: tuple[PodRef, ...]
    condition: StatusCondition


class ObjectRef(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What an Event is about (``regarding``): ``namespace`` '' for a Node."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"


class RecordEvent(Action, frozen=True, tag="action.event.v1"):
    """A Kubernetes Event (``events.k8s.io/v1``) about one object, as kube-scheduler and
    Volcano emit them. The actuator turns repeats into a series (count and
    lastObservedTime) and drops what is over its per-object or global budget."""

    regarding: ObjectRef
    reason: str  # CamelCase: FailedScheduling, Scheduled, Preempted, ...
    note: str  # the human text (at most 1 kB is written)
    event_type: Literal["Normal", "Warning"] = "Normal"  # the Event's ``type``
    action: str = ""  # what was done or failed: Scheduling, Binding, Preempting, ...
    controller: str = "baton.io/gang"  # reportingController: the part of Baton that decided


AnyAction = (
    BindGang
    | Evict
    | EvictGang
    | SetTaint
    | SetLabels
    | Annotate
    | MarkNode
    | Cordon
    | CreatePod
    | RecreatePod
    | DeletePod
    | ScaleMachineDeployment
    | SetGroupStatus
    | SetPodCondition
    | RecordEvent
    | SetTeamStatus
)

# ``dropped``: an Event over the actuator's budget (docs/actuator.md, "Events").
Outcome = Literal["applied", "already", "would-do", "rolled-back", "failed", "stale", "dropped"]


class ActionResult(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type", tag="result.v1"
):
    """What the actuator did. ``already``: idempotent no-op (seen id, or state already so).
    ``fenced``: answered ``stale`` because its producer's lease epoch was not the current
    one; it says nothing about the current leader's copy of the same action (same id),
    which is judged on its own."""

    action_id: str
    action_type: str
    by: str
    at: float
    outcome: Outcome
    error: str = ""
    attempts: int = 1
    fenced: bool = False


# -- where actions travel: the one action -> subject map --------------------------
# ``baton.<cluster>.action.<kind>.<key...>``; the actuator answers on
# ``baton.<cluster>.result.<kind>.<key...>``. The key names the object acted on, so
# ``nats sub 'baton.c1.action.*.team-a.>'`` shows everything done to team-a.


def _gang_key(action: BindGang | EvictGang | SetPodCondition) -> tuple[str, ...]:
    namespace, _, name = action.gang.partition("/")
    return (namespace, name)


def _pod_key(action: CreatePod) -> tuple[str, ...]:
    pod = action.pod
    return (pod.namespace, pod.name or pod.generate_name.rstrip("-") or "unnamed")


ACTION_SUBJECTS: dict[type[Action], tuple[str, Callable[[Any], tuple[str, ...]]]] = {
    BindGang: ("bind-gang", _gang_key),
    EvictGang: ("evict-gang", _gang_key),
    Evict: ("evict", lambda a: (a.namespace, a.pod)),
    SetTaint: ("taint", lambda a: (a.node,)),
    SetLabels: ("label", lambda a: (a.node,)),
    MarkNode: ("mark-node", lambda a: (a.node,)),
    Annotate: ("annotate", lambda a: (a.namespace, a.name) if a.namespace else (a.name,)),
    Cordon: ("cordon", lambda a: (a.node,)),
    CreatePod: ("create-pod", _pod_key),
    RecreatePod: ("recreate-pod", lambda a: (a.namespace, a.pod)),
    DeletePod: ("delete-pod", lambda a: (a.namespace, a.pod)),
    ScaleMachineDeployment: ("scale", lambda a: (a.namespace, a.name)),
    SetGroupStatus: ("group-status", lambda a: (a.namespace, a.name)),
    SetPodCondition: ("pod-condition", _gang_key),
    RecordEvent: ("event", lambda a: _ref_key(a.regarding)),
    SetTeamStatus: ("team-status", lambda a: (a.team,)),
}


# The kinds that only tell people what happened (PodGroup and Team status, pod
# conditions, Events). The actuator reads them through a consumer of their own: a stream
# read in order lets a bind wait behind every status write published before it, and
# status is what grows with waiting work (thousands of waiting gangs recounted).
TELLING: frozenset[str] = frozenset({"group-status", "pod-condition", "event", "team-status"})
# What starts or restarts whole gangs: read by a consumer of its own, so that no bind
# waits behind the node writes (preflight, marks, annotations) published before it.
PLACING: frozenset[str] = frozenset({"bind-gang", "evict-gang", "recreate-pod"})
# What records a decision on an object: admission's marks on gangs and its team labels
# and taints, bandwidth's limits on pods, the autoscaler's notes. Read by a consumer of
# their own: admission marks every gang it admits, and with thousands admitted at once
# its marks held the window of the consumer that also reads preflight work, so no
# preflight pod was delivered for three minutes of a new 7,500-node cluster.
MARKING: frozenset[str] = frozenset({"annotate", "label", "taint"})


def _ref_key(ref: ObjectRef) -> tuple[str, ...]:
    return (ref.namespace, ref.name) if ref.namespace else (ref.name,)


def action_subject(cluster: str, action: Action) -> str:
    """``baton.<c>.action.<kind>.<producer>.<key...>``: the producer is ``action.by``,
    and NATS lets each service publish only under its own name (docs/security.md)."""
    kind, key = ACTION_SUBJECTS[type(action)]
    return subjects.subject(cluster, subjects.ACTION, kind, action.by, *key(action))


def result_subject(action_subject: str) -> str:
    """``baton.<c>.action.<kind>.<producer>.<key...>`` -> ``baton.<c>.result.<kind>.<key...>``
    (a result names the object acted on, not who asked)."""
    prefix, cluster, _, kind, _producer, rest = action_subject.split(".", 5)
    return ".".join([prefix, cluster, subjects.RESULT, kind, rest])


def kind_of(action: Action) -> str:
    """The subject token of ``action``'s type: ``bind-gang``, ``taint``, ..."""
    return ACTION_SUBJECTS[type(action)][0]


# -- who may ask for what -----------------------------------------------------------
# The action kinds each producer (a Baton service, by its NATS user's name) may ask
# for. NATS lets a service publish only ``action.<kind>.<its name>.>`` for its own
# kinds (``libs.runner.access``, from each service's routes); the actuator applies an
# action only when its subject, its body and this table agree (docs/security.md).
# ``tests/unit/test_action_trust.py`` checks this table against every service's routes.
ASKS: dict[str, frozenset[str]] = {
    "admission": frozenset(
        {"annotate", "evict-gang", "label", "recreate-pod", "taint", "team-status"}
    ),
    "gang": frozenset({"bind-gang", "evict-gang", "recreate-pod"}),
    "reporter": frozenset({"event", "group-status", "pod-condition"}),
    "bandwidth": frozenset({"annotate"}),
    "health": frozenset({"create-pod", "delete-pod", "evict", "mark-node"}),
    "balloon": frozenset({"create-pod", "delete-pod"}),
    "autoscaler": frozenset({"annotate", "mark-node", "scale"}),
}
