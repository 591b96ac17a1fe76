"""The kinds Baton watches, as a table, and decoding of their list pages and watch lines.

Each ``Kind`` names its collection path (all namespaces), its wire struct, how to
slim it into ``proto.k8s`` and how to wrap it in an object event. Decoding is pure:
bytes in, typed values out; ``Undecodable`` for bytes that are not what the API
promised (the API's fault, not ours).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import msgspec

from baton.libs.kube import dra, slimming, wire
from baton.proto import k8s
from baton.proto.codec import Undecodable
from baton.proto.dra import DeviceClass, ResourceSlice

Obj = k8s.KubeObject
ChangeType = Literal["ADDED", "MODIFIED", "DELETED"]


class Change(msgspec.Struct, frozen=True, kw_only=True):
    """An object added, modified or deleted, as one watch line said."""

    type: ChangeType
    obj: Obj


class Bookmark(msgspec.Struct, frozen=True, kw_only=True):
    resource_version: str


class Failure(msgspec.Struct, frozen=True, kw_only=True):
    """A watch ERROR event or an error response: a ``Status`` body."""

    code: int
    reason: str = ""
    message: str = ""

    @property
    def expired(self) -> bool:
        """410 Gone / Expired: the resourceVersion left the server's window; relist."""
        return self.code == 410 or self.reason in {"Expired", "Gone"}


WatchItem = Change | Bookmark | Failure


class Page(msgspec.Struct, frozen=True, kw_only=True):
    items: list[Obj]
    resource_version: str
    continue_token: str


