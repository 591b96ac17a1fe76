"""simcluster decodes what it stores as the API server does: unknown fields refused under
``fieldValidation=Strict`` (kubectl's default), dropped with a warning under Warn (the
server's default), wrong types refused; kubectl explain reads the served schemas; what
simcluster does not model (container verbs, kinds it does not serve, authorization) is
answered as such, not as a bare NotFound."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.kubectl import kubectl, needs_kubectl, run_kubectl
from tests.support.sim import Sim, running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]
PODS = "/api/v1/namespaces/default/pods"
PODGROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups"


@pytest.fixture
async def sim() -> AsyncIterator[Sim]:
    async with running_sim() as s:
        yield s


def pod(name: str, **spec: Any) -> dict[str, Any]:
    containers = [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 8}}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": containers, **spec},
    }


def podgroup(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": spec,
    }


async def kubectl_create(sim: Sim, tmp_path: Path, body: dict[str, Any]) -> tuple[int, str]:
    path = tmp_path / "object.json"
    path.write_text(json.dumps(body))
    code, _, err = await run_kubectl(sim.kubeconfig, "create", "-n", "default", "-f", str(path))
    return code, err


@needs_kubectl
async def test_kubectl_refuses_a_podgroup_with_a_typo(sim: Sim, tmp_path: Path) -> None:
    code, err = await kubectl_create(sim, tmp_path, podgroup("g", minMembers=3))
    assert code != 0
    assert 'strict decoding error: unknown field "spec.minMembers"' in err
    assert sim.store.list("podgroups")[0] == []


@needs_kubectl
async def test_kubectl_refuses_a_volcano_podgroup_with_a_typo_and_keeps_a_valid_one(
    sim: Sim, tmp_path: Path
) -> None:
    body = {**podgroup("g", minMembers=3), "apiVersion": "scheduling.volcano.sh/v1beta1"}
    code, err = await kubectl_create(sim, tmp_path, body)
    assert code != 0
    assert 'strict decoding error: unknown field "spec.minMembers"' in err
    spec = {"minMember": 3, "queue": "default", "priorityClassName": "high",
            "minResources": {"nvidia.com/gpu": "24"}, "minTaskMember": {"worker": 3}}  # fmt: skip
    body = {**podgroup("g", **spec), "apiVersion": "scheduling.volcano.sh/v1beta1"}
    code, err = await kubectl_create(sim, tmp_path, body)
    assert code == 0, err
    assert sim.store.get("podgroups.scheduling.volcano.sh", "default", "g")["spec"] == spec


@needs_kubectl
async def test_kubectl_refuses_a_pod_with_a_typo(sim: Sim, tmp_path: Path) -> None:
    code, err = await kubectl_create(sim, tmp_path, pod("p", schedulerNmae="baton"))
    assert code != 0
    assert 'unknown field "spec.schedulerNmae"' in err
    code, err = await kubectl_create(sim, tmp_path, pod("p", schedulerName="baton"))
    assert code == 0, err
    assert sim.store.get("pods", "default", "p")["spec"]["schedulerName"] == "baton"


async def post(url: str, body: dict[str, Any]) -> tuple[int, Any, list[str]]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        return resp.status, await resp.json(), resp.headers.getall("Warning", [])


async def test_warn_drops_unknown_fields_and_says_so(sim: Sim) -> None:
    code, answer, warnings = await post(sim.url + PODS, pod("p", schedulerNmae="baton"))
    assert code == 201, answer
    assert warnings == ['299 - "unknown field \\"spec.schedulerNmae\\""']
    assert "schedulerNmae" not in sim.store.get("pods", "default", "p")["spec"]
    code, answer, warnings = await post(
        sim.url + PODS + "?fieldValidation=Ignore", pod("q", priorityy=3)
    )
    assert (code, warnings) == (201, [])
    assert "priorityy" not in sim.store.get("pods", "default", "q")["spec"]


async def test_wrong_types_are_refused_whatever_the_mode(sim: Sim) -> None:
    url = sim.url + PODGROUPS + "?fieldValidation=Ignore"
    code, answer, _ = await post(url, podgroup("g", minMember="three"))
    assert (code, answer["reason"]) == (422, "Invalid"), answer
    assert "spec.minMember in body must be of type integer" in answer["message"]
    code, answer, _ = await post(url, podgroup("g", minMember=0))
    assert code == 422 and "greater than or equal to 1" in answer["message"]
    code, answer, _ = await post(sim.url + PODS, pod("p", priority="high"))
    assert (code, answer["reason"]) == (400, "BadRequest"), answer
    assert answer["message"].startswith('Pod in version "v1" cannot be handled as a Pod')
    assert sim.store.list("podgroups")[0] == [] and sim.store.list("pods")[0] == []


async def test_a_patch_is_checked_too(sim: Sim) -> None:
    await post(sim.url + PODGROUPS, podgroup("g", minMember=2))
    url = sim.url + PODGROUPS + "/g?fieldValidation=Strict"
    patch = {"spec": {"minMembers": 3}}
    headers = {"Content-Type": "application/merge-patch+json"}
    async with (
        aiohttp.ClientSession() as session,
        session.patch(url, data=json.dumps(patch), headers=headers) as resp,
    ):
        assert resp.status == 400, await resp.text()
    assert sim.store.get("podgroups", "default", "g")["spec"] == {"minMember": 2}


@needs_kubectl
async def test_kubectl_explain_reads_the_schemas(sim: Sim) -> None:
    out = await kubectl(sim.kubeconfig, "explain", "podgroup.spec")
    assert "minMember" in out and "Members that must be placed together" in out
    out = await kubectl(sim.kubeconfig, "explain", "pod.spec.containers.resources")
    assert "limits" in out and "requests" in out


@needs_kubectl
async def test_kubectl_container_verbs_say_simcluster_runs_no_containers(sim: Sim) -> None:
    sim.store.create("pods", {**pod("p"), "metadata": {"name": "p", "namespace": "default"}})
    for verb in (["logs", "p"], ["exec", "p", "--", "ls"]):
        code, _, err = await run_kubectl(sim.kubeconfig, *verb)
        assert code != 0
        assert "Error from server (BadRequest): simcluster does not run containers" in err, err


@needs_kubectl
async def test_kubectl_auth_can_i_is_answered(sim: Sim) -> None:
    assert (await kubectl(sim.kubeconfig, "auth", "can-i", "create", "pods")).strip() == "yes"


@needs_kubectl
async def test_an_unserved_kind_has_no_matches(sim: Sim, tmp_path: Path) -> None:
    # (ServiceAccount, which this test named first, is kept now: deploy/ installs one)
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "pvc"}}
    code, err = await kubectl_create(sim, tmp_path, claim)
    assert code != 0
    assert 'no matches for kind "PersistentVolumeClaim" in version "v1"' in err, err
