"""MachineDeployments and CapacityBuffers as the bridge slims them."""

from __future__ import annotations

import json

import pytest

from baton.libs.kube.kinds import CAPACITY_BUFFERS, MACHINE_DEPLOYMENTS
from baton.proto import k8s, keys

pytestmark = pytest.mark.unit

MD = {
    "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment",
    "metadata": {
        "name": "h100", "namespace": "default", "uid": "u-md", "resourceVersion": "7",
        "labels": {"baton.io/pool": "h100"},
        "annotations": {
            keys.NODE_GROUP_MIN: "2", keys.NODE_GROUP_MAX: "x",  # a bad max: not autoscaled
            "capacity.cluster-autoscaler.kubernetes.io/gpu-count": "8",
            "capacity.cluster-autoscaler.kubernetes.io/memory": "2Ti",
        },
    },
    "spec": {"replicas": 4,
             "selector": {"matchLabels": {"cluster.x-k8s.io/deployment-name": "h100"}}},
    "status": {"replicas": 5, "readyReplicas": 3, "conditions": [
        {"type": "Ready", "status": "False", "reason": "QuotaExceeded", "message": "quota 3"}]},
}  # fmt: skip


def test_a_machine_deployment_keeps_size_bounds_selector_capacity_and_the_clouds_complaint() -> (
    None
):
    page = {"metadata": {"resourceVersion": "9"}, "items": [MD]}
    (md,) = MACHINE_DEPLOYMENTS.decode_page(json.dumps(page).encode()).items
    assert isinstance(md, k8s.MachineDeployment) and md.key == "default/h100"
    assert (md.replicas, md.status_replicas, md.ready_replicas) == (4, 5, 3)
    assert (md.min_size, md.max_size) == (2, None)
    assert md.selector == {"cluster.x-k8s.io/deployment-name": "h100"}
    assert md.capacity == {keys.GPU: 8, "memory": 2 << 40}
    assert (md.reason, md.message) == ("QuotaExceeded", "quota 3")


def test_a_capacity_buffer_is_its_replicas_and_its_pool_label() -> None:
    buffer = {"metadata": {"name": "warm", "namespace": "ml", "uid": "u-b",
                           "labels": {"baton.io/pool": "h100"}},
              "spec": {"replicas": 3, "podTemplateRef": {"name": "trainer"}}}  # fmt: skip
    line = json.dumps({"type": "ADDED", "object": buffer}).encode()
    change = CAPACITY_BUFFERS.decode_watch_line(line)
    got = change.obj  # type: ignore[union-attr]
    assert isinstance(got, k8s.CapacityBuffer)
    assert (got.replicas, got.pod_template, got.labels) == (3, "trainer", {"baton.io/pool": "h100"})


def test_daemonset_and_static_pods_are_marked_daemon() -> None:
    from baton.libs.kube.kinds import PODS

    def slim(meta: dict[str, object]) -> k8s.Pod:
        body = {"metadata": {"name": "p", "namespace": "n", "uid": "u", **meta}, "spec": {}}
        line = json.dumps({"type": "ADDED", "object": body}).encode()
        return PODS.decode_watch_line(line).obj  # type: ignore[union-attr,return-value]

    assert slim({"ownerReferences": [{"kind": "DaemonSet", "name": "agent", "uid": "x"}]}).daemon
    assert slim({"annotations": {"kubernetes.io/config.mirror": "abc"}}).daemon
    assert not slim({"ownerReferences": [{"kind": "ReplicaSet", "name": "r", "uid": "y"}]}).daemon