@dataclass(frozen=True, kw_only=True)
class Kind:
    name: str  # the subject token: node, pod, podgroup, volcano-podgroup, ...
    path: str  # collection path across all namespaces
    namespaced: bool
    wire_type: type[Any]
    slim: Callable[[Any], Obj]
    event: Callable[[k8s.Op, Any, float], k8s.K8sEvent]
    # other served versions of the same objects, tried in turn while the path is 404
    alternatives: tuple[str, ...] = ()
    _list: msgspec.json.Decoder[Any] = field(init=False, repr=False, compare=False)
    _object: msgspec.json.Decoder[Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_list", msgspec.json.Decoder(wire.ListEnvelope[self.wire_type]))  # type: ignore[name-defined]
        object.__setattr__(self, "_object", msgspec.json.Decoder(self.wire_type))

    def next_path(self, path: str) -> str:
        """The path to try after ``path`` answered 404 (the same when there is no other)."""
        paths = (self.path, *self.alternatives)
        return paths[(paths.index(path) + 1) % len(paths)] if path in paths else self.path

    def key(self, obj: Obj) -> str:
        """Cache key: ``name`` for cluster-scoped kinds, ``namespace/name`` otherwise."""
        if isinstance(obj, k8s.Node | ResourceSlice | DeviceClass):
            return obj.name
        return f"{obj.namespace}/{obj.name}"

    def decode_page(self, body: bytes) -> Page:
        try:
            envelope = self._list.decode(body)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise Undecodable(f"{self.name} list: {exc}") from exc
        return Page(
            items=[self.slim(item) for item in envelope.items or ()],
            resource_version=envelope.metadata.resource_version,
            continue_token=envelope.metadata.continue_,
        )

    def decode_watch_line(self, line: bytes) -> WatchItem:
        try:
            event = _watch_event.decode(line)
            if event.type == "BOOKMARK":
                marker = _bookmark.decode(event.object)
                return Bookmark(resource_version=marker.metadata.resource_version)
            if event.type == "ERROR":
                status = _status.decode(event.object)
                return Failure(code=status.code, reason=status.reason, message=status.message)
            if event.type not in ("ADDED", "MODIFIED", "DELETED"):
                raise Undecodable(f"{self.name} watch: unknown event type {event.type!r}")
            obj = self.slim(self._object.decode(event.object))
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise Undecodable(f"{self.name} watch: {exc}") from exc
        return Change(type=cast(ChangeType, event.type), obj=obj)


_watch_event = msgspec.json.Decoder(wire.WatchEvent)
_bookmark = msgspec.json.Decoder(wire.BookmarkObject)
_status = msgspec.json.Decoder(wire.Status)


def decode_status(body: bytes, *, http_status: int) -> Failure:
    """An error response's ``Status`` body (or whatever came back) as a Failure."""
    try:
        status = _status.decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return Failure(code=http_status, message=body[:200].decode(errors="replace"))
    return Failure(code=status.code or http_status, reason=status.reason, message=status.message)


NODES = Kind(
    name="node",
    path="/api/v1/nodes",
    namespaced=False,
    wire_type=wire.WireNode,
    slim=slimming.node,
    event=lambda op, obj, at: k8s.NodeEvent(op=op, at=at, node=obj),
)
PODS = Kind(
    name="pod",
    path="/api/v1/pods",
    namespaced=True,
    wire_type=wire.WirePod,
    slim=slimming.pod,
    event=lambda op, obj, at: k8s.PodEvent(op=op, at=at, pod=obj),
)
ENDPOINT_SLICES = Kind(
    name="endpointslice",
    path="/apis/discovery.k8s.io/v1/endpointslices",
    namespaced=True,
    wire_type=wire.WireEndpointSlice,
    slim=slimming.endpoint_slice,
    event=lambda op, obj, at: k8s.EndpointSliceEvent(op=op, at=at, endpoint_slice=obj),
)
POD_GROUPS = Kind(
    name="podgroup",
    path="/apis/scheduling.x-k8s.io/v1alpha1/podgroups",
    namespaced=True,
    wire_type=wire.WirePodGroup,
    slim=slimming.pod_group,
    event=lambda op, obj, at: k8s.PodGroupEvent(op=op, at=at, pod_group=obj),
)
# Upstream gang scheduling (KEP-4671): whichever version the server serves.
UPSTREAM_POD_GROUPS = Kind(
    name="upstream-podgroup",
    path="/apis/scheduling.k8s.io/v1beta1/podgroups",
    alternatives=("/apis/scheduling.k8s.io/v1alpha2/podgroups",),
    namespaced=True,
    wire_type=wire.WireUpstreamPodGroup,
    slim=slimming.upstream_pod_group,
    event=lambda op, obj, at: k8s.PodGroupEvent(op=op, at=at, pod_group=obj),
)
# Volcano's PodGroup; absent CRD: nothing to list.
VOLCANO_POD_GROUPS = Kind(
    name="volcano-podgroup",
    path="/apis/scheduling.volcano.sh/v1beta1/podgroups",
    namespaced=True,
    wire_type=wire.WireVolcanoPodGroup,
    slim=slimming.volcano_pod_group,
    event=lambda op, obj, at: k8s.PodGroupEvent(op=op, at=at, pod_group=obj),
)
# Cluster API node pools (the autoscaler resizes them); absent CRD: nothing to list.
MACHINE_DEPLOYMENTS = Kind(
    name="machinedeployment",
    path="/apis/cluster.x-k8s.io/v1beta1/machinedeployments",
    namespaced=True,
    wire_type=wire.WireMachineDeployment,
    slim=slimming.machine_deployment,
    event=lambda op, obj, at: k8s.MachineDeploymentEvent(op=op, at=at, machine_deployment=obj),
)
# Upstream spare-capacity declarations, read by the balloon service.
CAPACITY_BUFFERS = Kind(
    name="capacitybuffer",
    path="/apis/autoscaling.x-k8s.io/v1alpha1/capacitybuffers",
    namespaced=True,
    wire_type=wire.WireCapacityBuffer,
    slim=slimming.capacity_buffer,
    event=lambda op, obj, at: k8s.CapacityBufferEvent(op=op, at=at, capacity_buffer=obj),
)
# Dynamic Resource Allocation (Kubernetes 1.34+): drivers' devices per node, the classes
# that select them, and pods' claims; a server without resource.k8s.io/v1: nothing to list.
RESOURCE_SLICES = Kind(
    name="resourceslice",
    path="/apis/resource.k8s.io/v1/resourceslices",
    namespaced=False,
    wire_type=dra.WireResourceSlice,
    slim=dra.resource_slice,
    event=lambda op, obj, at: k8s.ResourceSliceEvent(op=op, at=at, resource_slice=obj),
)
DEVICE_CLASSES = Kind(
    name="deviceclass",
    path="/apis/resource.k8s.io/v1/deviceclasses",
    namespaced=False,
    wire_type=dra.WireDeviceClass,
    slim=dra.device_class,
    event=lambda op, obj, at: k8s.DeviceClassEvent(op=op, at=at, device_class=obj),
)
RESOURCE_CLAIMS = Kind(
    name="resourceclaim",
    path="/apis/resource.k8s.io/v1/resourceclaims",
    namespaced=True,
    wire_type=dra.WireResourceClaim,
    slim=dra.resource_claim,
    event=lambda op, obj, at: k8s.ResourceClaimEvent(op=op, at=at, resource_claim=obj),
)
KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        NODES, PODS, ENDPOINT_SLICES, POD_GROUPS, UPSTREAM_POD_GROUPS, VOLCANO_POD_GROUPS,
        MACHINE_DEPLOYMENTS, CAPACITY_BUFFERS, RESOURCE_SLICES, DEVICE_CLASSES, RESOURCE_CLAIMS,
    )
}  # fmt: skip


obj_of = k8s.object_of  # the contract says which object an event carries
