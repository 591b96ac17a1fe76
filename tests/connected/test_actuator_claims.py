"""A gang bind with DRA claims against a real nats-server and simcluster serving DRA
(``devices: dra``: each node's GPUs and NICs, the resourceclaim controller, kubelets
that start a pod only once its claims are allocated on its node and reserved for it):
the actuator allocates and reserves every member's claims, then binds, all or nothing."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi

from baton.proto.actions import ActionResult, BindGang, Binding
from baton.proto.dra import ClaimAllocation, DeviceResult
from baton.services.actuator import claiming
from baton.services.actuator.core.claims import Consumer, Write
from baton.services.simcluster.world.spec import Delays, from_dict
from tests.connected.test_actuator import Env, actuator, results_of
from tests.pipeline import until
from tests.support.nats import running_nats
from tests.support.sim import running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(90)]

NS = "default"
DRA = ("resource.k8s.io", "v1")
MERGE = "application/merge-patch+json"
NODES = ["gpu-00001", "gpu-00002"]
PODS = ["rank-0", "rank-1"]


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    spec = from_dict({"pools": [{"name": "gpu", "count": 2}], "devices": "dra"})
    async with (
        running_nats() as url,
        running_sim(spec=spec, speed=100.0, delays=Delays(pod_start_s=1)) as sim,
        results_of(url, sim, await sim.api_client(), NODES) as env,
    ):
        yield env


def template() -> dict[str, Any]:
    """Two GPUs and two NICs, all under one PCIe root (GPU i and NIC i share a switch)."""
    requests = [
        {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}},
        {"name": "nics", "exactly": {"deviceClassName": "dra.net", "count": 2}},
    ]
    pair = {"requests": ["gpus", "nics"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}
    spec = {"devices": {"requests": requests, "constraints": [pair]}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "paired"}, "spec": {"spec": spec}}  # fmt: skip


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "baton",
            "resourceClaims": [{"name": "devices", "resourceClaimTemplateName": "paired"}],
            "containers": [{"name": "main", "image": "train:1",
                            "resources": {"claims": [{"name": "devices"}]}}],
        },
    }  # fmt: skip


async def claiming_pods(env: Env) -> dict[str, tuple[str, str, str, str]]:
    """The two pods and their generated claims: pod -> (pod uid, claim, claim uid, node)."""
    core, custom = CoreV1Api(env.client), CustomObjectsApi(env.client)
    await custom.create_namespaced_custom_object(*DRA, NS, "resourceclaimtemplates", template())
    uids = {p: (await core.create_namespaced_pod(NS, pod(p))).metadata.uid for p in PODS}

    async def generated() -> dict[str, str] | None:
        found = {}
        for name in PODS:
            statuses = (await core.read_namespaced_pod(name, NS)).status.resource_claim_statuses
            if not statuses or not statuses[0].resource_claim_name:
                return None
            found[name] = statuses[0].resource_claim_name
        return found

    claims = await until(generated, what="both pods' claims generated from the template")
    out = {}
    for name, node in zip(PODS, NODES, strict=True):
        claim = await custom.get_namespaced_custom_object(*DRA, NS, "resourceclaims", claims[name])
        out[name] = (uids[name], claims[name], claim["metadata"]["uid"], node)
    return out


def devices(node: str) -> tuple[DeviceResult, ...]:
    """gpu-0/nic-0 and gpu-1/nic-1 of ``node``: one PCIe root."""
    return tuple(
        DeviceResult(request=request, driver=driver, pool=node, device=f"{kind}-{i}")
        for request, driver, kind in (("gpus", "gpu.nvidia.com", "gpu"), ("nics", "dra.net", "nic"))
        for i in range(2)
    )


def bind_gang(id_: str, found: dict[str, tuple[str, str, str, str]]) -> BindGang:
    bindings = tuple(
        Binding(namespace=NS, pod=name, uid=uid, node=node,
                claims=(ClaimAllocation(name=claim, uid=claim_uid, results=devices(node)),))
        for name, (uid, claim, claim_uid, node) in sorted(found.items())
    )  # fmt: skip
    return BindGang(id=id_, by="gang", at=time.time(), gang=f"{NS}/g", bindings=bindings)


async def act(env: Env, action: BindGang, **kw: Any) -> ActionResult:
    async with actuator(env, **kw):
        await env.publish(action)
        return await env.result(action.id, within=30.0)


async def claim(env: Env, name: str) -> dict[str, Any]:
    got: dict[str, Any] = await CustomObjectsApi(env.client).get_namespaced_custom_object(
        *DRA, NS, "resourceclaims", name
    )
    return got


async def node_of(env: Env, name: str) -> str:
    return str((await CoreV1Api(env.client).read_namespaced_pod(name, NS)).spec.node_name or "")


async def running(env: Env, names: list[str]) -> None:
    core = CoreV1Api(env.client)

    async def started() -> bool:
        phases = [(await core.read_namespaced_pod(p, NS)).status.phase for p in names]
        return phases == ["Running"] * len(names)

    await until(started, what=f"{names} running on their claims", within=20.0)


async def test_claims_are_allocated_and_reserved_then_the_pods_bound_and_started(
    env: Env,
) -> None:
    found = await claiming_pods(env)
    result = await act(env, bind_gang("g-dra", found))
    assert result.outcome == "applied", result.error
    for name, (uid, claim_name, _, node) in found.items():
        status = (await claim(env, claim_name))["status"]
        results = status["allocation"]["devices"]["results"]
        assert results == [
            {"request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device}
            for r in devices(node)
        ]
        assert status["allocation"]["nodeSelector"]["nodeSelectorTerms"] == [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
        assert status["reservedFor"] == [{"resource": "pods", "name": name, "uid": uid}]
        assert await node_of(env, name) == node
    await running(env, PODS)  # simcluster's kubelet found the claims allocated and reserved


def claim_reads(env: Env) -> float:
    labels = {"verb": "GET", "resource": "resourceclaims", "subresource": "", "code": "200"}
    return float(env.sim.metric("apiserver_request_total", **labels))


async def test_claims_found_unallocated_are_written_unread_and_one_changed_since_is_read(
    env: Env,
) -> None:
    found = await claiming_pods(env)
    action = bind_gang("g-seen", found)
    seen = {b.pod: (await claim(env, b.claims[0].name))["metadata"]["resourceVersion"]
            for b in action.bindings}  # fmt: skip
    action = msgspec.structs.replace(action, bindings=tuple(
        msgspec.structs.replace(b, claims=(msgspec.structs.replace(
            b.claims[0], resource_version=seen[b.pod]),)) for b in action.bindings))  # fmt: skip
    await CustomObjectsApi(env.client).patch_namespaced_custom_object(
        *DRA, NS, "resourceclaims", found["rank-1"][1],
        {"metadata": {"labels": {"touched": "yes"}}}, _content_type=MERGE,
    )  # fmt: skip  # rank-1's claim changed after the decision saw it
    before = claim_reads(env)
    result = await act(env, action)
    assert result.outcome == "applied", result.error
    assert claim_reads(env) - before == 1  # rank-1's, after its write was refused (409)
    for name, (uid, claim_name, _, _) in found.items():
        status = (await claim(env, claim_name))["status"]
        assert status["reservedFor"] == [{"resource": "pods", "name": name, "uid": uid}]
    await running(env, PODS)


@pytest.mark.parametrize(
    ("wrong", "why"),
    [
        ({"name": "no-such-claim"}, "claim default/no-such-claim of default/rank-1 -> "
                                    "gpu-00002 failed: not found"),
        ({"uid": "not-its-uid"}, "failed: claim was replaced (uid "),
    ],
    ids=["missing", "replaced"],
)  # fmt: skip
async def test_a_claim_that_cannot_be_allocated_binds_nothing_and_releases_the_others(
    env: Env, wrong: dict[str, str], why: str
) -> None:
    found = await claiming_pods(env)
    action = bind_gang("g-bad", found)
    last = action.bindings[1]
    broken = msgspec.structs.replace(last.claims[0], **wrong)
    action = msgspec.structs.replace(
        action, bindings=(action.bindings[0], msgspec.structs.replace(last, claims=(broken,)))
    )
    # one at a time: rank-0's claim is written before rank-1's fails, then released
    result = await act(env, action, bind_concurrency=1)
    assert result.outcome == "rolled-back"
    assert why in result.error and "released 1 claims written, bound nothing" in result.error
    assert [await node_of(env, p) for p in PODS] == ["", ""]
    for _, claim_name, _, _ in found.values():
        status = (await claim(env, claim_name)).get("status") or {}
        assert not status.get("allocation") and not status.get("reservedFor"), claim_name


async def test_a_bind_that_fails_after_the_claims_rolls_back_the_pods_and_releases_them(
    env: Env,
) -> None:
    found = await claiming_pods(env)
    await CoreV1Api(env.client).create_namespaced_pod_binding(
        "rank-1", NS, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "rank-1"},
                       "target": {"kind": "Node", "name": NODES[0]}},
        _preload_content=False,
    )  # fmt: skip  # someone bound rank-1 elsewhere meanwhile
    result = await act(env, bind_gang("g-late", found), bind_concurrency=1)
    assert result.outcome == "rolled-back"
    assert "pod already bound to gpu-00001" in result.error, result.error
    assert "rolled back 1 bound members; released 2 claims written" in result.error
    assert await node_of(env, "rank-0") == ""  # recreated unbound (it has no controller)
    status = (await claim(env, found["rank-1"][1])).get("status") or {}
    assert not status.get("allocation") and not status.get("reservedFor")


async def test_a_retry_finds_what_an_earlier_attempt_wrote_and_is_fine(env: Env) -> None:
    found = await claiming_pods(env)
    uid, claim_name, _, node = found["rank-0"]
    mine = (Consumer(name="rank-0", uid=uid),)
    earlier = claiming.status_of(
        Write(kind="allocate", results=devices(node), node=node, reserved_for=mine)
    )
    await CustomObjectsApi(env.client).patch_namespaced_custom_object_status(
        *DRA, NS, "resourceclaims", claim_name, {"status": earlier}, _content_type=MERGE
    )  # an attempt that wrote rank-0's claim, then lost its connection
    async with actuator(env):
        await env.publish(bind_gang("g-try-1", found))
        first = await env.result("g-try-1", within=30.0)
        assert first.outcome == "applied", first.error
        versions = {c: (await claim(env, c))["metadata"]["resourceVersion"]
                    for _, c, _, _ in found.values()}  # fmt: skip
        await env.publish(bind_gang("g-try-2", found))  # the same decision, once more
        again = await env.result("g-try-2", within=30.0)
    assert again.outcome == "already", again.error
    assert {c: (await claim(env, c))["metadata"]["resourceVersion"]
            for _, c, _, _ in found.values()} == versions  # nothing written  # fmt: skip
    assert [await node_of(env, p) for p in PODS] == NODES
    await running(env, PODS)
