"""Small jobs on MIG devices beside a large gang, end to end on simcluster with
partitionable GPUs (``mig: true``: each H100 also published as seven 1g.10gb MIG
devices sharing its memory slices).

Issue 23's checks: a stream of 1g.10gb jobs is packed onto the fewest GPUs, so that a
512-GPU gang still finds 64 whole nodes in a cluster of 65. kube-scheduler's default
scoring spreads pods (LeastAllocated) and would break a GPU on many nodes; Baton places
each small job on the node with the fewest partitions left that fits it, and picks MIG
devices of a GPU already partitioned before it breaks a whole one. And a team's cap on
MIG devices (``teams[].devices``) holds through the webhook and admission.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from baton.services.simcluster.world import dra
from baton.services.simcluster.world.spec import from_dict
from tests.e2e.admitting import admitting
from tests.e2e.test_gang_dra import DRA_API, claim_of, claiming, pod, running
from tests.e2e.test_gang_formats import PLUGINS
from tests.pipeline import stack, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

SMALL = 30  # 1g.10gb jobs: ceil(30 / 7) = 5 GPUs, on one node
NODES = 65
FIRST = "gpu-00040"


def template(name: str, device_class: str, count: int) -> dict[str, Any]:
    request = {"name": "devices", "exactly": {"deviceClassName": device_class, "count": count}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def given(s: Any, ns: str, names: list[str]) -> list[tuple[str, str]]:
    """(node, device) of every device the pods' claims hold."""
    out = []
    for name in names:
        claim = claim_of(s, ns, name)
        assert claim is not None, f"{name}: no claim"
        for result in claim["status"]["allocation"]["devices"]["results"]:
            out.append((result["pool"], result["device"]))
    return out


async def test_mig_jobs_pack_onto_the_fewest_gpus_and_a_512_gpu_gang_finds_whole_nodes() -> None:
    spec = from_dict({"pools": [{"name": "gpu", "count": NODES, "mig": True}], "devices": "dra"})
    async with stack(spec=spec, namespaces=["ml"]) as s:
        custom = s.custom
        for body in (template("mig-1g", dra.MIG_CLASS, 1), template("gpus-8", dra.GPU_DRIVER, 8)):
            await custom.create_namespaced_custom_object(*DRA_API, "ml", "resourceclaimtemplates",
                                                         body)  # fmt: skip
        # the first small job pinned to a node far down the list: the others fill its GPU
        # and then its node, not the first node by name
        small = [f"eval-{i}" for i in range(SMALL)]
        await s.api.create_namespaced_pod("ml", claiming(small[0], template="mig-1g", node=FIRST))
        await until(lambda: running(s, "ml", small[:1]), within=60, what=f"{small[0]} Running")
        for name in small[1:]:  # a stream: one after another, each placed as it comes
            await s.api.create_namespaced_pod("ml", claiming(name, template="mig-1g"))
        await until(lambda: running(s, "ml", small), within=180,
                    what=f"all {SMALL} 1g.10gb jobs Running")  # fmt: skip
        devices = given(s, "ml", small)
        assert len(set(devices)) == SMALL, "a MIG device given twice"
        assert all("-mig-1g10gb-" in d for _, d in devices), devices
        gpus = {(n, d.split("-mig-")[0]) for n, d in devices}
        assert len(gpus) == -(-SMALL // dra.MIG_SLOTS), f"spread over {sorted(gpus)}"
        assert {n for n, _ in gpus} == {FIRST}

        group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                 "metadata": {"name": "train"}, "spec": {"minMember": 64}}  # fmt: skip
        await custom.create_namespaced_custom_object(*PLUGINS, "ml", "podgroups", group)
        members = [f"train-{i}" for i in range(64)]
        for name in members:
            await s.api.create_namespaced_pod(
                "ml", claiming(name, template="gpus-8", group="train")
            )
        await until(lambda: running(s, "ml", members), within=180,
                    what="the 64-member, 512-GPU gang Running on whole nodes")  # fmt: skip
        whole = given(s, "ml", members)
        assert len(set(whole)) == 512 and all("-mig-" not in d for _, d in whole)
        nodes = {pod(s, "ml", n)["spec"]["nodeName"] for n in members}
        assert len(nodes) == 64 and not nodes & {n for n, _ in gpus}


CAPPED = """teams:
  - name: a
    namespaces: [team-a]
    pools: [pa]
    devices: {mig.nvidia.com: 7}
"""


async def test_a_team_s_cap_on_mig_devices_holds_until_one_is_given_back(tmp_path: Path) -> None:
    """Team a may hold 7 MIG devices (its GPU quota, its own nodes' 16 GPUs, is not what
    stops it): of 9 1g.10gb jobs 7 run, 2 wait, told the cap; one deleted, one more runs."""
    spec = from_dict({"pools": [{"name": "gpu", "count": 2, "mig": True}], "devices": "dra"})
    ns, jobs = "team-a", [f"eval-{i}" for i in range(9)]
    async with (
        stack(spec=spec, services=False, pools=["pa"] * 2, namespaces=[ns]) as s,
        admitting(s.url, s.sim, s.custom, teams=CAPPED, folder=tmp_path) as admission,
    ):
        await until(lambda: admission.ready, what="admission caught up", within=30)
        body = template("mig-1g", dra.MIG_CLASS, 1)
        await s.custom.create_namespaced_custom_object(*DRA_API, ns, "resourceclaimtemplates",
                                                       body)  # fmt: skip
        for name in jobs:
            await s.api.create_namespaced_pod(ns, claiming(name, template="mig-1g"))

        def reason(name: str) -> str:
            gang = admission.state.gangs.get(f"{ns}/{name}")
            return gang.reason if gang is not None else ""

        def split() -> tuple[list[str], list[str]] | None:
            up = [n for n in jobs if running(s, ns, [n])]
            told = [n for n in jobs if "mig.nvidia.com devices" in reason(n)]
            return (up, told) if len(up) == 7 and len(told) == 2 else None

        found = await until(split, within=90, what="7 MIG jobs Running, 2 told the team's cap")
        assert found is not None
        up, told = found
        assert not set(up) & set(told)
        assert "holds 7 of its 7 mig.nvidia.com devices" in reason(told[0]), reason(told[0])
        await s.api.delete_namespaced_pod(up[0], ns)
        await until(lambda: sum(running(s, ns, [n]) for n in told) == 1, within=60,
                    what="one waiting job admitted and Running once a device is back")  # fmt: skip
