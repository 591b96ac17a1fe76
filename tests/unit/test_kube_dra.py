"""Dynamic Resource Allocation (``resource.k8s.io/v1``) as the bridge slims it: slices'
attributes fully qualified, requests' counts, an allocation's node, what a claim is
reserved for, and the claims a pod uses."""

from __future__ import annotations

import json
from typing import Any

import pytest

from baton.libs.kube import dra as kube_dra
from baton.libs.kube.kinds import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES, Kind
from baton.proto import codec, dra, k8s
from baton.services.bridge import core

pytestmark = pytest.mark.unit

GPU = "gpu.nvidia.com"


def slim(kind: Kind, obj: dict[str, Any]) -> Any:
    """What one watch line carrying ``obj`` decodes into."""
    change = kind.decode_watch_line(json.dumps({"type": "ADDED", "object": obj}).encode())
    return change.obj  # type: ignore[union-attr]


def resource_slice(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": "gpu-1-gpu.nvidia.com-x7", "uid": "s-1", "resourceVersion": "4"},
            "spec": {"driver": GPU, "pool": {"name": "gpu-1"}, **spec}}  # fmt: skip


def claim(spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None,
          **meta: Any) -> dict[str, Any]:  # fmt: skip
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "rank-0-gpus-abc", "namespace": "ml", "uid": "c-1",
                         "resourceVersion": "9", **meta},
            "spec": spec or {}, "status": status or {}}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "attribute", "published"),
    [
        ("productName", {"string": "NVIDIA H100"}, (f"{GPU}/productName", "NVIDIA H100")),
        ("index", {"int": 3}, (f"{GPU}/index", 3)),
        ("rdma", {"bool": False}, (f"{GPU}/rdma", False)),
        ("driverVersion", {"version": "580.65.6"}, (f"{GPU}/driverVersion", "580.65.6")),
        # already qualified: kept as it is, whatever the driver
        ("resource.kubernetes.io/pcieRoot", {"string": "pci0000:10"},
         ("resource.kubernetes.io/pcieRoot", "pci0000:10")),
        ("empty", {}, None),  # no value of a known type: dropped
    ],
)  # fmt: skip
def test_a_slice_s_attributes_are_fully_qualified_by_its_driver(
    name: str, attribute: dict[str, Any], published: tuple[str, Any] | None
) -> None:
    devices = [{"name": "gpu-0", "attributes": {name: attribute}}]
    got = slim(RESOURCE_SLICES, resource_slice(nodeName="gpu-1", devices=devices))
    assert isinstance(got, dra.ResourceSlice)
    (device,) = got.devices
    assert device.attributes == (dict([published]) if published else {})


def test_a_slice_keeps_driver_node_pool_and_devices_and_is_named_alone() -> None:
    devices = [{"name": "gpu-0", "capacity": {"memory": {"value": "80Gi"}}}, {"name": "gpu-1"}]
    got = slim(RESOURCE_SLICES, resource_slice(nodeName="gpu-1", devices=devices))
    assert got == dra.ResourceSlice(
        name="gpu-1-gpu.nvidia.com-x7", uid="s-1", resource_version="4", driver=GPU,
        node="gpu-1", pool="gpu-1", devices=(dra.Device(name="gpu-0"), dra.Device(name="gpu-1")),
    )  # fmt: skip
    assert RESOURCE_SLICES.key(got) == "gpu-1-gpu.nvidia.com-x7"


def test_shared_counters_and_what_devices_consume_are_integers_in_base_units() -> None:
    """Partitionable devices (MIG): counters in a slice of their own, devices consuming
    them; a malformed quantity leaves the device never given (0 of the counter, or a
    device using more than any counter holds), never given twice."""
    sets = [{"name": "gpu-0-counters",
             "counters": {"memory": {"value": "80Gi"}, "slices": {"value": "8"},
                          "broken": {"value": "lots"}}}]  # fmt: skip
    counters = slim(RESOURCE_SLICES, resource_slice(nodeName="gpu-1", sharedCounters=sets))
    assert counters.devices == ()
    assert counters.counters == {"gpu-0-counters": {"memory": 80 << 30, "slices": 8, "broken": 0}}
    uses = [{"counterSet": "gpu-0-counters",
             "counters": {"memory": {"value": "9.5Gi"}, "slices": {"value": "1"}}},
            {"counterSet": "other", "counters": {"x": {"value": "??"}}}]  # fmt: skip
    devices = [{"name": "gpu-0-mig-0", "consumesCounters": uses}]
    (mig,) = slim(RESOURCE_SLICES, resource_slice(nodeName="gpu-1", devices=devices)).devices
    assert mig.consumes == {
        "gpu-0-counters": {"memory": int(9.5 * (1 << 30)), "slices": 1},
        "other": {"x": kube_dra.UNUSABLE},
    }


