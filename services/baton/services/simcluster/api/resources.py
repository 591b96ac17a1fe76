"""The resources simcluster serves, as one table.

Each row says where a resource lives in the API (group, version, plural), what its
objects are called (kind), whether it is namespaced, which subresources it has, which
field selectors it supports, and where its objects are stored (``key``; a view of
another row's objects converts them, see :mod:`conversions`). Discovery, routing,
OpenAPI, selectors and defaulting read this table; adding a resource is adding a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from baton.services.simcluster.api.conversions import EVENTS_V1, Conversion, version_view

_COMMON_FIELDS = ("metadata.name", "metadata.namespace")
_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)
_POD_FIELDS = (
    "spec.nodeName",
    "spec.schedulerName",
    "status.phase",
    "spec.restartPolicy",
    "spec.serviceAccountName",
    "status.podIP",
    "status.nominatedNodeName",
    "spec.hostNetwork",
)


@dataclass(frozen=True, slots=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: tuple[str, ...] = ()
    short_names: tuple[str, ...] = ()
    fields: tuple[str, ...] = _COMMON_FIELDS
    # Where the objects live in the Store: the plural unless two groups serve the same
    # plural (podgroups) or several versions share one set of objects.
    storage: str = ""
    # None: objects are served as stored; else this resource is a view of ``storage``.
    conversion: Conversion | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def key(self) -> str:
        """The Store's name for these objects."""
        return self.storage or self.plural

    @property
    def built_in(self) -> bool:
        """A kind the API server compiles in (strategic merge patch), not a CRD."""
        return self.group in BUILT_IN_GROUPS


BUILT_IN_GROUPS = (
    "",
    "apps",
    "batch",
    "policy",
    "rbac.authorization.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "scheduling.k8s.io",
    "admissionregistration.k8s.io",
    "resource.k8s.io",
)
_SCHED = "scheduling.k8s.io"
_UPSTREAM_PODGROUPS = "podgroups.scheduling.k8s.io"
_WORKLOADS = "workloads.scheduling.k8s.io"
_DRA = "resource.k8s.io"
_RBAC = "rbac.authorization.k8s.io"
_CERTS = "cert-manager.io"

