"""Slim Kubernetes objects as the bridge publishes them.

Only the fields some Baton service reads. Quantities are integers in canonical
units: ``cpu`` in millicores, ``memory`` and ``ephemeral-storage`` in bytes,
everything else (``nvidia.com/gpu``, ``rdma/ib``, ``pods``) as a count.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from baton.proto.dra import DeviceClass, PodClaim, ResourceClaim, ResourceSlice

Resources = dict[str, int]

GPU = "nvidia.com/gpu"
# Bounds no real object exceeds: the bridge and the admission webhook refuse more.
MAX_NODE_GPUS = 64  # GPUs one node (so one pod) can have; today's largest servers have 8-16
MAX_MEMBERS = 100_000  # pods in one gang: beyond it an object is impossible (the bridge)
# Pods one gang may have: its bind is one all-or-nothing action, which names at most this
# many (the actuator refuses more); the webhook refuses a larger gang and gang places none.
MAX_GANG_MEMBERS = 4096
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
SCHEDULER_NAME = "baton"

# The PodGroup kinds Baton reads: scheduler-plugins' CRD, upstream Kubernetes' gang
# scheduling API (KEP-4671), served as v1beta1 (1.37) or v1alpha2 (1.36), and Volcano's.
PLUGINS_API = "scheduling.x-k8s.io/v1alpha1"
UPSTREAM_API = "scheduling.k8s.io"  # every served version shows the same objects
VOLCANO_API = "scheduling.volcano.sh/v1beta1"

# Which format named a pod's group (``libs.kube.slimming.gang_ref`` decides, once).
GangSource = Literal["scheduler-plugins", "kubernetes", "volcano", "kueue", "jobset"]


class Taint(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class Toleration(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: str = ""  # empty matches every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


class Condition(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""


class Requirement(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One node-selector requirement: In, NotIn, Exists, DoesNotExist, Gt or Lt."""

    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        value = labels.get(self.key)
        match self.operator:
            case "In":
                return value is not None and value in self.values
            case "NotIn":
                return value is None or value not in self.values
            case "Exists":
                return value is not None
            case "DoesNotExist":
                return value is None
            case "Gt" | "Lt":
                if value is None or not self.values:
                    return False
                try:
                    left, right = int(value), int(self.values[0])
                except ValueError:
                    return False
                return left > right if self.operator == "Gt" else left < right