def test_a_slice_of_network_attached_devices_has_no_node() -> None:
    got = slim(RESOURCE_SLICES, resource_slice(allNodes=True, devices=[{"name": "fabric-0"}]))
    assert isinstance(got, dra.ResourceSlice) and got.node == ""


def test_a_device_class_is_its_cel_selectors() -> None:
    body = {"metadata": {"name": GPU, "uid": "d-1"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}},
                                   {"other": {}}]}}  # fmt: skip
    got = slim(DEVICE_CLASSES, body)
    assert got == dra.DeviceClass(
        name=GPU, uid="d-1", selectors=('device.driver == "gpu.nvidia.com"',)
    )
    assert DEVICE_CLASSES.key(got) == GPU


@pytest.mark.parametrize(
    ("request_", "slimmed"),
    [
        ({"name": "gpus", "exactly": {"deviceClassName": GPU, "count": 8}},
         dra.DeviceRequest(name="gpus", device_class=GPU, count=8)),
        ({"name": "gpus", "exactly": {"deviceClassName": GPU}},  # ExactCount's default
         dra.DeviceRequest(name="gpus", device_class=GPU, count=1)),
        ({"name": "gpus", "exactly": {"deviceClassName": GPU, "allocationMode": "All"}},
         dra.DeviceRequest(name="gpus", device_class=GPU, count=0)),
        ({"name": "gpus", "exactly": {"deviceClassName": GPU, "count": 2, "selectors": [
            {"cel": {"expression": "device.attributes['gpu.nvidia.com'].index < 4"}}]}},
         dra.DeviceRequest(name="gpus", device_class=GPU, count=2,
                           selectors=("device.attributes['gpu.nvidia.com'].index < 4",))),
        ({"name": "any", "firstAvailable": [{"name": "big", "deviceClassName": GPU}]},
         dra.DeviceRequest(name="any", device_class="")),  # not read: nothing can meet it
    ],
)  # fmt: skip
def test_a_claim_s_requests(request_: dict[str, Any], slimmed: dra.DeviceRequest) -> None:
    got = slim(RESOURCE_CLAIMS, claim({"devices": {"requests": [request_]}}))
    assert isinstance(got, dra.ResourceClaim) and got.requests == (slimmed,)


HOST = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-2"]}


@pytest.mark.parametrize(
    ("terms", "node"),
    [
        ([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}],
         "gpu-1"),  # what the scheduler writes
        ([{"matchExpressions": [HOST]}], "gpu-2"),
        ([{"matchExpressions": [HOST]},
          {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}],
         "gpu-1"),  # the node's name before its hostname label
        ([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["gpu-1"]}]}],
         ""),
        ([{"matchFields": [{"key": "metadata.name", "operator": "In",
                            "values": ["gpu-1", "gpu-2"]}]}], ""),  # not one node
        ([{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}], ""),
        (None, ""),  # network-attached devices: no node selector
    ],
)  # fmt: skip
def test_an_allocation_s_node_comes_from_its_node_selector(
    terms: list[dict[str, Any]] | None, node: str
) -> None:
    allocation: dict[str, Any] = {"devices": {"results": []}}
    if terms is not None:
        allocation["nodeSelector"] = {"nodeSelectorTerms": terms}
    got = slim(RESOURCE_CLAIMS, claim(status={"allocation": allocation}))
    assert isinstance(got, dra.ResourceClaim) and got.node == node


def test_a_generated_claim_keeps_its_pod_entry_owner_allocation_and_reservation() -> None:
    owners = [{"kind": "Pod", "name": "rank-0", "uid": "p-1", "controller": True},
              {"kind": "Pod", "name": "other", "uid": "p-2"}]  # fmt: skip
    spec = {"devices": {
        "requests": [{"name": "gpus", "exactly": {"deviceClassName": GPU, "count": 2}},
                     {"name": "nics", "exactly": {"deviceClassName": "dra.net", "count": 2}}],
        "constraints": [
            {"requests": ["gpus", "nics"], "matchAttribute": "resource.kubernetes.io/pcieRoot"},
            {"distinctAttribute": "gpu.nvidia.com/uuid"},  # not carried
        ]}}  # fmt: skip
    results = [{"request": "gpus", "driver": GPU, "pool": "gpu-1", "device": f"gpu-{i}"}
               for i in range(2)]  # fmt: skip
    selector = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}
        ]
    }
    status = {"allocation": {"devices": {"results": results}, "nodeSelector": selector},
              "reservedFor": [{"resource": "pods", "name": "rank-0", "uid": "p-1"}]}  # fmt: skip
    notes = {"resource.kubernetes.io/pod-claim-name": "gpus", "other": "x"}
    got = slim(RESOURCE_CLAIMS, claim(spec, status, annotations=notes, ownerReferences=owners))
    assert isinstance(got, dra.ResourceClaim)
    assert (got.pod_claim, got.owner) == ("gpus", "p-1")  # the pod's entry, the pod's uid
    assert (got.node, got.reserved_for) == ("gpu-1", ("p-1",))
    root = "resource.kubernetes.io/pcieRoot"
    assert got.constraints == (
        dra.DeviceConstraint(requests=("gpus", "nics"), match_attribute=root),
    )
    assert got.allocated == tuple(
        dra.DeviceResult(request="gpus", driver=GPU, pool="gpu-1", device=f"gpu-{i}")
        for i in range(2)
    )
    assert RESOURCE_CLAIMS.key(got) == "ml/rank-0-gpus-abc"
    event = k8s.ResourceClaimEvent(op="upsert", at=1.0, resource_claim=got)
    assert codec.decode(codec.encode(event), k8s.K8sEvent) == event


