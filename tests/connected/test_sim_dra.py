"""simcluster serves Dynamic Resource Allocation (``resource.k8s.io/v1``) over HTTP, as a
cluster with NVIDIA's GPU DRA driver and an RDMA NIC driver does: drivers' slices per
node, the resourceclaim controller, and kubelets that start a pod only once its claims
are allocated on its node and reserved for it (docs/simcluster.md, "Devices")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from baton.services.simcluster.world.spec import Delays, from_dict
from tests.connected.test_sim_behaviour import bind, phase_is
from tests.pipeline import until
from tests.support.sim import Sim, running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]
DRA = ("resource.k8s.io", "v1")
MERGE = "application/merge-patch+json"
ROOT = "resource.kubernetes.io/pcieRoot"


@pytest.fixture
async def sim() -> AsyncIterator[Sim]:
    spec = from_dict({"pools": [{"name": "gpu", "count": 2}], "devices": "dra"})
    async with running_sim(spec=spec, speed=100.0, delays=Delays(pod_start_s=1)) as s:
        yield s


@pytest.fixture
async def api(sim: Sim) -> AsyncIterator[client.ApiClient]:
    api_client = await sim.api_client()
    try:
        yield api_client
    finally:
        await api_client.close()


async def test_each_node_publishes_its_gpus_and_nics_paired_under_pcie_roots(
    api: client.ApiClient,
) -> None:
    custom = client.CustomObjectsApi(api)
    classes = await custom.list_cluster_custom_object(*DRA, "deviceclasses")
    names = {c["metadata"]["name"] for c in classes["items"]}
    assert names == {"gpu.nvidia.com", "mig.nvidia.com", "dra.net"}
    mine = await custom.list_cluster_custom_object(
        *DRA, "resourceslices", field_selector="spec.nodeName=gpu-00001"
    )
    by_driver = {s["spec"]["driver"]: s["spec"] for s in mine["items"]}
    assert set(by_driver) == {"gpu.nvidia.com", "dra.net"}
    gpus, nics = by_driver["gpu.nvidia.com"]["devices"], by_driver["dra.net"]["devices"]
    assert len(gpus) == len(nics) == 8
    assert by_driver["gpu.nvidia.com"]["pool"]["name"] == "gpu-00001"
    assert gpus[0]["attributes"]["productName"]["string"].startswith("NVIDIA")
    for gpu, nic in zip(gpus, nics, strict=True):  # GPU i and NIC i under one switch
        assert gpu["attributes"][ROOT] == nic["attributes"][ROOT]
    assert len({g["attributes"][ROOT]["string"] for g in gpus}) == 4  # two of each a switch
    everything = await custom.list_cluster_custom_object(*DRA, "resourceslices")
    assert len(everything["items"]) == 4


def template(name: str) -> dict[str, Any]:
    request = {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [request]}}}}  # fmt: skip


def claiming_pod(name: str, template_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "baton",
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template_name}],
            "containers": [{"name": "main", "image": "train:1",
                            "resources": {"claims": [{"name": "gpus"}]}}],
        },
    }  # fmt: skip


async def test_a_pod_s_claim_comes_from_its_template_and_it_starts_once_allocated_and_reserved(
    sim: Sim, api: client.ApiClient
) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    await custom.create_namespaced_custom_object(
        *DRA, "default", "resourceclaimtemplates", template("eight")
    )
    await core.create_namespaced_pod("default", claiming_pod("rank-0", "eight"))

    async def generated() -> str:
        pod = await core.read_namespaced_pod("rank-0", "default")
        found = pod.status.resource_claim_statuses or []
        return found[0].resource_claim_name if found else ""

    name = await until(generated, what="the pod's ResourceClaim from its template")
    claim = await custom.get_namespaced_custom_object(*DRA, "default", "resourceclaims", name)
    assert claim["metadata"]["ownerReferences"][0]["name"] == "rank-0"
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["count"] == 8
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpus"

    await bind(core, "rank-0", "gpu-00001")
    waits = sim.cluster.kubelets.on_claims
    await until(lambda: "not allocated" in waits.get("default/rank-0", ""),
                what="the kubelet holding rank-0 for its unallocated claim")  # fmt: skip
    assert (await core.read_namespaced_pod("rank-0", "default")).status.phase == "Pending"

    pod = await core.read_namespaced_pod("rank-0", "default")
    results = [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu-00002",
                "device": f"gpu-{i}"} for i in range(8)]  # fmt: skip
    status: dict[str, Any] = {"allocation": {"devices": {"results": results}}}
    await custom.patch_namespaced_custom_object_status(
        *DRA, "default", "resourceclaims", name, {"status": status}, _content_type=MERGE
    )
    await until(lambda: "not gpu-00001" in waits.get("default/rank-0", ""),
                what="the kubelet refusing devices of another node")  # fmt: skip
    for result in results:
        result["pool"] = "gpu-00001"
    status["reservedFor"] = [{"resource": "pods", "name": "rank-0", "uid": pod.metadata.uid}]
    await custom.patch_namespaced_custom_object_status(
        *DRA, "default", "resourceclaims", name, {"status": status}, _content_type=MERGE
    )
    await until(phase_is(core, "rank-0", "Running"), what="rank-0 running on its claim")
    assert "default/rank-0" not in waits

    await core.delete_namespaced_pod("rank-0", "default", grace_period_seconds=0)

    async def collected() -> bool:
        left = await custom.list_namespaced_custom_object(*DRA, "default", "resourceclaims")
        return not left["items"]

    await until(collected, what="the pod's generated claim deleted with it")


async def test_a_deleted_node_takes_its_slices_with_it(sim: Sim, api: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    await client.CoreV1Api(api).delete_node("gpu-00001")

    async def gone() -> bool:
        left = await custom.list_cluster_custom_object(*DRA, "resourceslices")
        return {s["spec"]["nodeName"] for s in left["items"]} == {"gpu-00002"}

    await until(gone, what="gpu-00001's slices deleted with the node")


async def test_a_pod_that_ends_leaves_its_claim_and_the_claim_is_deallocated(
    api: client.ApiClient,
) -> None:
    """As the upstream resourceclaim controller does: a pod that Succeeded leaves its
    claims' ``reservedFor``, and a claim reserved for nobody loses its allocation, so
    its devices are free for the next pod (the pod and its generated claim remain)."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    await custom.create_namespaced_custom_object(
        *DRA, "default", "resourceclaimtemplates", template("eight")
    )
    body = claiming_pod("short", "eight")
    body["metadata"]["annotations"] = {"sim.baton.io/duration-seconds": "1"}
    await core.create_namespaced_pod("default", body)

    async def generated() -> str:
        pod = await core.read_namespaced_pod("short", "default")
        found = pod.status.resource_claim_statuses or []
        return found[0].resource_claim_name if found else ""

    name = await until(generated, what="the pod's ResourceClaim from its template")
    await bind(core, "short", "gpu-00001")
    pod = await core.read_namespaced_pod("short", "default")
    results = [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu-00001",
                "device": f"gpu-{i}"} for i in range(8)]  # fmt: skip
    status = {
        "allocation": {"devices": {"results": results}},
        "reservedFor": [{"resource": "pods", "name": "short", "uid": pod.metadata.uid}],
    }
    await custom.patch_namespaced_custom_object_status(
        *DRA, "default", "resourceclaims", name, {"status": status}, _content_type=MERGE
    )
    await until(phase_is(core, "short", "Succeeded"), what="the pod ending", within=30)

    async def released() -> bool:
        claim = await custom.get_namespaced_custom_object(*DRA, "default", "resourceclaims", name)
        return not (claim.get("status") or {}).get("allocation")

    await until(released, what="the ended pod's claim deallocated", within=30)