RESOURCES: tuple[Resource, ...] = (
    Resource(
        "", "v1", "namespaces", "Namespace", False, ("status",), ("ns",),
        (*_COMMON_FIELDS, "status.phase"),
    ),
    Resource(
        "", "v1", "nodes", "Node", False, ("status",), ("no",),
        (*_COMMON_FIELDS, "spec.unschedulable"),
    ),
    Resource(
        "", "v1", "pods", "Pod", True, ("status", "binding", "eviction"), ("po",),
        (*_COMMON_FIELDS, *_POD_FIELDS),
    ),
    Resource("", "v1", "events", "Event", True, (), ("ev",), (*_COMMON_FIELDS, *_EVENT_FIELDS)),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", True),
    Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True),
    Resource(
        "events.k8s.io", "v1", "events", "Event", True, (), ("ev",),
        (*_COMMON_FIELDS, *EVENTS_V1.fields),
        storage="events", conversion=EVENTS_V1,
    ),
    Resource(
        "scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", True, ("status",),
        ("pg", "pgs"),
    ),
    Resource(  # Volcano's (deploy/crds/scheduling.volcano.sh_podgroups.yaml)
        "scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", True, ("status",),
        ("podgroup-v1beta1",), storage="podgroups.scheduling.volcano.sh",
    ),
    # upstream gang scheduling (KEP-4671): one set of objects, served at two versions
    Resource(_SCHED, "v1", "priorityclasses", "PriorityClass", False, (), ("pc",)),
    Resource(_SCHED, "v1beta1", "workloads", "Workload", True, ("status",), storage=_WORKLOADS),
    Resource(
        _SCHED, "v1beta1", "podgroups", "PodGroup", True, ("status",), storage=_UPSTREAM_PODGROUPS
    ),
    Resource(
        _SCHED, "v1alpha2", "workloads", "Workload", True, ("status",),
        storage=_WORKLOADS, conversion=version_view(f"{_SCHED}/v1alpha2"),
    ),
    Resource(
        _SCHED, "v1alpha2", "podgroups", "PodGroup", True, ("status",),
        storage=_UPSTREAM_PODGROUPS, conversion=version_view(f"{_SCHED}/v1alpha2"),
    ),
    Resource(
        "cluster.x-k8s.io", "v1beta1", "machinedeployments", "MachineDeployment", True,
        ("status", "scale"), ("md",),
    ),
    Resource(
        "autoscaling.x-k8s.io", "v1alpha1", "capacitybuffers", "CapacityBuffer", True, ("status",)
    ),
    # Baton's teams as kubectl users see them (deploy/crds/baton.io_teams.yaml)
    Resource("baton.io", "v1alpha1", "teams", "Team", False, ("status",)),
    # Dynamic Resource Allocation (world/dra.py: drivers' slices, the resourceclaim controller)
    Resource(_DRA, "v1", "deviceclasses", "DeviceClass", False),
    Resource(
        _DRA, "v1", "resourceslices", "ResourceSlice", False, (), (),
        (*_COMMON_FIELDS, "spec.nodeName", "spec.driver"),
    ),
    Resource(_DRA, "v1", "resourceclaims", "ResourceClaim", True, ("status",)),
    Resource(_DRA, "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
    # Workload controllers run inside the simulation (jobs.py, jobsets.py, mpijobs.py).
    Resource("batch", "v1", "jobs", "Job", True, ("status",)),
    Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", True, ("status",)),
    Resource("kubeflow.org", "v2beta1", "mpijobs", "MPIJob", True, ("status",), ("mpij",)),
    # What deploy/ installs, kept but never run (docs/simcluster.md, "Kept, not run"):
    # simcluster has no Deployment, StatefulSet or DaemonSet controller, no service
    # network, no authorization and no cert-manager; these answer so that a manifest of
    # them applies, and its server-side dry run answers, as on a cluster that has them.
    Resource("", "v1", "configmaps", "ConfigMap", True, (), ("cm",)),
    Resource("", "v1", "secrets", "Secret", True),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", True, (), ("sa",)),
    Resource("", "v1", "services", "Service", True, ("status",), ("svc",)),
    Resource("apps", "v1", "deployments", "Deployment", True, ("status", "scale"), ("deploy",)),
    Resource("apps", "v1", "statefulsets", "StatefulSet", True, ("status", "scale"), ("sts",)),
    Resource("apps", "v1", "daemonsets", "DaemonSet", True, ("status",), ("ds",)),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("status",),
             ("pdb",)),
    Resource(_RBAC, "v1", "clusterroles", "ClusterRole", False),
    Resource(_RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", False),
    Resource(_RBAC, "v1", "roles", "Role", True),
    Resource(_RBAC, "v1", "rolebindings", "RoleBinding", True),
    Resource(_CERTS, "v1", "certificates", "Certificate", True, ("status",), ("cert", "certs")),
    Resource(_CERTS, "v1", "issuers", "Issuer", True, ("status",)),
    Resource(_CERTS, "v1", "clusterissuers", "ClusterIssuer", False, ("status",)),
    # Admission webhooks (services/baton/services/simcluster/api/webhooks.py calls them on create).
    Resource(
        "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration", False,
    ),
    Resource(
        "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration", False,
    ),
)  # fmt: skip

# the Store's key -> the resource that owns those objects (views are not owners)
BY_KEY: dict[str, Resource] = {r.key: r for r in RESOURCES if r.conversion is None}
BY_GROUP_VERSION: dict[str, dict[str, Resource]] = {}
for _r in RESOURCES:
    BY_GROUP_VERSION.setdefault(_r.group_version, {})[_r.plural] = _r


def resource(key: str) -> Resource:
    """The resource that owns the Store's ``key`` (usually a plural); KeyError if none."""
    return BY_KEY[key]


def groups() -> dict[str, list[str]]:
    """Named API groups (not core) and their versions, in table order."""
    out: dict[str, list[str]] = {}
    for r in RESOURCES:
        if r.group and r.version not in out.setdefault(r.group, []):
            out[r.group].append(r.version)
    return out


def resource_list(group_version: str) -> dict[str, Any] | None:
    """The APIResourceList discovery document for one group/version, or None."""
    table = BY_GROUP_VERSION.get(group_version)
    if table is None:
        return None
    items: list[dict[str, Any]] = []
    for r in table.values():
        items.append(
            {
                "name": r.plural,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": list(_VERBS),
                "shortNames": list(r.short_names),
            }
        )
        for sub in r.subresources:
            items.append(_subresource_entry(r, sub))
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": items,
    }


def _subresource_entry(r: Resource, sub: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": f"{r.plural}/{sub}",
        "singularName": "",
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": ["get", "patch", "update"],
    }
    if sub == "binding":
        entry.update(kind="Binding", verbs=["create"])
    elif sub == "eviction":
        entry.update(kind="Eviction", group="policy", version="v1", verbs=["create"])
    elif sub == "scale":
        entry.update(kind="Scale", group="autoscaling", version="v1")
    return entry