def test_a_user_s_own_unallocated_claim_has_no_pod_entry_owner_or_node() -> None:
    owners = [{"kind": "Pod", "name": "rank-0", "uid": "p-1"}]  # an owner, not the controller
    got = slim(RESOURCE_CLAIMS, claim(ownerReferences=owners))
    assert got == dra.ResourceClaim(
        namespace="ml", name="rank-0-gpus-abc", uid="c-1", resource_version="9"
    )


@pytest.mark.parametrize(
    ("entries", "statuses", "claims"),
    [
        ([{"name": "gpus", "resourceClaimName": "shared"}], None,
         (dra.PodClaim(name="gpus", claim="shared"),)),
        ([{"name": "gpus", "resourceClaimTemplateName": "eight"}],
         [{"name": "gpus", "resourceClaimName": "rank-0-gpus-abc"}],
         (dra.PodClaim(name="gpus", claim="rank-0-gpus-abc", template="eight"),)),
        ([{"name": "gpus", "resourceClaimTemplateName": "eight"}], None,  # not generated yet
         (dra.PodClaim(name="gpus", template="eight"),)),
        ([{"name": "gpus", "resourceClaimTemplateName": "eight"}],
         [{"name": "gpus"}],  # the controller found no claim was needed
         (dra.PodClaim(name="gpus", template="eight"),)),
        ([{"name": "gpus", "resourceClaimTemplateName": "eight"},
          {"name": "nics", "resourceClaimName": "fabric"}],
         [{"name": "gpus", "resourceClaimName": "rank-0-gpus-abc"}],
         (dra.PodClaim(name="gpus", claim="rank-0-gpus-abc", template="eight"),
          dra.PodClaim(name="nics", claim="fabric"))),
        (None, None, ()),
    ],
)  # fmt: skip
def test_a_pod_s_claims_join_its_entries_with_the_claims_made_for_them(
    entries: list[dict[str, Any]] | None,
    statuses: list[dict[str, Any]] | None,
    claims: tuple[dra.PodClaim, ...],
) -> None:
    body: dict[str, Any] = {"metadata": {"name": "rank-0", "namespace": "ml", "uid": "p-1"},
                            "spec": {"resourceClaims": entries},
                            "status": {"resourceClaimStatuses": statuses}}  # fmt: skip
    got = slim(PODS, body)
    assert isinstance(got, k8s.Pod) and got.claims == claims


@pytest.mark.parametrize(
    ("event", "subject"),
    [
        (k8s.ResourceSliceEvent(op="upsert", at=1.0, resource_slice=dra.ResourceSlice(
            name="gpu-1-gpu.nvidia.com-x7", uid="s", driver=GPU, node="gpu-1", pool="gpu-1")),
         "baton.c1.k8s.resourceslice.gpu-1-gpu_nvidia_com-x7"),
        (k8s.DeviceClassEvent(op="upsert", at=1.0, device_class=dra.DeviceClass(name=GPU, uid="d")),
         "baton.c1.k8s.deviceclass.gpu_nvidia_com"),
        (k8s.ResourceClaimEvent(op="upsert", at=1.0, resource_claim=dra.ResourceClaim(
            namespace="ml", name="rank-0-gpus-abc", uid="c")),
         "baton.c1.k8s.resourceclaim.ml.rank-0-gpus-abc"),
    ],
)  # fmt: skip
def test_slices_and_classes_are_cluster_scoped_subjects_claims_namespaced(
    event: k8s.K8sEvent, subject: str
) -> None:
    assert core.subject_of("c1", event) == subject
    assert core.seeds([event], subject.split(".")[3]) == [k8s.object_of(event)]
