"""The resources simcluster serves, as one table.

Each row says where a resource lives in the API (group, version, plural), what its
objects are called (kind), whether it is namespaced, which subresources it has and
which field selectors it supports. Discovery, routing, selectors and defaulting read
this table; adding a resource is adding a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_COMMON_FIELDS = ("metadata.name", "metadata.namespace")
_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


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

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def singular(self) -> str:
        return self.kind.lower()


RESOURCES: tuple[Resource, ...] = (
    Resource(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        ("status",),
        ("ns",),
        (*_COMMON_FIELDS, "status.phase"),
    ),
    Resource(
        "",
        "v1",
        "nodes",
        "Node",
        False,
        ("status",),
        ("no",),
        (*_COMMON_FIELDS, "spec.unschedulable"),
    ),
    Resource(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        ("status", "binding", "eviction"),
        ("po",),
        (
            *_COMMON_FIELDS,
            "spec.nodeName",
            "spec.schedulerName",
            "status.phase",
            "spec.restartPolicy",
            "spec.serviceAccountName",
            "status.podIP",
            "status.nominatedNodeName",
            "spec.hostNetwork",
        ),
    ),
    Resource(
        "",
        "v1",
        "events",
        "Event",
        True,
        (),
        ("ev",),
        (
            *_COMMON_FIELDS,
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
        ),
    ),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", True),
    Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True),
    Resource(
        "scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", True, ("status",), ("pg", "pgs")
    ),
    Resource(
        "cluster.x-k8s.io",
        "v1beta1",
        "machinedeployments",
        "MachineDeployment",
        True,
        ("status", "scale"),
        ("md",),
    ),
    # Admission webhooks (services/simcluster/webhooks.py calls them on create).
    Resource(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        False,
    ),
    Resource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        False,
    ),
)

BY_PLURAL: dict[str, Resource] = {r.plural: r for r in RESOURCES}
BY_GROUP_VERSION: dict[str, dict[str, Resource]] = {}
for _r in RESOURCES:
    BY_GROUP_VERSION.setdefault(_r.group_version, {})[_r.plural] = _r


def resource(plural: str) -> Resource:
    """The row for ``plural``; KeyError names it if simcluster does not serve it."""
    return BY_PLURAL[plural]


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
