"""Actions: what a service asks the actuator (the one writer) to do, and results.

Every action carries an ``id`` that is stable for the decision that made it
(the actuator applies each id once, and JetStream dedups its publish on it), a
``priority`` class for the actuator's rate limiter, and ``by`` (the deciding
service). ``at`` is the decision's time.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from proto.k8s import Resources, Taint, Toleration

# Lower number = applied first when the actuator is rate limited.
Priority = Literal["health", "placement", "admission", "scaling", "balloon"]
PRIORITY_ORDER: dict[str, int] = {
    "health": 0,
    "placement": 1,
    "admission": 2,
    "scaling": 3,
    "balloon": 4,
}


class Action(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type"):
    id: str
    by: str
    at: float
    priority: Priority = "placement"
    reason: str = ""


class Binding(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    namespace: str
    pod: str
    uid: str = ""  # when set, the bind is refused if the pod was replaced
    node: str


class BindGang(Action, frozen=True, tag="action.bind-gang.v1"):
    """Bind every member or none: the actuator rolls back a partial gang."""

    gang: str  # "<namespace>/<podgroup>" or "<namespace>/<pod>" for a gang of one
    bindings: tuple[Binding, ...]


class Evict(Action, frozen=True, tag="action.evict.v1"):
    namespace: str
    pod: str
    uid: str = ""


class EvictGang(Action, frozen=True, tag="action.evict-gang.v1"):
    """Evict every listed member (a gang restart or a whole-gang preemption)."""

    gang: str
    pods: tuple[Binding, ...]  # node is informational


class SetTaint(Action, frozen=True, tag="action.taint.v1"):
    node: str
    taint: Taint
    present: bool = True  # False removes every taint with this key and effect


class SetLabels(Action, frozen=True, tag="action.label.v1"):
    """Set (value) or remove (None) node labels in one patch."""

    node: str
    labels: dict[str, str | None]


class Annotate(Action, frozen=True, tag="action.annotate.v1"):
    """Set (value) or remove (None) annotations on a namespaced object in one merge patch.

    ``kind`` is ``PodGroup`` (scheduling.x-k8s.io/v1alpha1) or ``Pod``. Admission uses it
    to mark a gang ``baton.io/admitted: "true"`` (and to take that mark back).
    """

    kind: Literal["Pod", "PodGroup"]
    namespace: str
    name: str
    annotations: dict[str, str | None]


class Cordon(Action, frozen=True, tag="action.cordon.v1"):
    node: str
    unschedulable: bool = True


class PodTemplate(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Enough of a pod for placeholders and preflight checks."""

    namespace: str
    name: str = ""
    generate_name: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    image: str = "registry.k8s.io/pause:3.9"
    requests: Resources = {}
    priority_class_name: str = ""
    priority: int | None = None
    scheduler_name: str = ""
    node_name: str = ""
    tolerations: tuple[Toleration, ...] = ()
    node_selector: dict[str, str] = {}


class CreatePod(Action, frozen=True, tag="action.create-pod.v1"):
    pod: PodTemplate


class DeletePod(Action, frozen=True, tag="action.delete-pod.v1"):
    namespace: str
    pod: str
    grace_seconds: int | None = None


class ScaleMachineDeployment(Action, frozen=True, tag="action.scale.v1"):
    """Cluster API ``MachineDeployment`` scale subresource."""

    namespace: str
    name: str
    replicas: int


AnyAction = (
    BindGang
    | Evict
    | EvictGang
    | SetTaint
    | SetLabels
    | Annotate
    | Cordon
    | CreatePod
    | DeletePod
    | ScaleMachineDeployment
)

Outcome = Literal["applied", "already", "would-do", "rolled-back", "failed"]


class ActionResult(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type", tag="result.v1"
):
    """What the actuator did. ``already``: idempotent no-op (seen id, or state already so)."""

    action_id: str
    action_type: str
    by: str
    at: float
    outcome: Outcome
    error: str = ""
    attempts: int = 1
