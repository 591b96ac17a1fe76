"""Wire structs (``libs.kube.wire``) -> the slim ``proto.k8s`` objects Baton publishes.

Pure functions: no I/O, no clock. Quantities become canonical ints, annotations are
cut to the ones Baton reads, values outside an enum fall back to a safe member.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, cast

from baton.libs.kube import dra, wire
from baton.libs.kube.quantities import InvalidQuantity, canonical, canonical_resources
from baton.proto import k8s, keys

MIRROR = "kubernetes.io/config.mirror"  # a static pod's mirror
_KEPT_ANNOTATIONS = frozenset(
    {keys.EGRESS_BANDWIDTH, keys.INGRESS_BANDWIDTH, keys.MACHINE, keys.JOBSET_EXCLUSIVE}
)
_PHASES = frozenset({"Pending", "Running", "Succeeded", "Failed", "Unknown"})
_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})
_CONDITION_STATUSES = frozenset({"True", "False", "Unknown"})
_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


def kept_annotations(annotations: dict[str, str] | None) -> dict[str, str]:
    """Only ``*baton.io/*``, the bandwidth annotations, a node's Cluster API Machine and
    a JobSet pod's exclusive topology travel on the bus."""
    if not annotations:
        return {}
    return {
        key: value
        for key, value in annotations.items()
        if key in _KEPT_ANNOTATIONS or keys.is_baton_key(key)
    }


def _quantities(raw: wire.Quantities | None) -> dict[str, int]:
    if not raw:
        return {}
    return canonical_resources({name: str(value) for name, value in raw.items()})


def _created(meta: wire.ObjectMeta) -> float:
    return meta.creation_timestamp.timestamp() if meta.creation_timestamp else 0.0


def node(raw: wire.WireNode) -> k8s.Node:
    meta, status = raw.metadata, raw.status
    conditions = tuple(
        k8s.Condition(
            type=c.type,
            status=cast(Literal["True", "False", "Unknown"], c.status)
            if c.status in _CONDITION_STATUSES
            else "Unknown",
            reason=c.reason,
            message=c.message,
        )
        for c in status.conditions or ()
    )
    return k8s.Node(
        name=meta.name,
        uid=meta.uid,
        resource_version=meta.resource_version,
        labels=meta.labels or {},
        annotations=kept_annotations(meta.annotations),
        taints=tuple(_taint(t) for t in raw.spec.taints or () if t.effect in _EFFECTS),
        unschedulable=raw.spec.unschedulable,
        ready=any(c.type == "Ready" and c.status == "True" for c in conditions),
        conditions=conditions,
        allocatable=_quantities(status.allocatable),
        created_at=_created(meta),
    )


def _taint(raw: wire.WireTaint) -> k8s.Taint:
    effect = cast(Literal["NoSchedule", "PreferNoSchedule", "NoExecute"], raw.effect)
    return k8s.Taint(key=raw.key, value=raw.value, effect=effect)


def pod_requests(spec: wire.PodSpec) -> dict[str, int]:
    """Effective requests: max(sum of containers, largest init container) + overhead."""
    total: dict[str, int] = {}
    for container in spec.containers or ():
        for name, value in _container_requests(container).items():
            total[name] = total.get(name, 0) + value
    for container in spec.init_containers or ():
        for name, value in _container_requests(container).items():
            total[name] = max(total.get(name, 0), value)
    for name, value in _quantities(spec.overhead).items():
        total[name] = total.get(name, 0) + value
    return total


def _container_requests(container: wire.Container) -> dict[str, int]:
    """A resource with only a limit is requested at that limit, as the API server
    defaults it (NVIDIA's examples give ``nvidia.com/gpu`` in limits only)."""
    resources = container.resources
    if resources is None:
        return {}
    stated = {**(resources.limits or {}), **(resources.requests or {})}
    return {n: canonical(n, str(v)) for n, v in stated.items()}


def pod(raw: wire.WirePod) -> k8s.Pod:
    meta, spec = raw.metadata, raw.spec
    phase = raw.status.phase if raw.status.phase in _PHASES else "Unknown"
    return k8s.Pod(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        resource_version=meta.resource_version,
        labels=meta.labels or {},
        annotations=kept_annotations(meta.annotations),
        scheduler_name=spec.scheduler_name,
        node_name=spec.node_name,
        phase=cast(Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"], phase),
        priority=spec.priority or 0,
        requests=pod_requests(spec),
        node_selector=spec.node_selector or {},
        affinity=_affinity(spec.affinity),
        tolerations=tuple(_toleration(t) for t in spec.tolerations or ()),
        pod_ip=raw.status.pod_ip,
        terminating=meta.deletion_timestamp is not None,
        created_at=_created(meta),
        group=gang_ref(meta.labels or {}, meta.annotations or {}, spec),
        daemon=any(o.kind == "DaemonSet" for o in meta.owner_references or ())
        or MIRROR in (meta.annotations or {}),
        claims=dra.pod_claims(spec, raw.status),
    )


def gang_ref(
    labels: dict[str, str], annotations: dict[str, str], spec: wire.PodSpec
) -> k8s.GangRef | None:
    """The gang a pod belongs to, in whichever format its author named it: the one place
    that decides (docs/gang.md, "Gang formats"). A pod naming groups in several formats
    is refused by the admission webhook; here the first in this order wins:
    scheduler-plugins' label, upstream ``spec.schedulingGroup``, Volcano's annotation,
    Kueue's label, a JobSet's pods (its name label with ``baton.io/gang-members``)."""
    if name := labels.get(keys.POD_GROUP):
        return k8s.GangRef(name=name)
    if spec.scheduling_group is not None and spec.scheduling_group.pod_group_name:
        return k8s.GangRef(name=spec.scheduling_group.pod_group_name, source="kubernetes")
    if name := annotations.get(keys.VOLCANO_GROUP) or annotations.get(keys.VOLCANO_GROUP_ALIAS):
        count = _count(annotations.get(keys.VOLCANO_MIN_MEMBER))
        return k8s.GangRef(name=name, source="volcano", min_member=count)
    if name := labels.get(keys.KUEUE_GROUP):
        count = _count(annotations.get(keys.KUEUE_TOTAL) or labels.get(keys.KUEUE_TOTAL))
        return k8s.GangRef(name=name, source="kueue", min_member=count)
    if (name := labels.get(keys.JOBSET_NAME)) and keys.GANG_MEMBERS in annotations:
        count = _count(annotations.get(keys.GANG_MEMBERS))
        return k8s.GangRef(name=name, source="jobset", min_member=count)
    return None


def _count(value: str | None) -> int:
    """A member count from an annotation; 0 when missing or not a positive whole number
    (the webhook refuses such pods with the reason)."""
    return int(value) if value is not None and value.isdigit() and int(value) > 0 else 0


def _affinity(raw: wire.Affinity | None) -> tuple[k8s.NodeSelectorTerm, ...]:
    if raw is None or raw.node_affinity is None:
        return ()
    required = raw.node_affinity.required_during_scheduling_ignored_during_execution
    if required is None:
        return ()
    return tuple(
        k8s.NodeSelectorTerm(match_expressions=_requirements(term.match_expressions or ()))
        for term in required.node_selector_terms or ()
    )


def _requirements(raw: Iterable[wire.WireRequirement]) -> tuple[k8s.Requirement, ...]:
    Operator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    return tuple(
        k8s.Requirement(
            key=r.key, operator=cast(Operator, r.operator), values=tuple(r.values or ())
        )
        for r in raw
        if r.operator in _OPERATORS
    )


def _toleration(raw: wire.WireToleration) -> k8s.Toleration:
    operator: Literal["Equal", "Exists"] = "Exists" if raw.operator == "Exists" else "Equal"
    return k8s.Toleration(
        key=raw.key or "", operator=operator, value=raw.value or "", effect=raw.effect or ""
    )


def pod_group(raw: wire.WirePodGroup) -> k8s.PodGroup:
    meta = raw.metadata
    return k8s.PodGroup(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        resource_version=meta.resource_version,
        labels=meta.labels or {},
        annotations=kept_annotations(meta.annotations),
        min_member=raw.spec.min_member,
        min_resources=_min_resources(raw.spec.min_resources),
        schedule_timeout_seconds=raw.spec.schedule_timeout_seconds,
        phase=raw.status.phase,
        created_at=_created(meta),
    )


def _min_resources(raw: wire.Quantities | None) -> dict[str, int]:
    """``spec.minResources``; a malformed quantity (the webhook refuses it at creation)
    drops the whole demand rather than the object."""
    try:
        return _quantities(raw)
    except InvalidQuantity:
        return {}


def upstream_pod_group(raw: wire.WireUpstreamPodGroup) -> k8s.PodGroup:
    """Upstream Kubernetes' PodGroup (``scheduling.k8s.io``, KEP-4671). The gang policy's
    ``minCount`` is the gang's minimum; the basic policy (pod by pod) is a group of 1.
    The first topology constraint's key becomes ``topology``."""
    meta, spec = raw.metadata, raw.spec
    gang = spec.scheduling_policy.gang
    constraints = spec.scheduling_constraints
    topology = [t.key for t in (constraints.topology or ()) if t.key] if constraints else []
    return k8s.PodGroup(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        resource_version=meta.resource_version,
        labels=meta.labels or {},
        annotations=kept_annotations(meta.annotations),
        min_member=gang.min_count if gang is not None else 1,
        created_at=_created(meta),
        api=k8s.UPSTREAM_API,
        topology=topology[0] if topology else "",
    )


def volcano_pod_group(raw: wire.WireVolcanoPodGroup) -> k8s.PodGroup:
    """Volcano's PodGroup (``scheduling.volcano.sh/v1beta1``): ``minMember`` and
    ``minResources`` as scheduler-plugins' (same meaning). ``queue`` and
    ``priorityClassName`` are not carried: a gang's team (Baton's queue) is its
    namespace's, and its priority its pods' (docs/gang.md, "Gang formats")."""
    meta = raw.metadata
    return k8s.PodGroup(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        resource_version=meta.resource_version,
        labels=meta.labels or {},
        annotations=kept_annotations(meta.annotations),
        min_member=raw.spec.min_member,
        min_resources=_min_resources(raw.spec.min_resources),
        phase=raw.status.phase,
        created_at=_created(meta),
        api=k8s.VOLCANO_API,
    )


def endpoint_slice(raw: wire.WireEndpointSlice) -> k8s.EndpointSlice:
    meta = raw.metadata
    return k8s.EndpointSlice(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        resource_version=meta.resource_version,
        service=(meta.labels or {}).get("kubernetes.io/service-name", ""),
        endpoints=tuple(_endpoint(e) for e in raw.endpoints or ()),
        ports=tuple(p.port for p in raw.ports or () if p.port is not None),
    )


CAPACITY_PREFIX = "capacity.cluster-autoscaler.kubernetes.io/"
_CAPACITY_NAMES = {"gpu-count": k8s.GPU, "cpu": "cpu", "memory": "memory", "maxPods": "pods"}


def machine_deployment(raw: wire.WireMachineDeployment) -> k8s.MachineDeployment:
    meta, status = raw.metadata, raw.status
    notes = meta.annotations or {}
    ready = next((c for c in status.conditions or () if c.type == "Ready"), None)
    selector = raw.spec.selector.match_labels if raw.spec.selector is not None else None
    return k8s.MachineDeployment(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        resource_version=meta.resource_version,
        labels=meta.labels or {},
        replicas=raw.spec.replicas if raw.spec.replicas is not None else 1,
        status_replicas=status.replicas,
        ready_replicas=status.ready_replicas,
        min_size=_size(notes.get(keys.NODE_GROUP_MIN)),
        max_size=_size(notes.get(keys.NODE_GROUP_MAX)),
        selector=selector or {},
        capacity=_capacity(notes),
        reason=ready.reason if ready is not None and ready.status != "True" else "",
        message=ready.message if ready is not None and ready.status != "True" else "",
    )


def capacity_buffer(raw: wire.WireCapacityBuffer) -> k8s.CapacityBuffer:
    meta, spec = raw.metadata, raw.spec
    return k8s.CapacityBuffer(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        resource_version=meta.resource_version,
        labels=meta.labels or {},
        replicas=max(0, spec.replicas or 0),
        pod_template=spec.pod_template_ref.name if spec.pod_template_ref is not None else "",
    )


def _size(value: str | None) -> int | None:
    """A pool bound from an annotation; None when missing or not a whole number >= 0."""
    if value is None or not value.strip().isdigit():
        return None
    return int(value)


def _capacity(notes: dict[str, str]) -> dict[str, int]:
    """cluster-autoscaler's scale-from-zero annotations, canonical units; bad ones dropped."""
    out: dict[str, int] = {}
    for name, res in _CAPACITY_NAMES.items():
        value = notes.get(CAPACITY_PREFIX + name)
        if value is None:
            continue
        try:
            out[res] = canonical(res, value)
        except InvalidQuantity:
            continue
    return out


def _endpoint(raw: wire.WireEndpoint) -> k8s.Endpoint:
    target = raw.target_ref
    ready = raw.conditions.ready if raw.conditions and raw.conditions.ready is not None else True
    return k8s.Endpoint(
        addresses=tuple(raw.addresses or ()),
        node_name=raw.node_name,
        pod=target.name if target is not None and target.kind == "Pod" else "",
        ready=ready,
    )
