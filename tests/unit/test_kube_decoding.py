from __future__ import annotations

import json
from typing import Any

import pytest

from baton.libs.kube.kinds import (
    ENDPOINT_SLICES,
    NODES,
    POD_GROUPS,
    PODS,
    Bookmark,
    Change,
    Failure,
    decode_status,
)
from baton.libs.kube.slimming import kept_annotations
from baton.proto import k8s
from baton.proto.codec import Undecodable

pytestmark = pytest.mark.unit

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "job7-w-0",
        "namespace": "team-a",
        "uid": "u-1",
        "resourceVersion": "42",
        "creationTimestamp": "2026-11-22T01:00:00Z",
        "labels": {"scheduling.x-k8s.io/pod-group": "job7"},
        "annotations": {
            "baton.io/team": "a",
            "sim.baton.io/duration": "60",
            "kubernetes.io/egress-bandwidth": "10G",
            "kubectl.kubernetes.io/last-applied-configuration": "{...}",
        },
        "managedFields": [{"manager": "kubectl", "time": "2026-11-22T01:00:00Z"}],
    },
    "spec": {
        "schedulerName": "baton",
        "priority": 100,
        "nodeSelector": {"pool": "gpu"},
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "500m", "nvidia.com/gpu": "4"}}},
            {"name": "b", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
        ],
        "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
        "overhead": {"memory": "1Mi"},
        "tolerations": [
            {"key": "baton.io/team", "operator": "Equal", "value": "a", "effect": "NoSchedule"},
            {"operator": "Exists"},
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
                    ]
                }
            }
        },
    },
    "status": {"phase": "Running", "podIP": "10.0.0.7"},
}

NODE: dict[str, Any] = {
    "metadata": {
        "name": "gpu-1.rack-1",
        "uid": "n-1",
        "resourceVersion": "7",
        "labels": {"a": "b"},
    },
    "spec": {"unschedulable": True, "taints": [{"key": "k", "value": "v", "effect": "NoExecute"}]},
    "status": {
        "allocatable": {"cpu": "95500m", "memory": "1Ti", "nvidia.com/gpu": "8", "pods": "110"},
        "conditions": [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": "True", "reason": "KubeletReady"},
        ],
        "images": [{"names": ["x"], "sizeBytes": 1}],
    },
}


