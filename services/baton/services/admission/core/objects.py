"""AdmissionReview v1 and the parts of Pod and PodGroup JSON the webhook reads.

Decoded with msgspec straight from the request body; ``affinity`` stays raw JSON
because the webhook only appends one requirement to it and must keep the rest.
"""

from __future__ import annotations

import base64
from typing import Any, Literal

import msgspec

from baton.libs.kube.quantities import canonical


class Meta(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    name: str = ""
    generate_name: str = ""
    namespace: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class KToleration(msgspec.Struct, frozen=True, kw_only=True):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


class KResources(msgspec.Struct, frozen=True, kw_only=True):
    requests: dict[str, str | int] | None = None
    limits: dict[str, str | int] | None = None


class KContainer(msgspec.Struct, frozen=True, kw_only=True):
    name: str = ""
    resources: KResources = KResources()


class KSchedulingGroup(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    pod_group_name: str = ""


class KPodSpec(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    scheduler_name: str = ""
    node_name: str = ""
    scheduling_group: KSchedulingGroup | None = None
    priority_class_name: str = ""
    tolerations: list[KToleration] | None = None
    affinity: dict[str, Any] | None = None
    containers: list[KContainer] = []
    init_containers: list[KContainer] = []


class KPod(msgspec.Struct, frozen=True, kw_only=True):
    metadata: Meta = Meta()
    spec: KPodSpec = KPodSpec()

    def gpus(self, resource: str) -> int:
        """The pod's effective request, as the scheduler counts it: the containers' sum,
        or the largest init container's when that is more (they run one at a time,
        before the containers)."""
        app = sum(_request(c, resource) for c in self.spec.containers)
        return max([app, *(_request(c, resource) for c in self.spec.init_containers)])


def _request(container: KContainer, resource: str) -> int:
    value = (container.resources.requests or {}).get(resource)
    if value is None:
        value = (container.resources.limits or {}).get(resource)
    return canonical(resource, str(value)) if value is not None else 0


class KPodGroupSpec(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    min_member: int = 1
    min_resources: dict[str, str | int | float] | None = None
    schedule_timeout_seconds: int | None = None


class KPodGroup(msgspec.Struct, frozen=True, kw_only=True):
    """scheduler-plugins' PodGroup (``scheduling.x-k8s.io/v1alpha1``)."""

    metadata: Meta = Meta()
    spec: KPodGroupSpec = KPodGroupSpec()


class KGangPolicy(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    min_count: int = 1


class KSchedulingPolicy(msgspec.Struct, frozen=True, kw_only=True):
    gang: KGangPolicy | None = None
    basic: dict[str, Any] | None = None


class KTopology(msgspec.Struct, frozen=True, kw_only=True):
    key: str = ""


class KConstraints(msgspec.Struct, frozen=True, kw_only=True):
    topology: list[KTopology] | None = None


class KGroupPolicy(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What upstream's PodGroup spec and each Workload template share."""

    name: str = ""  # a Workload template's name
    scheduling_policy: KSchedulingPolicy = KSchedulingPolicy()
    scheduling_constraints: KConstraints | None = None


class KUpstreamPodGroup(msgspec.Struct, frozen=True, kw_only=True):
    """Upstream Kubernetes' PodGroup (``scheduling.k8s.io`` v1beta1 / v1alpha2)."""

    metadata: Meta = Meta()
    spec: KGroupPolicy = KGroupPolicy()


class KWorkloadSpec(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    pod_group_templates: list[KGroupPolicy] | None = None


class KWorkload(msgspec.Struct, frozen=True, kw_only=True):
    """Upstream Kubernetes' Workload: templates its controllers make PodGroups from."""

    metadata: Meta = Meta()
    spec: KWorkloadSpec = KWorkloadSpec()


KObject = KPod | KPodGroup | KUpstreamPodGroup | KWorkload


class GroupVersionKind(msgspec.Struct, frozen=True, kw_only=True):
    group: str = ""
    version: str = ""
    kind: str = ""


class Request(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    uid: str
    kind: GroupVersionKind = GroupVersionKind()
    namespace: str = ""
    name: str = ""
    operation: str = "CREATE"
    object: msgspec.Raw = msgspec.Raw(b"null")
    old_object: msgspec.Raw = msgspec.Raw(b"null")  # an UPDATE's object before it


class Review(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    api_version: str = "admission.k8s.io/v1"
    kind: str = "AdmissionReview"
    request: Request | None = None


class PatchOp(msgspec.Struct, frozen=True, kw_only=True):
    op: Literal["add", "replace", "remove"]
    path: str
    value: Any = None


class Status(msgspec.Struct, frozen=True, kw_only=True):
    code: int
    message: str
    reason: str = "Forbidden"


class Response(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    uid: str
    allowed: bool
    status: Status | None = None
    patch_type: str | None = None
    patch: str | None = None
    warnings: list[str] | None = None


class ReviewOut(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    api_version: str = "admission.k8s.io/v1"
    kind: str = "AdmissionReview"
    response: Response


_patch_encoder = msgspec.json.Encoder()


def encode_patch(ops: list[PatchOp]) -> str:
    return base64.b64encode(_patch_encoder.encode(ops)).decode()


def pointer(*tokens: str) -> str:
    """A JSON Pointer (RFC 6901) from raw tokens: ``~`` -> ``~0``, ``/`` -> ``~1``."""
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)
