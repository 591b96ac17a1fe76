"""Structural schemas of the kinds simcluster validates, served in OpenAPI too.

Small and honest: every field the real kind has is named at the levels simcluster
checks (so a typo such as ``spec.schedulerNmae`` or ``spec.minMembers`` is an unknown
field, and nothing real is), with ``x-kubernetes-preserve-unknown-fields`` on the
subtrees simcluster does not model (affinity, probes, volumes, statuses). A kind
without a schema (``kinds.schema_of`` gives None) is served open and not validated.
Field lists follow Kubernetes v1.31 (and 1.36's pod `schedulingGroup`, KEP-4671) and the
CRDs in deploy/crds/.

Pure data: JSON-ready dicts, shared by :mod:`validation` and :mod:`openapi`.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

OPEN: Obj = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
ANY: Obj = {"x-kubernetes-preserve-unknown-fields": True}  # any JSON value
STRING: Obj = {"type": "string"}
INT: Obj = {"type": "integer"}
BOOL: Obj = {"type": "boolean"}
TIME: Obj = {"type": "string", "format": "date-time"}
STRINGS: Obj = {"type": "array", "items": STRING}
STRING_MAP: Obj = {"type": "object", "additionalProperties": STRING}
QUANTITY: Obj = {"x-kubernetes-int-or-string": True, "anyOf": [INT, STRING]}
QUANTITIES: Obj = {"type": "object", "additionalProperties": QUANTITY}


def obj(description: str = "", /, **props: Obj) -> Obj:
    """An object with exactly these fields (others are unknown)."""
    out: Obj = {"type": "object", "properties": props}
    if description:
        out["description"] = description
    return out


def opened(names: str, description: str = "", /, **props: Obj) -> Obj:
    """An object whose fields ``names`` (space-separated) are not modelled further."""
    return obj(description, **{n: ANY for n in names.split()}, **props)


def array(items: Obj, description: str = "") -> Obj:
    out: Obj = {"type": "array", "items": items}
    if description:
        out["description"] = description
    return out


def described(schema: Obj, description: str) -> Obj:
    return {**schema, "description": description}


OBJECT_META = obj(
    "Standard object metadata.",
    name=STRING,
    generateName=STRING,
    namespace=STRING,
    selfLink=STRING,
    uid=STRING,
    resourceVersion=STRING,
    generation=INT,
    creationTimestamp=TIME,
    deletionTimestamp=TIME,
    deletionGracePeriodSeconds=INT,
    labels=STRING_MAP,
    annotations=STRING_MAP,
    ownerReferences=array(OPEN),
    finalizers=STRINGS,
    managedFields=array(OPEN),
)
TOLERATION = obj(
    key=STRING, operator=STRING, value=STRING, effect=STRING, tolerationSeconds=INT
)  # fmt: skip
TAINT = obj(key=STRING, value=STRING, effect=STRING, timeAdded=TIME)
RESOURCES = obj(
    "Compute resources: requests (what the scheduler reserves) and limits.",
    limits=described(QUANTITIES, "The most this container may use (nvidia.com/gpu: count)."),
    requests=described(QUANTITIES, "What the scheduler reserves; defaults to the limits."),
    claims=array(OPEN),
)
CONTAINER = opened(
    "args command env envFrom imagePullPolicy lifecycle livenessProbe ports readinessProbe "
    "resizePolicy restartPolicy securityContext startupProbe stdin stdinOnce "
    "terminationMessagePath terminationMessagePolicy tty volumeDevices volumeMounts "
    "workingDir",
    "A container of the pod (simcluster runs none: its kubelets only play them).",
    name=STRING,
    image=STRING,
    resources=RESOURCES,
)
POD_SPEC = opened(
    "activeDeadlineSeconds affinity automountServiceAccountToken dnsConfig dnsPolicy "
    "enableServiceLinks ephemeralContainers hostAliases hostIPC hostPID hostUsers hostname "
    "imagePullSecrets os overhead readinessGates resourceClaims resources runtimeClassName "
    "schedulingGates schedulingGroup securityContext serviceAccount setHostnameAsFQDN "
    "shareProcessNamespace subdomain topologySpreadConstraints volumes",
    "The pod's desired state.",
    containers=array(CONTAINER, "The pod's containers (at least one)."),
    initContainers=array(CONTAINER),
    nodeName=described(STRING, "The node the pod is bound to."),
    nodeSelector=STRING_MAP,
    schedulerName=described(STRING, "The scheduler that places the pod."),
    serviceAccountName=STRING,
    hostNetwork=BOOL,
    priority=INT,
    priorityClassName=STRING,
    preemptionPolicy=STRING,
    restartPolicy=STRING,
    terminationGracePeriodSeconds=INT,
    tolerations=array(TOLERATION),
)
NODE_SPEC = opened(
    "configSource externalID podCIDR podCIDRs",
    "The node's desired state.",
    providerID=STRING,
    taints=array(TAINT),
    unschedulable=BOOL,
)


def kind(description: str, /, **props: Obj) -> Obj:
    return obj(description, apiVersion=STRING, kind=STRING, metadata=OBJECT_META, **props)


_POD = kind("A pod.", spec=POD_SPEC, status=OPEN)
_NODE = kind("A node.", spec=NODE_SPEC, status=OPEN)
_NAMESPACE = kind("A namespace.", spec=obj(finalizers=STRINGS), status=OPEN)
_EVENT = kind(
    "A core/v1 Event.",
    action=STRING,
    count=INT,
    eventTime=ANY,
    firstTimestamp=ANY,
    lastTimestamp=ANY,
    involvedObject=OPEN,
    message=STRING,
    reason=STRING,
    related=OPEN,
    reportingComponent=STRING,
    reportingInstance=STRING,
    series=OPEN,
    source=obj(component=STRING, host=STRING),
    type=STRING,
)
_EVENT_V1 = kind(
    "An events.k8s.io/v1 Event.",
    action=STRING,
    deprecatedCount=INT,
    deprecatedFirstTimestamp=ANY,
    deprecatedLastTimestamp=ANY,
    deprecatedSource=OPEN,
    eventTime=ANY,
    note=STRING,
    reason=STRING,
    regarding=OPEN,
    related=OPEN,
    reportingController=STRING,
    reportingInstance=STRING,
    series=OPEN,
    type=STRING,
)
_LEASE = kind(
    "A lease.",
    spec=opened(
        "acquireTime renewTime preferredHolder strategy",
        holderIdentity=STRING,
        leaseDurationSeconds=INT,
        leaseTransitions=INT,
    ),
)
_ENDPOINT_SLICE = kind(
    "An EndpointSlice.", addressType=STRING, endpoints=array(OPEN), ports=array(OPEN)
)
_PRIORITY_CLASS = kind(
    "A PriorityClass.",
    value=INT,
    globalDefault=BOOL,
    description=STRING,
    preemptionPolicy=STRING,
)
_WEBHOOK = opened(
    "matchConditions matchPolicy reinvocationPolicy",
    admissionReviewVersions=STRINGS,
    clientConfig=opened("caBundle service url"),
    failurePolicy=STRING,
    name=STRING,
    namespaceSelector=OPEN,
    objectSelector=OPEN,
    rules=array(OPEN),
    sideEffects=STRING,
    timeoutSeconds=INT,
)
_WEBHOOKS = kind("Admission webhooks.", webhooks=array(_WEBHOOK))
_INT32 = {"type": "integer", "format": "int32"}
_PODGROUP = kind(  # as deploy/crds/scheduling.x-k8s.io_podgroups.yaml
    "A gang of pods placed all together or not at all.",
    spec=obj(
        minMember={
            **_INT32,
            "minimum": 1,
            "description": "Members that must be placed together; none is placed before "
            "all can be.",
        },
        minResources=described(
            QUANTITIES,
            "What the whole gang needs at least; Baton admits and places it only when "
            "this much is free.",
        ),
        scheduleTimeoutSeconds=described(
            _INT32,
            "After this long unplaced, the gang stops holding nodes back for itself (it "
            "is still placed when it fits).",
        ),
    ),
    status=obj(
        phase=described(STRING, "Pending, Scheduled, Running, Finished or Failed."),
        occupiedBy=STRING,
        scheduled=described(_INT32, "Members bound to a node."),
        running=_INT32,
        succeeded=_INT32,
        failed=_INT32,
        scheduleStartTime=TIME,
        conditions=array(
            obj(
                type=STRING,
                status=STRING,
                reason=STRING,
                message=STRING,
                lastTransitionTime=TIME,
                observedGeneration=INT,
            ),
            "PodGroupScheduled (True once placed; False with Baton's verdict while waiting).",
        ),
    ),
)
_MACHINE_DEPLOYMENT = kind(
    "A Cluster API MachineDeployment (a node pool).",
    spec=opened(
        "machineNamingStrategy minReadySeconds paused progressDeadlineSeconds "
        "revisionHistoryLimit rolloutAfter selector strategy template",
        clusterName=STRING,
        replicas=described(INT, "Machines (nodes) wanted."),
    ),
    status=OPEN,
)

_TEAM = kind(  # as deploy/crds/baton.io_teams.yaml
    "A Baton team (from the team file), its GPU quota, usage and queue.",
    spec=obj("Empty; the team file is the source of a team's settings."),
    status=obj(
        namespaces=array(
            STRING,
            "Namespaces whose pods and PodGroups belong to the team (none listed for the "
            "one-team default, which owns every namespace).",
        ),
        quota=described(INT, "GPUs the team's gangs may hold within its quota."),
        borrowLimit=described(INT, "GPUs it may hold beyond its quota, lent by other teams."),
        used=described(INT, "GPUs its in-quota gangs hold."),
        borrowed=described(INT, "GPUs its borrowing gangs hold."),
        admitted=described(INT, "Gangs holding GPUs."),
        waiting=described(INT, "Gangs in its queue (all; queue lists the first 50)."),
        queue=array(
            obj(
                name=described(STRING, "<namespace>/<name> of the gang."),
                position=described(INT, "0 is the head (admitted next when it fits)."),
                gpus=described(INT, "GPUs it counts against its team (0 while not known)."),
                priority=described(INT, "The highest pod priority of the gang."),
                reason=described(STRING, "Why it waits."),
                setAside=described(
                    BOOL, "Skipped and never the head (too large, or its pods did not come)."
                ),
            ),
            "The first gangs of its queue, in order (priority, then age).",
        ),
    ),
)

# (group, kind) -> schema; every served version of a kind shares it
SCHEMAS: dict[tuple[str, str], Obj] = {
    ("", "Pod"): _POD,
    ("", "Node"): _NODE,
    ("", "Namespace"): _NAMESPACE,
    ("", "Event"): _EVENT,
    ("events.k8s.io", "Event"): _EVENT_V1,
    ("coordination.k8s.io", "Lease"): _LEASE,
    ("discovery.k8s.io", "EndpointSlice"): _ENDPOINT_SLICE,
    ("scheduling.k8s.io", "PriorityClass"): _PRIORITY_CLASS,
    ("scheduling.x-k8s.io", "PodGroup"): _PODGROUP,
    ("cluster.x-k8s.io", "MachineDeployment"): _MACHINE_DEPLOYMENT,
    ("baton.io", "Team"): _TEAM,
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"): _WEBHOOKS,
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"): _WEBHOOKS,
}