def line(type_: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": type_, "object": obj}).encode()


def test_pod_decodes_into_the_slim_struct() -> None:
    change = PODS.decode_watch_line(line("ADDED", POD))
    assert isinstance(change, Change)
    pod = change.obj
    assert isinstance(pod, k8s.Pod)
    assert (pod.namespace, pod.name, pod.uid, pod.resource_version) == (
        "team-a",
        "job7-w-0",
        "u-1",
        "42",
    )
    assert pod.gang == "job7"
    assert pod.annotations == {
        "baton.io/team": "a",
        "sim.baton.io/duration": "60",
        "kubernetes.io/egress-bandwidth": "10G",
    }
    # max(sum of containers, largest init container) + overhead
    assert pod.requests == {"cpu": 2000, "nvidia.com/gpu": 4, "memory": 2**30 + 2**20}
    assert pod.scheduler_name == "baton" and pod.priority == 100 and pod.phase == "Running"
    assert pod.pod_ip == "10.0.0.7" and pod.node_selector == {"pool": "gpu"}
    assert pod.tolerations == (
        k8s.Toleration(key="baton.io/team", value="a", effect="NoSchedule"),
        k8s.Toleration(operator="Exists"),
    )
    assert pod.affinity[0].matches({"rack": "r1"}) and not pod.affinity[0].matches({"rack": "r2"})
    assert pod.created_at == 1795309200.0
    assert not pod.terminating


def test_a_resource_given_only_as_a_limit_is_requested_at_that_limit() -> None:
    spec = {"containers": [
        {"name": "a", "resources": {"limits": {"nvidia.com/gpu": 8, "cpu": "4"},
                                    "requests": {"cpu": "1"}}},
    ]}  # fmt: skip
    change = PODS.decode_watch_line(line("ADDED", {**POD, "spec": spec}))
    assert isinstance(change, Change)
    assert change.obj.requests == {"nvidia.com/gpu": 8, "cpu": 1000}  # as the API server


def test_terminating_pod_and_unknown_phase() -> None:
    raw = {
        "metadata": {**POD["metadata"], "deletionTimestamp": "2026-11-22T01:01:00Z"},
        "spec": {},
        "status": {"phase": "Weird"},
    }
    change = PODS.decode_watch_line(line("MODIFIED", raw))
    assert isinstance(change, Change) and isinstance(change.obj, k8s.Pod)
    assert change.obj.terminating and change.obj.phase == "Unknown"
    assert change.obj.scheduler_name == "default-scheduler" and change.obj.requests == {}


def test_node_decodes_with_ready_taints_and_allocatable() -> None:
    change = NODES.decode_watch_line(line("MODIFIED", NODE))
    assert isinstance(change, Change) and change.type == "MODIFIED"
    node = change.obj
    assert isinstance(node, k8s.Node)
    assert node.name == "gpu-1.rack-1" and node.ready and node.unschedulable
    assert node.taints == (k8s.Taint(key="k", value="v", effect="NoExecute"),)
    assert node.allocatable == {"cpu": 95_500, "memory": 2**40, "nvidia.com/gpu": 8, "pods": 110}
    assert NODES.key(node) == "gpu-1.rack-1"


def test_node_carries_batons_annotations_only() -> None:
    notes = {"baton.io/health": '{"state":"healthy"}', "node.alpha.kubernetes.io/ttl": "0"}
    raw = {**NODE, "metadata": {**NODE["metadata"], "annotations": notes}}
    change = NODES.decode_watch_line(line("MODIFIED", raw))
    assert isinstance(change, Change) and isinstance(change.obj, k8s.Node)
    assert change.obj.annotations == {"baton.io/health": '{"state":"healthy"}'}


def test_node_without_ready_true_is_not_ready() -> None:
    raw = {**NODE, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}
    change = NODES.decode_watch_line(line("MODIFIED", raw))
    assert isinstance(change, Change) and isinstance(change.obj, k8s.Node)
    assert not change.obj.ready


def test_podgroup_and_endpointslice() -> None:
    group = {
        "metadata": {"name": "job7", "namespace": "team-a", "uid": "g", "resourceVersion": "3"},
        "spec": {"minMember": 16, "scheduleTimeoutSeconds": 60},
        "status": {"phase": "Pending"},
    }
    change = POD_GROUPS.decode_watch_line(line("ADDED", group))
    assert isinstance(change, Change) and isinstance(change.obj, k8s.PodGroup)
    assert change.obj.min_member == 16 and change.obj.schedule_timeout_seconds == 60
    assert POD_GROUPS.key(change.obj) == "team-a/job7"

    eps = {
        "metadata": {
            "name": "svc-abc",
            "namespace": "team-a",
            "uid": "e",
            "resourceVersion": "4",
            "labels": {"kubernetes.io/service-name": "svc"},
        },
        "endpoints": [
            {
                "addresses": ["10.0.0.7"],
                "nodeName": "gpu-1",
                "targetRef": {"kind": "Pod", "name": "job7-w-0"},
                "conditions": {"ready": False},
            },
            {"addresses": ["10.0.0.8"]},
        ],
        "ports": [{"port": 8080}, {"name": "none"}],
    }
    change = ENDPOINT_SLICES.decode_watch_line(line("ADDED", eps))
    assert isinstance(change, Change) and isinstance(change.obj, k8s.EndpointSlice)
    assert change.obj.service == "svc" and change.obj.ports == (8080,)
    assert change.obj.endpoints == (
        k8s.Endpoint(addresses=("10.0.0.7",), node_name="gpu-1", pod="job7-w-0", ready=False),
        k8s.Endpoint(addresses=("10.0.0.8",)),
    )


def test_bookmark_and_expired_error() -> None:
    mark = PODS.decode_watch_line(
        line("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "99"}})
    )
    assert mark == Bookmark(resource_version="99")
    gone = PODS.decode_watch_line(
        line("ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"})
    )
    assert isinstance(gone, Failure) and gone.expired
    other = PODS.decode_watch_line(
        line("ERROR", {"kind": "Status", "code": 500, "reason": "Internal"})
    )
    assert isinstance(other, Failure) and not other.expired


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b'{"type": "ADDED"}',
        b'{"type": "SHRUG", "object": {}}',
        json.dumps({"type": "ADDED", "object": {"metadata": {"name": 5}}}).encode(),
    ],
)
def test_undecodable_watch_lines(raw: bytes) -> None:
    with pytest.raises(Undecodable):
        PODS.decode_watch_line(raw)


def test_list_page_decodes_items_and_continue() -> None:
    body = json.dumps(
        {
            "kind": "PodList",
            "metadata": {"resourceVersion": "50", "continue": "tok"},
            "items": [POD, POD],
        }
    ).encode()
    page = PODS.decode_page(body)
    assert page.resource_version == "50" and page.continue_token == "tok"
    assert [p.name for p in page.items] == ["job7-w-0", "job7-w-0"]
    empty = PODS.decode_page(b'{"metadata": {"resourceVersion": "1"}, "items": null}')
    assert empty.items == [] and empty.continue_token == ""


def test_status_bodies() -> None:
    assert decode_status(
        b'{"kind":"Status","code":410,"reason":"Expired"}', http_status=410
    ).expired
    failure = decode_status(b"<html>bad gateway</html>", http_status=502)
    assert failure.code == 502 and "bad gateway" in failure.message


@pytest.mark.parametrize(
    ("key", "kept"),
    [
        ("baton.io/admitted", True),
        ("sim.baton.io/duration", True),
        ("kubernetes.io/egress-bandwidth", True),
        ("kubernetes.io/ingress-bandwidth", True),
        ("notbaton.io/x", False),  # only baton.io and its subdomains are Baton's
        ("baton.io", False),  # no slash: not a prefixed key
        ("kubectl.kubernetes.io/last-applied-configuration", False),
    ],
)
def test_only_batons_and_the_bandwidth_annotations_travel(key: str, kept: bool) -> None:
    assert (key in kept_annotations({key: "v"})) is kept
