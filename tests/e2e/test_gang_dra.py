"""Gangs whose pods claim devices through Dynamic Resource Allocation, end to end on
simcluster with the DRA drivers on (bridge -> gang -> actuator -> simcluster's kubelet).

kube-scheduler allocates one pod's claims at a time; Baton allocates every member's
claims when it places the gang, and the actuator writes them all (``status.allocation``
and ``reservedFor``) before it binds any member, or undoes them and binds none.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import msgspec
import nats
import pytest

from baton.proto import keys
from baton.proto.actions import ActionResult
from baton.services.simcluster.world import dra
from baton.services.simcluster.world.spec import from_dict
from tests.e2e.test_gang_formats import PLUGINS
from tests.pipeline import stack, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

DRA_API = ("resource.k8s.io", "v1")


def paired_template(name: str, pairs: int) -> dict[str, Any]:
    """``pairs`` GPUs and as many RDMA NICs, GPU i with NIC i under one PCIe root: a
    ``matchAttribute`` constraint per pair, as NVIDIA's GPU driver and a NIC driver
    publish them (``resource.kubernetes.io/pcieRoot``)."""
    requests = [
        {"name": f"{kind}{i}", "exactly": {"deviceClassName": driver}}
        for i in range(pairs)
        for kind, driver in (("gpu", dra.GPU_DRIVER), ("nic", dra.NIC_DRIVER))
    ]
    constraints = [
        {"requests": [f"gpu{i}", f"nic{i}"], "matchAttribute": dra.PCIE_ROOT} for i in range(pairs)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": requests, "constraints": constraints}}},
    }


def claiming(
    name: str, *, template: str = "", claim: str = "", group: str = "", node: str = ""
) -> dict[str, Any]:
    """A pod that asks for its devices only through a claim (no ``nvidia.com/gpu``): one
    made from ``template``, or the ResourceClaim ``claim`` other pods may name too; a
    member of PodGroup ``group``, or alone; pinned to ``node`` if given."""
    source = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": template}
    return {
        "metadata": {"name": name, "labels": {keys.POD_GROUP: group} if group else {}},
        "spec": {
            "schedulerName": "baton",
            **({"nodeSelector": {"kubernetes.io/hostname": node}} if node else {}),
            "containers": [{"name": "train", "image": "ghcr.io/acme/train:1",
                            "resources": {"claims": [{"name": "devices"}]}}],
            "resourceClaims": [{"name": "devices", **source}],
        },
    }  # fmt: skip


async def submit(s: Any, ns: str, *, pods: int, pairs: int) -> list[str]:
    custom = s.custom
    await custom.create_namespaced_custom_object(
        *DRA_API, ns, "resourceclaimtemplates", paired_template("paired", pairs)
    )
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": "job"}, "spec": {"minMember": pods}}  # fmt: skip
    await custom.create_namespaced_custom_object(*PLUGINS, ns, "podgroups", group)
    names = [f"job-{i}" for i in range(pods)]
    for name in names:
        await s.api.create_namespaced_pod(ns, claiming(name, group="job", template="paired"))
    return names


def pod(s: Any, ns: str, name: str) -> dict[str, Any]:
    return dict(s.sim.store.get("pods", ns, name))


def claim_of(s: Any, ns: str, name: str) -> dict[str, Any] | None:
    statuses = (pod(s, ns, name).get("status") or {}).get("resourceClaimStatuses") or []
    claim = next((c.get("resourceClaimName") for c in statuses if c.get("name") == "devices"), "")
    return dict(s.sim.store.get("resourceclaims", ns, claim)) if claim else None


def roots(s: Any, node: str) -> dict[tuple[str, str], str]:
    """(driver, device) -> PCIe root, from the node's ResourceSlices."""
    out = {}
    for piece in s.sim.store.list("resourceslices")[0]:
        spec = piece["spec"]
        if spec.get("nodeName") == node:
            for device in spec["devices"]:
                root = device["attributes"][dra.PCIE_ROOT]["string"]
                out[(spec["driver"], device["name"])] = root
    return out


def check_allocated(s: Any, ns: str, names: list[str], *, pairs: int) -> None:
    """Every member runs where its claim is allocated, reserved for it, each GPU paired
    with a NIC under its own PCIe root, and no device is given twice."""
    given: set[tuple[str, str, str]] = set()
    for name in names:
        member, claim = pod(s, ns, name), claim_of(s, ns, name)
        assert claim is not None, f"{name}: no claim"
        node = member["spec"]["nodeName"]
        status = claim["status"]
        results = {r["request"]: r for r in status["allocation"]["devices"]["results"]}
        assert len(results) == 2 * pairs, f"{name}: {sorted(results)}"
        assert [r["uid"] for r in status["reservedFor"]] == [member["metadata"]["uid"]]
        where = roots(s, node)
        for i in range(pairs):
            gpu, nic = results[f"gpu{i}"], results[f"nic{i}"]
            assert gpu["pool"] == nic["pool"] == node, f"{name}: {gpu} {nic} not on {node}"
            assert where[(gpu["driver"], gpu["device"])] == where[(nic["driver"], nic["device"])]
        for r in results.values():
            device = (node, r["driver"], r["device"])
            assert device not in given, f"{device} given twice"
            given.add(device)


