"""The subset of Kubernetes' JSON that Baton reads, as msgspec Structs.

Decoding the API server's bytes straight into these (unknown fields skipped, no
intermediate dicts) is what makes lists and watches of 100k pods cheap; the
generated kubernetes-asyncio models build a Python object per nested field.
Field names follow the JSON (camelCase) via ``rename="camel"``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Generic, TypeVar

import msgspec

T = TypeVar("T")

Quantities = dict[str, str | int | float]


class _Wire(msgspec.Struct, rename="camel", kw_only=True):
    pass


class OwnerReference(_Wire):
    kind: str = ""
    uid: str = ""
    controller: bool = False


class ObjectMeta(_Wire):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    owner_references: list[OwnerReference] | None = None


class ListMeta(_Wire):
    resource_version: str = ""
    # "continue" is a Python keyword: renamed explicitly.
    continue_: str = msgspec.field(default="", name="continue")


# --- Node -------------------------------------------------------------------


class WireTaint(_Wire):
    key: str = ""
    value: str = ""
    effect: str = "NoSchedule"


class NodeSpec(_Wire):
    unschedulable: bool = False
    taints: list[WireTaint] | None = None


class NodeCondition(_Wire):
    type: str = ""
    status: str = "Unknown"
    reason: str = ""
    message: str = ""


class NodeStatus(_Wire):
    allocatable: Quantities | None = None
    conditions: list[NodeCondition] | None = None


class WireNode(_Wire):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


# --- Pod --------------------------------------------------------------------


class ResourceRequirements(_Wire):
    requests: Quantities | None = None
    limits: Quantities | None = None


class Container(_Wire):
    resources: ResourceRequirements | None = None


class WireRequirement(_Wire):
    key: str = ""
    operator: str = "In"
    values: list[str] | None = None


class WireSelectorTerm(_Wire):
    match_expressions: list[WireRequirement] | None = None


class NodeSelector(_Wire):
    node_selector_terms: list[WireSelectorTerm] | None = None


class NodeAffinity(_Wire):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None


class Affinity(_Wire):
    node_affinity: NodeAffinity | None = None


class WireToleration(_Wire):
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None


class SchedulingGroup(_Wire):
    """``spec.schedulingGroup``: the upstream PodGroup a pod belongs to (Kubernetes 1.36+)."""

    pod_group_name: str = ""


class PodResourceClaim(_Wire):
    """``spec.resourceClaims[]``: a claim the pod names, or a template to make one from."""

    name: str = ""
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


class PodResourceClaimStatus(_Wire):
    """``status.resourceClaimStatuses[]``: the claim made for an entry (unset: none needed)."""

    name: str = ""
    resource_claim_name: str | None = None


class PodSpec(_Wire):
    scheduler_name: str = "default-scheduler"
    scheduling_group: SchedulingGroup | None = None
    node_name: str = ""
    priority: int | None = None
    node_selector: dict[str, str] | None = None
    affinity: Affinity | None = None
    tolerations: list[WireToleration] | None = None
    containers: list[Container] | None = None
    init_containers: list[Container] | None = None
    overhead: Quantities | None = None
    resource_claims: list[PodResourceClaim] | None = None


class PodStatus(_Wire):
    phase: str = "Pending"
    pod_ip: str = msgspec.field(default="", name="podIP")
    resource_claim_statuses: list[PodResourceClaimStatus] | None = None


class WirePod(_Wire):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)


# --- PodGroup (scheduling.x-k8s.io/v1alpha1) ----------------------------------


class PodGroupSpec(_Wire):
    min_member: int = 1
    min_resources: Quantities | None = None
    schedule_timeout_seconds: int | None = None


class PodGroupStatus(_Wire):
    phase: str = ""


class WirePodGroup(_Wire):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodGroupSpec = msgspec.field(default_factory=PodGroupSpec)
    status: PodGroupStatus = msgspec.field(default_factory=PodGroupStatus)


# --- PodGroup (scheduling.k8s.io v1beta1 / v1alpha2, KEP-4671) -----------------


class GangPolicy(_Wire):
    min_count: int = 1


class SchedulingPolicy(_Wire):
    gang: GangPolicy | None = None  # None: the basic policy (pod by pod)


class TopologyConstraint(_Wire):
    key: str = ""


class SchedulingConstraints(_Wire):
    topology: list[TopologyConstraint] | None = None


class UpstreamPodGroupSpec(_Wire):
    scheduling_policy: SchedulingPolicy = msgspec.field(default_factory=SchedulingPolicy)
    scheduling_constraints: SchedulingConstraints | None = None
    priority: int | None = None


class WireUpstreamPodGroup(_Wire):
    api_version: str = ""
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: UpstreamPodGroupSpec = msgspec.field(default_factory=UpstreamPodGroupSpec)


# --- PodGroup (scheduling.volcano.sh/v1beta1, Volcano) ---------------------------


class VolcanoPodGroupSpec(_Wire):
    min_member: int = 1
    min_resources: Quantities | None = None
    queue: str = ""
    priority_class_name: str = ""


class WireVolcanoPodGroup(_Wire):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: VolcanoPodGroupSpec = msgspec.field(default_factory=VolcanoPodGroupSpec)
    status: PodGroupStatus = msgspec.field(default_factory=PodGroupStatus)


# --- EndpointSlice (discovery.k8s.io/v1) --------------------------------------


class EndpointConditions(_Wire):
    ready: bool | None = None


class ObjectReference(_Wire):
    kind: str = ""
    name: str = ""


class WireEndpoint(_Wire):
    addresses: list[str] | None = None
    conditions: EndpointConditions | None = None
    node_name: str = ""
    target_ref: ObjectReference | None = None


class EndpointPort(_Wire):
    port: int | None = None


class WireEndpointSlice(_Wire):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    endpoints: list[WireEndpoint] | None = None
    ports: list[EndpointPort] | None = None


# --- Cluster API MachineDeployment ---------------------------------------------


class LabelSelector(_Wire):
    match_labels: dict[str, str] | None = None


class MachineDeploymentSpec(_Wire):
    replicas: int | None = None
    selector: LabelSelector | None = None


class MachineDeploymentCondition(_Wire):
    type: str = ""
    status: str = ""
    reason: str = ""
    message: str = ""


class MachineDeploymentStatus(_Wire):
    replicas: int = 0
    ready_replicas: int = 0
    conditions: list[MachineDeploymentCondition] | None = None


class WireMachineDeployment(_Wire):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: MachineDeploymentSpec = msgspec.field(default_factory=MachineDeploymentSpec)
    status: MachineDeploymentStatus = msgspec.field(default_factory=MachineDeploymentStatus)


class ObjectName(_Wire):
    name: str = ""


class CapacityBufferSpec(_Wire):
    replicas: int | None = None
    pod_template_ref: ObjectName | None = None


class WireCapacityBuffer(_Wire):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: CapacityBufferSpec = msgspec.field(default_factory=CapacityBufferSpec)


# --- envelopes ----------------------------------------------------------------


class Status(_Wire):
    """The API server's error body (also the object of a watch ERROR event)."""

    code: int = 0
    reason: str = ""
    message: str = ""


class WatchEvent(_Wire):
    """One line of a watch stream; ``object`` is decoded once the type is known."""

    type: str
    object: msgspec.Raw


class ListEnvelope(_Wire, Generic[T]):
    """A list response, its items decoded in the same pass as the envelope."""

    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[T] | None = None


class BookmarkObject(_Wire):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