class NodeSelectorTerm(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Requirements ANDed; a pod's terms are ORed (requiredDuringScheduling...)."""

    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        return all(r.matches(labels) for r in self.match_expressions)


class Node(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    name: str
    uid: str
    resource_version: str = ""
    labels: dict[str, str] = {}
    # Only annotations Baton reads (baton.io/*, e.g. baton.io/health).
    annotations: dict[str, str] = {}
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    conditions: tuple[Condition, ...] = ()
    allocatable: Resources = {}
    created_at: float = 0.0


class GangRef(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The group a pod belongs to, in whichever format its author named it.

    ``min_member`` is what the pod itself says the group needs (Kueue's
    ``pod-group-total-count``, Volcano's ``group-min-member``, a JobSet pod's
    ``baton.io/gang-members``); 0 when a PodGroup
    object says it (scheduler-plugins, upstream, or a Volcano group with a PodGroup).
    """

    name: str
    source: GangSource = "scheduler-plugins"
    min_member: int = 0


class Pod(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    namespace: str
    name: str
    uid: str
    resource_version: str = ""
    labels: dict[str, str] = {}
    # Only annotations Baton reads (baton.io/*, sim.baton.io/*, kubernetes.io/*-bandwidth).
    annotations: dict[str, str] = {}
    scheduler_name: str = "default-scheduler"
    node_name: str = ""
    phase: Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"] = "Pending"
    priority: int = 0
    requests: Resources = {}
    node_selector: dict[str, str] = {}
    affinity: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    pod_ip: str = ""
    terminating: bool = False
    created_at: float = 0.0
    group: GangRef | None = None  # the gang it belongs to, from any format (None: none)
    # A DaemonSet's pod or a static (mirror) pod: it runs on every node whatever the
    # workload, so it does not keep a node busy (the autoscaler's idle-node rule)
    daemon: bool = False
    claims: tuple[PodClaim, ...] = ()  # spec.resourceClaims (DRA), with the claims made

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gang(self) -> str:
        """The name of the group this pod belongs to ('' for none). Pods recorded before
        ``group`` existed carry only the scheduler-plugins label."""
        if self.group is not None:
            return self.group.name
        return self.labels.get(POD_GROUP_LABEL, "")


class PodGroup(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A PodGroup: scheduler-plugins' ``scheduling.x-k8s.io/v1alpha1`` (``api`` default),
    upstream Kubernetes' ``scheduling.k8s.io`` one (any served version) or Volcano's
    ``scheduling.volcano.sh/v1beta1``.

    ``min_resources``: what the whole gang needs at least (scheduler-plugins
    ``spec.minResources``, canonical units); ``topology``: a node label key the whole
    gang must fit within one domain of (upstream ``schedulingConstraints.topology``).
    """

    namespace: str
    name: str
    uid: str
    resource_version: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    min_member: int = 1
    schedule_timeout_seconds: int | None = None
    phase: str = ""
    created_at: float = 0.0
    api: str = PLUGINS_API  # or UPSTREAM_API, VOLCANO_API
    min_resources: Resources = {}
    topology: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def upstream(self) -> bool:
        """Upstream Kubernetes' PodGroup (``scheduling.k8s.io``), not scheduler-plugins'."""
        return self.api == UPSTREAM_API

    @property
    def volcano(self) -> bool:
        """Volcano's PodGroup (``scheduling.volcano.sh/v1beta1``)."""
        return self.api == VOLCANO_API


class Endpoint(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    addresses: tuple[str, ...] = ()
    node_name: str = ""
    pod: str = ""  # targetRef name when the target is a Pod
    ready: bool = True


class EndpointSlice(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    namespace: str
    name: str
    uid: str
    resource_version: str = ""
    service: str = ""  # label kubernetes.io/service-name
    endpoints: tuple[Endpoint, ...] = ()
    ports: tuple[int, ...] = ()


class MachineDeployment(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A Cluster API ``MachineDeployment``: one node pool the autoscaler may resize.

    ``replicas`` is ``spec.replicas`` (what is asked); ``ready_replicas`` and
    ``status_replicas`` what the status says. ``min_size``/``max_size`` come from
    cluster-autoscaler's annotations (None: not set, the pool is not autoscaled).
    ``selector`` is ``spec.selector.matchLabels``: a node carrying them all belongs to
    the pool. ``capacity``: cluster-autoscaler's ``capacity.cluster-autoscaler.kubernetes.io/*``
    annotations (canonical units), the node shape when the pool has no node to look at.
    ``reason``/``message``: the status' ``Ready`` condition when it is not True
    (``QuotaExceeded``: the cloud refuses more machines).
    """

    namespace: str
    name: str
    uid: str
    resource_version: str = ""
    labels: dict[str, str] = {}
    replicas: int = 0
    status_replicas: int = 0
    ready_replicas: int = 0
    min_size: int | None = None
    max_size: int | None = None
    selector: dict[str, str] = {}
    capacity: Resources = {}
    reason: str = ""
    message: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class CapacityBuffer(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An upstream ``CapacityBuffer`` (``autoscaling.x-k8s.io/v1alpha1``): spare capacity
    a user declares. Baton reads ``spec.replicas`` as whole nodes held warm, in the pool
    its ``baton.io/pool`` label names (every GPU pool when it names none); the pod
    template it may reference is not read (``pod_template`` is kept for people)."""

    namespace: str
    name: str
    uid: str
    resource_version: str = ""
    labels: dict[str, str] = {}
    replicas: int = 0
    pod_template: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


Op = Literal["upsert", "delete"]


class ObjectEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type"):
    """Base of the bridge's events: the object's latest state, or its deletion.

    ``at`` is when the bridge saw the change (seconds since the epoch); cores use
    it as ``now``. A delete carries the last state the bridge knew.
    """

    op: Op
    at: float


class NodeEvent(ObjectEvent, frozen=True, tag="k8s.node.v1"):
    node: Node


class PodEvent(ObjectEvent, frozen=True, tag="k8s.pod.v1"):
    pod: Pod


class PodGroupEvent(ObjectEvent, frozen=True, tag="k8s.podgroup.v1"):
    pod_group: PodGroup


class EndpointSliceEvent(ObjectEvent, frozen=True, tag="k8s.endpointslice.v1"):
    endpoint_slice: EndpointSlice


class MachineDeploymentEvent(ObjectEvent, frozen=True, tag="k8s.machinedeployment.v1"):
    machine_deployment: MachineDeployment


class CapacityBufferEvent(ObjectEvent, frozen=True, tag="k8s.capacitybuffer.v1"):
    capacity_buffer: CapacityBuffer


class ResourceSliceEvent(ObjectEvent, frozen=True, tag="k8s.resourceslice.v1"):
    resource_slice: ResourceSlice


class DeviceClassEvent(ObjectEvent, frozen=True, tag="k8s.deviceclass.v1"):
    device_class: DeviceClass


class ResourceClaimEvent(ObjectEvent, frozen=True, tag="k8s.resourceclaim.v1"):
    resource_claim: ResourceClaim


K8sEvent = (
    NodeEvent
    | PodEvent
    | PodGroupEvent
    | EndpointSliceEvent
    | MachineDeploymentEvent
    | CapacityBufferEvent
    | ResourceSliceEvent
    | DeviceClassEvent
    | ResourceClaimEvent
)


KubeObject = (
    Node | Pod | PodGroup | EndpointSlice | MachineDeployment | CapacityBuffer
    | ResourceSlice | DeviceClass | ResourceClaim
)  # fmt: skip


def object_of(event: K8sEvent) -> KubeObject:
    """The object an event carries, whatever its kind."""
    match event:
        case NodeEvent():
            return event.node
        case PodEvent():
            return event.pod
        case PodGroupEvent():
            return event.pod_group
        case EndpointSliceEvent():
            return event.endpoint_slice
        case MachineDeploymentEvent():
            return event.machine_deployment
        case CapacityBufferEvent():
            return event.capacity_buffer
        case ResourceSliceEvent():
            return event.resource_slice
        case DeviceClassEvent():
            return event.device_class
        case ResourceClaimEvent():
            return event.resource_claim
    raise TypeError(f"not an object event: {event!r}")
