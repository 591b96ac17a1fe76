"""Time-slicing one GPU among small jobs: several pods name one ResourceClaim, end to end
on simcluster serving DRA (``devices: dra``).

Mirrors kubernetes-sigs/dra-example-driver's ``demo/examples/basic-shared-claim-across-
pods`` (two pods whose ``resourceClaims`` name the one claim ``single-gpu``: both run on
the one device), with four pods and NVIDIA's time-slicing config on the claim, then what
Baton adds: the shared GPU counts once, so the node it is on still offers its other 7
GPUs (a 7-GPU job goes there, best fit) and a 2 x 8-GPU gang finds the two whole nodes
left. Kubernetes' scheduler places such pods one at a time on the claim's node; Baton
counts the claim on the first pod that names it, holds the others until the claim is
allocated, then places them on its node, reserved for each (``reservedFor``)."""

from __future__ import annotations

from typing import Any

import pytest

from baton.services.reporter import main as reporter
from baton.services.simcluster.world import dra
from baton.services.simcluster.world.spec import from_dict
from tests.e2e.test_gang_dra import DRA_API, claim_of, claiming, pod, running
from tests.e2e.test_gang_formats import PLUGINS
from tests.e2e.test_gang_mig import template
from tests.pipeline import stack, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

NOTEBOOKS = [f"nb-{i}" for i in range(4)]
TOLD = reporter.Settings(pod_every=0.2, tick_every=0.1)  # waiting pods told at once


def shared_claim() -> dict[str, Any]:
    """One GPU, time-sliced among the pods that name it (NVIDIA's GpuConfig)."""
    sharing = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
               "sharing": {"strategy": "TimeSlicing",
                           "timeSlicingConfig": {"interval": "Default"}}}  # fmt: skip
    request = {"name": "gpu", "exactly": {"deviceClassName": dra.GPU_DRIVER, "count": 1}}
    config = {"opaque": {"driver": dra.GPU_DRIVER, "parameters": sharing}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "single-gpu"},
            "spec": {"devices": {"requests": [request], "config": [config]}}}  # fmt: skip


async def make_template(s: Any, name: str, gpus: int) -> None:
    body = template(name, dra.GPU_DRIVER, gpus)
    await s.custom.create_namespaced_custom_object(*DRA_API, "ml", "resourceclaimtemplates", body)


def gpu_processes(s: Any, node: str) -> dict[int, list[str]]:
    """GPU index -> the pods with a process on it, as the node's NVML would show."""
    doc = s.sim.cluster.hardware.machine(node)
    return {g.index: sorted(p.pod for p in g.processes) for g in doc.gpus if g.processes}


async def test_pods_sharing_a_claim_share_its_gpu_and_the_node_keeps_its_other_seven() -> None:
    spec = from_dict({"pools": [{"name": "gpu", "count": 3}], "devices": "dra"})
    async with stack(spec=spec, namespaces=["ml"]) as s:
        custom = s.custom
        await custom.create_namespaced_custom_object(*DRA_API, "ml", "resourceclaims",
                                                     shared_claim())  # fmt: skip
        for name in NOTEBOOKS:
            await s.api.create_namespaced_pod("ml", claiming(name, claim="single-gpu"))
        await until(lambda: running(s, "ml", NOTEBOOKS), within=90,
                    what="the 4 pods sharing single-gpu Running")  # fmt: skip
        nodes = {pod(s, "ml", n)["spec"]["nodeName"] for n in NOTEBOOKS}
        assert len(nodes) == 1, f"one claim, one GPU, one node: {nodes}"
        (node,) = nodes
        status = s.sim.store.get("resourceclaims", "ml", "single-gpu")["status"]
        (given,) = status["allocation"]["devices"]["results"]
        assert given["pool"] == node
        assert sorted(r["name"] for r in status["reservedFor"]) == NOTEBOOKS
        index = int(given["device"].removeprefix("gpu-"))
        assert gpu_processes(s, node) == {index: [f"ml/{n}" for n in NOTEBOOKS]}

        # The shared GPU counts once: its node has 7 GPUs free, the best fit for 7.
        await make_template(s, "gpus-7", 7)
        await s.api.create_namespaced_pod("ml", claiming("finetune", template="gpus-7"))
        await until(lambda: running(s, "ml", ["finetune"]), within=60, what="finetune Running")
        assert pod(s, "ml", "finetune")["spec"]["nodeName"] == node
        finetune = claim_of(s, "ml", "finetune")
        assert finetune is not None
        taken = {r["device"] for r in finetune["status"]["allocation"]["devices"]["results"]}
        assert given["device"] not in taken and len(taken) == 7

        # ... and a gang of two 8-GPU members finds the two whole nodes left.
        await make_template(s, "gpus-8", 8)
        group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                 "metadata": {"name": "train"}, "spec": {"minMember": 2}}  # fmt: skip
        await custom.create_namespaced_custom_object(*PLUGINS, "ml", "podgroups", group)
        members = ["train-0", "train-1"]
        for name in members:
            await s.api.create_namespaced_pod("ml", claiming(name, template="gpus-8",
                                                             group="train"))  # fmt: skip
        await until(lambda: running(s, "ml", members), within=60, what="the 2 x 8 gang Running")
        assert node not in {pod(s, "ml", n)["spec"]["nodeName"] for n in members}


async def test_a_pod_sharing_a_claim_waits_for_the_first_and_says_so() -> None:
    """The claim is counted on the first pod that names it; the second, created first
    on a cluster with no GPU free for the claim, waits, and says for what."""
    spec = from_dict({"pools": [{"name": "gpu", "count": 1}], "devices": "dra"})
    async with stack(spec=spec, namespaces=["ml"], reporter_settings=TOLD) as s:
        custom = s.custom
        await make_template(s, "gpus-8", 8)
        await s.api.create_namespaced_pod("ml", claiming("big", template="gpus-8"))
        await until(lambda: running(s, "ml", ["big"]), within=60, what="big Running")
        await custom.create_namespaced_custom_object(*DRA_API, "ml", "resourceclaims",
                                                     shared_claim())  # fmt: skip
        for name in NOTEBOOKS[:2]:
            await s.api.create_namespaced_pod("ml", claiming(name, claim="single-gpu"))

        def told(name: str) -> str:
            for c in pod(s, "ml", name).get("status", {}).get("conditions") or ():
                if c.get("type") == "PodScheduled" and c.get("status") == "False":
                    return str(c.get("message", ""))
            return ""

        first = await until(lambda: told(NOTEBOOKS[0]), within=60,
                            what="nb-0 told why it waits")  # fmt: skip
        assert "shares" not in first, first  # the first waits for room, as any pod
        second = await until(lambda: told(NOTEBOOKS[1]), within=60,
                             what="nb-1 told why it waits")  # fmt: skip
        assert "shares ResourceClaim ml/single-gpu with pod nb-0" in second, second
        await s.api.delete_namespaced_pod("big", "ml")  # room: both run, on one GPU
        await until(lambda: running(s, "ml", NOTEBOOKS[:2]), within=60,
                    what="nb-0 and nb-1 Running once big is gone")  # fmt: skip
        claim = s.sim.store.get("resourceclaims", "ml", "single-gpu")
        assert len(claim["status"]["allocation"]["devices"]["results"]) == 1