def running(s: Any, ns: str, names: list[str]) -> bool:
    return all((pod(s, ns, n).get("status") or {}).get("phase") == "Running" for n in names)


async def test_a_64_pod_gang_claiming_8_aligned_gpu_nic_pairs_each_runs_whole() -> None:
    """Issue 23's gang: 64 pods, each claiming 8 GPUs and 8 RDMA NICs as 8 pairs under
    one PCIe root each, on 64 DRA nodes: placed whole, every claim allocated and
    aligned, and simcluster's kubelet starts every pod (it starts none whose claims are
    not allocated on its node and reserved for it)."""
    spec = from_dict({"pools": [{"name": "gpu", "count": 64}], "devices": "dra"})
    async with stack(spec=spec, namespaces=["ml"]) as s:
        names = await submit(s, "ml", pods=64, pairs=8)
        await until(lambda: running(s, "ml", names), within=180,
                    what="all 64 members Running with their claims allocated")  # fmt: skip
        check_allocated(s, "ml", names, pairs=8)
        nodes = {pod(s, "ml", n)["spec"]["nodeName"] for n in names}
        assert len(nodes) == 64, f"8 GPUs each: one member a node, got {len(nodes)} nodes"
        # rails: on alike free nodes every member's pair i has the same NIC, so rank r of
        # every node talks on the same rail (the search picks by position, alike here)
        rails = {
            tuple(sorted((r["request"], r["device"]) for r in claim["status"]["allocation"]
                         ["devices"]["results"] if r["request"].startswith("nic")))
            for claim in (claim_of(s, "ml", n) or {} for n in names)
        }  # fmt: skip
        assert len(rails) == 1, f"members' NICs on {len(rails)} different rail layouts"


async def test_a_claim_that_cannot_be_written_rolls_the_whole_gang_back() -> None:
    """One member's claim refused by the API (an admission policy denying its update):
    no member is bound and the claims written are undone; once the policy lets it
    through, the gang runs whole."""
    spec = from_dict({"pools": [{"name": "gpu", "count": 4}], "devices": "dra"})
    async with stack(spec=spec, namespaces=["ml"]) as s:
        bus = await nats.connect(s.url)
        outcomes: list[str] = []

        async def seen(msg: Any) -> None:
            result = msgspec.json.decode(msg.data, type=ActionResult)
            outcomes.append(result.outcome)

        await bus.subscribe("baton.c1.result.bind-gang.>", cb=seen)
        try:
            await refused(s, names := await claims_made(s))
            await until(lambda: "rolled-back" in outcomes, within=60,
                        what="a bind of the gang rolled back")  # fmt: skip

            def undone() -> bool:
                bound = [n for n in names if pod(s, "ml", n)["spec"].get("nodeName")]
                assert not bound, f"bound while a claim is refused: {bound}"
                claims = [claim_of(s, "ml", n) for n in names]
                return not any((c or {}).get("status", {}).get("allocation") for c in claims)

            await until(undone, within=60, what="every claim's allocation undone, none bound")
            await heal(s, names)
            await until(lambda: running(s, "ml", names), within=90,
                        what="the gang Running once the claim may be written")  # fmt: skip
            check_allocated(s, "ml", names, pairs=2)
        finally:
            await bus.close()


async def claims_made(s: Any) -> list[str]:
    names = await submit(s, "ml", pods=4, pairs=2)
    await until(lambda: all(claim_of(s, "ml", n) for n in names), within=30,
                what="the resourceclaim controller made every member's claim")  # fmt: skip
    return names


async def refused(s: Any, names: list[str], *, heal: bool = False) -> None:
    claim = claim_of(s, "ml", names[2])
    assert claim is not None
    body = {"resource": "resourceclaims", "namespace": "ml",
            "name": claim["metadata"]["name"], "heal": heal,
            "message": "claims of job-2 are frozen for the test"}  # fmt: skip
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{s.sim.url}/sim/v1/refusals", json=body) as answer,
    ):
        assert answer.status == 200, await answer.text()


async def heal(s: Any, names: list[str]) -> None:
    await refused(s, names, heal=True)
