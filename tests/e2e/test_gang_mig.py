"""Small jobs on MIG devices beside a large gang, end to end on simcluster with
partitionable GPUs (``mig: true``: each H100 also published as seven 1g.10gb MIG
devices sharing its memory slices).

Issue 23's check: a stream of 1g.10gb jobs is packed onto the fewest GPUs, so that a
512-GPU gang still finds 64 whole nodes in a cluster of 65. kube-scheduler's default
scoring spreads pods (LeastAllocated) and would break a GPU on many nodes; Baton places
each small job on the node with the fewest partitions left that fits it, and picks MIG
devices of a GPU already partitioned before it breaks a whole one.
"""

from __future__ import annotations

from typing import Any

import pytest

from baton.services.simcluster.world import dra
from baton.services.simcluster.world.spec import from_dict
from tests.e2e.test_gang_dra import DRA_API, claim_of, pod, running
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


def claiming(name: str, template: str, *, group: str = "", node: str = "") -> dict[str, Any]:
    labels = {"scheduling.x-k8s.io/pod-group": group} if group else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "schedulerName": "baton",
            **({"nodeSelector": {"kubernetes.io/hostname": node}} if node else {}),
            "containers": [{"name": "main", "image": "ghcr.io/acme/eval:1",
                            "resources": {"claims": [{"name": "devices"}]}}],
            "resourceClaims": [{"name": "devices", "resourceClaimTemplateName": template}],
        },
    }  # fmt: skip


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
        await s.api.create_namespaced_pod("ml", claiming(small[0], "mig-1g", node=FIRST))
        await until(lambda: running(s, "ml", small[:1]), within=60, what=f"{small[0]} Running")
        for name in small[1:]:  # a stream: one after another, each placed as it comes
            await s.api.create_namespaced_pod("ml", claiming(name, "mig-1g"))
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
            await s.api.create_namespaced_pod("ml", claiming(name, "gpus-8", group="train"))
        await until(lambda: running(s, "ml", members), within=180,
                    what="the 64-member, 512-GPU gang Running on whole nodes")  # fmt: skip
        whole = given(s, "ml", members)
        assert len(set(whole)) == 512 and all("-mig-" not in d for _, d in whole)
        nodes = {pod(s, "ml", n)["spec"]["nodeName"] for n in members}
        assert len(nodes) == 64 and not nodes & {n for n, _ in gpus}
