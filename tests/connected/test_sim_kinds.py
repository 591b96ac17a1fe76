"""The kinds and semantics users reach for, over HTTP: real kubectl create/apply with
validation on (OpenAPI), events.k8s.io, PriorityClasses, upstream Workloads/PodGroups,
CapacityBuffers, requests defaulted from limits."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.support.sim import Sim, running_sim

pytestmark = [
    pytest.mark.connected,
    pytest.mark.timeout(90),
    pytest.mark.skipif(not os.path.exists("/usr/bin/kubectl"), reason="no /usr/bin/kubectl"),
]
KUBECTL = "/usr/bin/kubectl"

MANIFESTS = """
apiVersion: v1
kind: Pod
metadata: {name: cuda}
spec:
  containers:
  - name: cuda
    image: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0
    resources:
      limits: {nvidia.com/gpu: 1}
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: job7}
spec: {minMember: 2}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: balloon}
value: -10
description: placeholder pods
---
apiVersion: scheduling.k8s.io/v1alpha2
kind: Workload
metadata: {name: train}
spec:
  podGroupTemplates:
  - name: workers
    schedulingPolicy: {gang: {minCount: 4}}
---
apiVersion: scheduling.k8s.io/v1alpha2
kind: PodGroup
metadata: {name: train-workers}
spec:
  schedulingPolicy: {gang: {minCount: 4}}
