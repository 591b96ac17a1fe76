"""simcluster's API driven over HTTP by kubernetes-asyncio, as Baton's services drive it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.support.sim import Sim, running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]
# kubernetes-asyncio sends a dict body to custom objects as a JSON patch unless told
MERGE = "application/merge-patch+json"


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


def pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    node: str | None = None,
    scheduler: str = "baton",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "train:1"}],
        "schedulerName": scheduler,
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def status_of(err: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(err.body)
    return body


async def test_discovery_lists_every_resource_and_subresource(api: client.ApiClient) -> None:
    version = await client.VersionApi(api).get_code()
    assert version.major == "1"
    core = await client.CoreV1Api(api).get_api_resources()
    names = {r.name for r in core.resources}
    assert {
        "pods",
        "pods/binding",
        "pods/eviction",
        "pods/status",
        "nodes",
        "nodes/status",
        "namespaces",
        "events",
    } <= names
    groups = await client.ApisApi(api).get_api_versions()
    assert {g.name for g in groups.groups} >= {
        "coordination.k8s.io",
        "discovery.k8s.io",
        "scheduling.x-k8s.io",
        "cluster.x-k8s.io",
    }
    capi = await client.CustomObjectsApi(api).get_api_resources("cluster.x-k8s.io", "v1beta1")
    scale = next(r for r in capi.resources if r.name == "machinedeployments/scale")
    assert (scale.group, scale.kind) == ("autoscaling", "Scale")


async def test_create_get_list_share_one_resource_version(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    first = await core.create_namespaced_pod("default", pod("a"))
    node = await core.create_node({"metadata": {"name": "gpu-1"}})
    assert int(node.metadata.resource_version) == int(first.metadata.resource_version) + 1
    assert first.metadata.uid and first.metadata.creation_timestamp is not None
    assert first.spec.scheduler_name == "baton" and first.status.phase == "Pending"
    got = await core.read_namespaced_pod("a", "default")
    assert got.metadata.resource_version == first.metadata.resource_version
    listed = await core.list_pod_for_all_namespaces()
    assert [p.metadata.name for p in listed.items] == ["a"]
    assert listed.metadata.resource_version == node.metadata.resource_version


async def test_create_ignores_status_of_pods_and_custom_resources(api: client.ApiClient) -> None:
    running = await client.CoreV1Api(api).create_namespaced_pod(
        "default", {**pod("r"), "status": {"phase": "Running"}}
    )
    assert running.status.phase == "Pending"
    made = await client.CustomObjectsApi(api).create_namespaced_custom_object(
        "scheduling.x-k8s.io",
        "v1alpha1",
        "default",
        "podgroups",
        {"metadata": {"name": "g"}, "spec": {"minMember": 2}, "status": {"phase": "Running"}},
    )
    assert "status" not in made


async def test_generate_name_and_missing_namespace(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    made = await core.create_namespaced_pod(
        "default", {"metadata": {"generateName": "job-"}, "spec": pod("x")["spec"]}
    )
    assert made.metadata.name.startswith("job-") and len(made.metadata.name) == 9
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_pod("team-z", pod("a"))
    assert err.value.status == 404
    assert status_of(err.value)["reason"] == "NotFound"


async def test_errors_are_status_bodies(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    with pytest.raises(ApiException) as missing:
        await core.read_namespaced_pod("nope", "default")
    body = status_of(missing.value)
    assert (body["kind"], body["code"], body["reason"]) == ("Status", 404, "NotFound")
    await core.create_namespaced_pod("default", pod("a"))
    with pytest.raises(ApiException) as dup:
        await core.create_namespaced_pod("default", pod("a"))
    assert (dup.value.status, status_of(dup.value)["reason"]) == (409, "AlreadyExists")
    with pytest.raises(ApiException) as bad:
        await core.create_namespaced_pod(
            "default", {"metadata": {"name": "Bad_Name"}, "spec": pod("x")["spec"]}
        )
    invalid = status_of(bad.value)
    assert (bad.value.status, invalid["reason"]) == (422, "Invalid")
    assert invalid["details"]["causes"][0]["field"] == "metadata.name"
    with pytest.raises(ApiException) as selector:
        await core.list_pod_for_all_namespaces(label_selector="a in (b")
    assert (selector.value.status, status_of(selector.value)["reason"]) == (400, "BadRequest")


async def test_update_with_stale_resource_version_conflicts(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    created = await core.create_namespaced_pod("default", pod("a"))
    created.metadata.labels = {"v": "1"}
    updated = await core.replace_namespaced_pod("a", "default", created)
    assert updated.metadata.labels == {"v": "1"}
    created.metadata.labels = {"v": "2"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as err:
        await core.replace_namespaced_pod("a", "default", created)
    assert (err.value.status, status_of(err.value)["reason"]) == (409, "Conflict")
    stale = {
        "metadata": {"resourceVersion": created.metadata.resource_version},
        "spec": {"unschedulable": True},
    }
    await core.create_node({"metadata": {"name": "n"}})
    with pytest.raises(ApiException) as patch_err:
        await core.patch_node("n", stale)
    assert patch_err.value.status == 409


async def test_label_and_field_selectors(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("a", labels={"team": "x", "tier": "1"}))
    await core.create_namespaced_pod("default", pod("b", labels={"team": "y"}, node="n1"))
    await core.create_namespaced_pod(
        "default", pod("c", labels={"tier": "2"}, scheduler="default-scheduler")
    )

    async def names(**kw: str) -> list[str]:
        found = await core.list_namespaced_pod("default", **kw)
        return sorted(p.metadata.name for p in found.items)

    assert await names(label_selector="team=x") == ["a"]
    assert await names(label_selector="team!=x") == ["b", "c"]
    assert await names(label_selector="team in (x,y),!tier") == ["b"]
    assert await names(label_selector="tier notin (1)") == ["b", "c"]
    assert await names(label_selector="tier") == ["a", "c"]
    assert await names(field_selector="spec.nodeName=") == ["a", "c"]
    assert await names(field_selector="spec.nodeName=n1") == ["b"]
    assert await names(field_selector="spec.schedulerName=baton,metadata.name!=a") == ["b"]
    assert await names(field_selector="status.phase=Pending") == ["a", "b", "c"]
    with pytest.raises(ApiException) as err:
        await core.list_namespaced_pod("default", field_selector="spec.image=x")
    assert err.value.status == 400


async def test_paging_with_limit_and_continue(sim: Sim, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    for i in range(25):
        sim.store.create(
            "pods",
            {"metadata": {"name": f"p{i:02}", "namespace": "default"}, "spec": pod("x")["spec"]},
        )
    seen: list[str] = []
    token, pages, first_rv = None, 0, None
    while True:
        page = await core.list_namespaced_pod("default", limit=10, _continue=token)
        first_rv = first_rv or page.metadata.resource_version
        assert page.metadata.resource_version == first_rv
        seen += [p.metadata.name for p in page.items]
        pages += 1
        token = page.metadata._continue
        if not token:
            break
    assert pages == 3 and seen == [f"p{i:02}" for i in range(25)]


async def test_expired_continue_token_is_410() -> None:
    async with running_sim(history=5) as sim:
        api = await sim.api_client()
        try:
            core = client.CoreV1Api(api)
            for i in range(3):
                sim.store.create(
                    "pods",
                    {
                        "metadata": {"name": f"p{i}", "namespace": "default"},
                        "spec": pod("x")["spec"],
                    },
                )
            page = await core.list_namespaced_pod("default", limit=1)
            for i in range(10):
                sim.store.create("nodes", {"metadata": {"name": f"n{i}"}})
            with pytest.raises(ApiException) as err:
                await core.list_namespaced_pod(
                    "default", limit=1, _continue=page.metadata._continue
                )
            assert (err.value.status, status_of(err.value)["reason"]) == (410, "Expired")
        finally:
            await api.close()


async def test_bind_sets_node_once(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("a"))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "a"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-7"},
    }
    # the API answers a Status, which V1Binding cannot hold: read it raw, as clients must
    resp = await core.create_namespaced_pod_binding("a", "default", binding, _preload_content=False)
    assert (resp.status, (await resp.json())["status"]) == (201, "Success")
    assert (await core.read_namespaced_pod("a", "default")).spec.node_name == "gpu-7"
    again = await core.create_namespaced_pod_binding(
        "a", "default", binding, _preload_content=False
    )
    assert (again.status, (await again.json())["reason"]) == (409, "Conflict")


async def test_evict_and_delete_terminate_bound_pods_gracefully(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("bound", node="n1"))
    await core.create_namespaced_pod("default", pod("loose"))
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "bound", "namespace": "default"},
    }
    resp = await core.create_namespaced_pod_eviction(
        "bound", "default", eviction, _preload_content=False
    )
    assert (resp.status, (await resp.json())["status"]) == (201, "Success")
    terminating = await core.read_namespaced_pod("bound", "default")
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.deletion_grace_period_seconds == 30
    await core.delete_namespaced_pod("loose", "default")
    await core.delete_namespaced_pod("bound", "default", grace_period_seconds=0)
    left = await core.list_namespaced_pod("default")
    assert left.items == []


async def test_strategic_merge_patch_of_taints_and_conditions(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_node(
        {
            "metadata": {"name": "n"},
            "spec": {"taints": [{"key": "team", "value": "a", "effect": "NoSchedule"}]},
        }
    )
    await core.patch_node_status(
        "n",
        {
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "GpuHealthy", "status": "True"},
                ]
            }
        },
    )
    await core.patch_node_status(
        "n",
        {"status": {"conditions": [{"type": "GpuHealthy", "status": "False", "reason": "Xid79"}]}},
    )
    node = await core.read_node("n")
    conds = {c.type: (c.status, c.reason) for c in node.status.conditions}
    assert conds == {"Ready": ("True", None), "GpuHealthy": ("False", "Xid79")}
    # taints have no merge key upstream: a strategic patch carries the whole list
    taints = [
        {"key": "team", "value": "a", "effect": "NoSchedule"},
        {"key": "baton.io/gpu-fault", "effect": "NoExecute"},
    ]
    await core.patch_node("n", {"spec": {"taints": taints}})
    node = await core.read_node("n")
    assert [(t.key, t.effect) for t in node.spec.taints] == [
        ("team", "NoSchedule"),
        ("baton.io/gpu-fault", "NoExecute"),
    ]
    await core.patch_node("n", [{"op": "remove", "path": "/spec/taints/0"}])
    node = await core.read_node("n")
    assert [t.key for t in node.spec.taints] == ["baton.io/gpu-fault"]
    await core.patch_node("n", {"spec": {"taints": None}})
    assert (await core.read_node("n")).spec.taints is None


async def test_status_subresource_is_separate(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod("a"))
    await core.patch_namespaced_pod("a", "default", {"status": {"phase": "Running"}})
    assert (await core.read_namespaced_pod("a", "default")).status.phase == "Pending"
    await core.patch_namespaced_pod_status("a", "default", {"status": {"phase": "Running"}})
    assert (await core.read_namespaced_pod("a", "default")).status.phase == "Running"


async def test_custom_resources_and_scale(api: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "job7"},
        "spec": {"minMember": 4},
    }
    made = await custom.create_namespaced_custom_object(
        "scheduling.x-k8s.io", "v1alpha1", "default", "podgroups", group
    )
    assert made["spec"]["minMember"] == 4 and made["metadata"]["uid"]
    await custom.patch_namespaced_custom_object_status(
        "scheduling.x-k8s.io",
        "v1alpha1",
        "default",
        "podgroups",
        "job7",
        {"status": {"phase": "Scheduled"}},
        _content_type=MERGE,
    )
    got = await custom.get_namespaced_custom_object(
        "scheduling.x-k8s.io", "v1alpha1", "default", "podgroups", "job7"
    )
    assert got["status"]["phase"] == "Scheduled"
    md = {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineDeployment",
        "metadata": {"name": "h100"},
        "spec": {"replicas": 2},
    }
    await custom.create_namespaced_custom_object(
        "cluster.x-k8s.io", "v1beta1", "default", "machinedeployments", md
    )
    scale = await custom.patch_namespaced_custom_object_scale(
        "cluster.x-k8s.io",
        "v1beta1",
        "default",
        "machinedeployments",
        "h100",
        {"spec": {"replicas": 5}},
        _content_type=MERGE,
    )
    assert (scale["kind"], scale["spec"]["replicas"]) == ("Scale", 5)
    got = await custom.get_namespaced_custom_object(
        "cluster.x-k8s.io", "v1beta1", "default", "machinedeployments", "h100"
    )
    assert got["spec"]["replicas"] == 5
