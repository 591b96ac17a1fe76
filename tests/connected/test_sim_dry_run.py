"""simcluster honours ``dryRun=All`` on every write: answered as the write, never stored.

Each test makes its dry-run writes and then one real write; the first change a watch
(or the store) shows must be the real one, so nothing the dry runs did can hide.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from baton.services.admission.registration import configurations
from tests.support.kubectl import kubectl, needs_kubectl, run_kubectl
from tests.support.sim import Sim, running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]
ROOT = Path(__file__).resolve().parents[2]
POD = {"containers": [{"name": "c", "image": "x"}]}


@pytest.fixture
async def sim() -> AsyncIterator[Sim]:
    async with running_sim() as s:
        s.store.create("nodes", {"metadata": {"name": "n1", "labels": {"a": "1"}}, "spec": {}})
        md = {"metadata": {"name": "md", "namespace": "default"}, "spec": {"replicas": 1}}
        s.store.create("machinedeployments", md)
        s.store.create("pods", {"metadata": {"name": "p", "namespace": "default"}, "spec": POD})
        yield s


def changes_since(sim: Sim, rv: int) -> list[tuple[str, str, str]]:
    return [(c.type, c.res, c.obj["metadata"]["name"]) for c in sim.store.ring.since(rv)]


@needs_kubectl
async def test_kubectl_server_dry_runs_change_nothing(sim: Sim) -> None:
    before = sim.store.rv
    out = await kubectl(sim.kubeconfig, "create", "ns", "x", "--dry-run=server")
    assert "namespace/x created (server dry run)" in out
    out = await kubectl(sim.kubeconfig, "label", "node", "n1", "b=2", "--dry-run=server")
    assert "node/n1 labeled (server dry run)" in out
    out = await kubectl(sim.kubeconfig, "delete", "pod", "p", "--dry-run=server")
    assert 'pod "p" deleted (server dry run)' in out
    assert sim.store.rv == before, changes_since(sim, before)
    assert sim.store.get("nodes", None, "n1")["metadata"]["labels"] == {"a": "1"}
    sim.store.get("pods", "default", "p")
    await kubectl(sim.kubeconfig, "create", "ns", "y")
    assert changes_since(sim, before) == [("ADDED", "namespaces", "y")]


@needs_kubectl
async def test_kubectl_apply_dry_run_keeps_batons_webhook(sim: Sim) -> None:
    for plural, body in configurations("https://127.0.0.1:1", ca_pem=b"pem"):
        sim.store.create(plural, body)
    before = sim.store.rv
    kept = sim.store.get("mutatingwebhookconfigurations", None, "baton")
    code, out, err = await run_kubectl(
        sim.kubeconfig,
        "apply",
        "--dry-run=server",
        "-k",
        str(ROOT / "deploy" / "overlays" / "cert-manager"),
    )
    assert "mutatingwebhookconfiguration.admissionregistration.k8s.io/baton" in out, (code, err)
    # every kind is served (kept, not run); as kube-apiserver, a dry run creates no
    # namespace, so what would go into one that does not exist yet is refused
    assert "no matches for kind" not in err, err
    assert 'namespaces "baton-system" not found' in err, err
    assert sim.store.rv == before, changes_since(sim, before)
    assert sim.store.get("mutatingwebhookconfigurations", None, "baton") is kept


async def test_every_write_kind_is_dry(sim: Sim) -> None:
    api = await sim.api_client()
    core = client.CoreV1Api(api)
    before = sim.store.rv
    try:
        body = {"metadata": {"name": "q"}, "spec": POD}
        made = await core.create_namespaced_pod("default", body, dry_run="All")
        assert made.metadata.uid and made.spec.scheduler_name == "default-scheduler"
        assert made.metadata.resource_version is None
        patched = await core.patch_node("n1", {"metadata": {"labels": {"b": "2"}}}, dry_run="All")
        assert patched.metadata.labels == {"a": "1", "b": "2"}
        node = await core.read_node("n1")
        node.spec.unschedulable = True
        replaced = await core.replace_node("n1", node, dry_run="All")
        assert (
            replaced.spec.unschedulable
            and replaced.metadata.resource_version == node.metadata.resource_version
        )
        status = {"status": {"phase": "Running"}}
        await core.patch_namespaced_pod_status("p", "default", status, dry_run="All")
        await core.delete_namespaced_pod("p", "default", dry_run="All")
        await core.delete_collection_namespaced_pod("default", dry_run="All")
        await core.delete_namespace("default", dry_run="All")
        binding = {"target": {"kind": "Node", "name": "n1"}, "metadata": {"name": "p"}}
        await core.create_namespaced_pod_binding(
            "p", "default", binding, dry_run="All", _preload_content=False
        )
        eviction = {"metadata": {"name": "p"}, "deleteOptions": {"dryRun": ["All"]}}
        await core.create_namespaced_pod_eviction("p", "default", eviction, _preload_content=False)
        custom = client.CustomObjectsApi(api)
        group = {"group": "cluster.x-k8s.io", "version": "v1beta1", "namespace": "default"}
        scale = {"spec": {"replicas": 5}}
        scaled = await custom.patch_namespaced_custom_object_scale(
            **group, plural="machinedeployments", name="md", body=scale, dry_run="All",
            _content_type="application/merge-patch+json",
        )  # fmt: skip
        assert scaled["spec"]["replicas"] == 5
        podgroup = {"metadata": {"name": "g"}, "spec": {"minMember": 2}}
        await custom.create_namespaced_custom_object(
            "scheduling.x-k8s.io", "v1alpha1", "default", "podgroups", podgroup, dry_run="All"
        )
    finally:
        await api.close()
    assert sim.store.rv == before, changes_since(sim, before)
    assert sim.store.get("pods", "default", "p")["spec"].get("nodeName") is None
    sim.store.create("namespaces", {"metadata": {"name": "real"}})
    assert changes_since(sim, before) == [("ADDED", "namespaces", "real")]


async def test_a_watch_sees_no_dry_run(sim: Sim) -> None:
    url = f"{sim.url}/api/v1/namespaces?watch=1&resourceVersion={sim.store.rv}"
    async with aiohttp.ClientSession() as session, session.get(url) as watch:
        await post(session, f"{sim.url}/api/v1/namespaces?dryRun=All", {"metadata": {"name": "d"}})
        await post(session, f"{sim.url}/api/v1/namespaces", {"metadata": {"name": "r"}})
        event = json.loads(await watch.content.readline())
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "r")


async def test_a_bad_dry_run_value_is_refused(sim: Sim) -> None:
    async with aiohttp.ClientSession() as session:
        answer = await post(
            session, f"{sim.url}/api/v1/namespaces?dryRun=Yes", {"metadata": {"name": "d"}}, 422
        )
    assert 'Unsupported value: "Yes"' in answer["message"]
    assert "d" not in [n["metadata"]["name"] for n in sim.store.list("namespaces")[0]]


async def post(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], code: int = 201
) -> Any:
    async with session.post(url, json=body) as resp:
        assert resp.status == code, await resp.text()
        return await resp.json()


async def test_a_webhook_with_side_effects_refuses_a_dry_run(sim: Sim) -> None:
    plural, config = configurations("https://127.0.0.1:1", ca_pem=b"pem")[0]
    config["webhooks"][0]["sideEffects"] = "Some"
    sim.store.create(plural, config)
    async with aiohttp.ClientSession() as session:
        url = f"{sim.url}/api/v1/namespaces/default/pods?dryRun=All"
        body = {"metadata": {"name": "w"}, "spec": POD}
        answer = await post(session, url, body, 400)
    assert answer["message"] == 'admission webhook "pods.baton.io" does not support dry run'