---
apiVersion: autoscaling.x-k8s.io/v1alpha1
kind: CapacityBuffer
metadata: {name: warm}
spec: {replicas: 3}
---
apiVersion: events.k8s.io/v1
kind: Event
metadata: {name: xid79}
eventTime: "2026-01-01T00:00:00.000000Z"
reportingController: baton.io/health
reportingInstance: health-0
action: Taint
reason: Xid79
type: Warning
note: GPU 3 has fallen off the bus
regarding: {kind: Node, name: gpu-00001}
"""


@pytest.fixture
async def sim() -> AsyncIterator[Sim]:
    async with running_sim() as s:
        yield s


@pytest.fixture
async def api(sim: Sim) -> AsyncIterator[client.ApiClient]:
    api_client = await sim.api_client()
    try:
        yield api_client
    finally:
        await api_client.close()


async def kubectl(sim: Sim, tmp: Path, *args: str, stdin: str = "") -> str:
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        f"--kubeconfig={sim.kubeconfig}",
        f"--cache-dir={tmp / 'kube-cache'}",
        *args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 30)
    assert proc.returncode == 0, err.decode()
    assert b"warning" not in err.lower(), err.decode()
    return out.decode()


async def test_kubectl_create_and_apply_validate_on_the_server(sim: Sim, tmp_path: Path) -> None:
    created = await kubectl(sim, tmp_path, "create", "--save-config", "-f", "-", stdin=MANIFESTS)
    assert created.count("created") == 7, created
    # apply again, changed: kubectl patches each kind (strategic for built-ins, merge else)
    changed = MANIFESTS.replace("minMember: 2", "minMember: 3").replace("value: -10", "value: -5")
    applied = await kubectl(sim, tmp_path, "apply", "-f", "-", stdin=changed)
    assert "podgroup.scheduling.x-k8s.io/job7 configured" in applied
    assert "priorityclass.scheduling.k8s.io/balloon configured" in applied
    assert sim.store.get("podgroups", "default", "job7")["spec"]["minMember"] == 3
    assert sim.store.get("priorityclasses", None, "balloon")["value"] == -5
    applied = await kubectl(sim, tmp_path, "apply", "-f", "-", stdin=changed)
    # (the pod may be "configured": the file's GPU limit 1 is a number, the live one "1")
    assert applied.count("unchanged") >= 6, applied
    requests = await kubectl(
        sim, tmp_path, "get", "pod", "cuda", "-o", "jsonpath={.spec.containers[0].resources}"
    )
    assert json.loads(requests) == {
        "limits": {"nvidia.com/gpu": "1"},
        "requests": {"nvidia.com/gpu": "1"},
    }


async def test_kubectl_patches_podgroup_status_with_a_merge_patch(sim: Sim, tmp_path: Path) -> None:
    await kubectl(sim, tmp_path, "create", "-f", "-", stdin=MANIFESTS)
    patch = '{"status": {"phase": "Running", "scheduled": 2}}'
    await kubectl(
        sim, tmp_path, "patch", "podgroup", "job7", "--subresource=status", "--type=merge",
        "-p", patch,
    )  # fmt: skip
    # the main resource ignores status; the status subresource ignores spec
    await kubectl(
        sim, tmp_path, "patch", "podgroup", "job7", "--type=merge",
        "-p", '{"status": {"phase": "Failed"}, "spec": {"minMember": 5}}',
    )  # fmt: skip
    await kubectl(
        sim, tmp_path, "patch", "podgroups.scheduling.k8s.io", "train-workers",
        "--subresource=status", "--type=merge", "-p", '{"status": {"phase": "Scheduled"}}',
    )  # fmt: skip
    got = sim.store.get("podgroups", "default", "job7")
    assert (got["status"], got["spec"]["minMember"]) == ({"phase": "Running", "scheduled": 2}, 5)
    upstream = sim.store.get("podgroups.scheduling.k8s.io", "default", "train-workers")
    assert upstream["status"] == {"phase": "Scheduled"}


async def test_events_are_one_store_seen_through_two_groups(api: client.ApiClient) -> None:
    events = client.EventsV1Api(api)
    made = await events.create_namespaced_event(
        "default",
        {
            "metadata": {"name": "taint-gpu-00002"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "baton.io/health",
            "reportingInstance": "health-0",
            "action": "Taint",
            "reason": "Xid79",
            "type": "Warning",
            "note": "GPU 3 has fallen off the bus",
            "regarding": {"kind": "Node", "name": "gpu-00002"},
        },
    )
    assert made.regarding.name == "gpu-00002" and made.note.startswith("GPU 3")
    core = await client.CoreV1Api(api).read_namespaced_event("taint-gpu-00002", "default")
    assert (core.involved_object.name, core.message) == ("gpu-00002", made.note)
    assert core.reporting_component == "baton.io/health"
    found = await events.list_namespaced_event("default", field_selector="regarding.name=gpu-00002")
    assert [e.metadata.name for e in found.items] == ["taint-gpu-00002"]
    none = await events.list_namespaced_event("default", field_selector="regarding.name=other")
    assert none.items == []
    await events.patch_namespaced_event("taint-gpu-00002", "default", {"note": "healed"})
    core = await client.CoreV1Api(api).read_namespaced_event("taint-gpu-00002", "default")
    assert core.message == "healed"


async def test_upstream_workloads_are_one_object_at_two_versions(api: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    body = {"metadata": {"name": "train"}, "spec": {"podGroupTemplates": []}}
    made = await custom.create_namespaced_custom_object(
        "scheduling.k8s.io", "v1alpha2", "default", "workloads", body
    )
    assert made["apiVersion"] == "scheduling.k8s.io/v1alpha2"
    beta = await custom.get_namespaced_custom_object(
        "scheduling.k8s.io", "v1beta1", "default", "workloads", "train"
    )
    assert beta["apiVersion"] == "scheduling.k8s.io/v1beta1"
    assert beta["metadata"]["uid"] == made["metadata"]["uid"]
    listed = await custom.list_namespaced_custom_object(
        "scheduling.k8s.io", "v1alpha2", "default", "workloads"
    )
    assert [w["apiVersion"] for w in listed["items"]] == ["scheduling.k8s.io/v1alpha2"]


async def test_pod_priority_comes_from_its_priority_class(api: client.ApiClient) -> None:
    core, sched = client.CoreV1Api(api), client.SchedulingV1Api(api)
    classes = {pc.metadata.name: pc.value for pc in (await sched.list_priority_class()).items}
    assert classes == {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}
    await sched.create_priority_class({"metadata": {"name": "balloon"}, "value": -10})
    spec = {"priorityClassName": "balloon", "containers": [{"name": "c", "image": "pause"}]}
    made = await core.create_namespaced_pod("default", {"metadata": {"name": "b"}, "spec": spec})
    assert (made.spec.priority, made.spec.preemption_policy) == (-10, "PreemptLowerPriority")
    spec["priorityClassName"] = "missing"
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_pod("default", {"metadata": {"name": "m"}, "spec": spec})
    assert err.value.status == 403
    assert "no PriorityClass with name missing" in json.loads(err.value.body)["message"]


async def test_openapi_v2_is_json_and_empty_as_protobuf(sim: Sim) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{sim.url}/openapi/v2") as resp:
            assert resp.status == 200
            doc: dict[str, Any] = await resp.json()
        assert "io.x-k8s.scheduling.v1alpha1.PodGroup" in doc["definitions"]
        protobuf = {"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"}
        async with session.get(f"{sim.url}/openapi/v2", headers=protobuf) as resp:
            assert resp.status == 200  # swagger "2.0", info, no definitions: kubectl skips
            assert (await resp.read()).startswith(b"\x0a\x032.0")  # its own validation
        async with session.get(f"{sim.url}/openapi/v2", headers={"Accept": "text/yaml"}) as resp:
            assert resp.status == 406
        async with session.get(f"{sim.url}/openapi/v3/apis/no.such/v1") as resp:
            assert resp.status == 404
