"""A gang of bare pods survives its node failing, through the whole path on simcluster:
bridge -> health -> gang -> actuator -> simcluster's API. The node goes NotReady; the
health service counts it (after a short ``Ready`` duration here), quarantines and drains
it; the gang service restarts the gang whole. The pods come back as their author wrote
them (image, command, env, required node affinity), under their own names, without
Baton's per-placement marks, and are placed again where their affinity allows."""

from __future__ import annotations

from typing import Any

import pytest

from baton.proto.keys import ADMITTED, DRAINING, RECREATED_FROM
from baton.services.health import main as health
from tests.pipeline import stack, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
# NotReady counts after 1 s here (120 s by default); no preflight checks in this test.
HEALTH = health.Settings(after_s={"Ready": 1.0}, preflight=False, tick_s=0.2)
NS = "research"
PODGROUPS = ("scheduling.x-k8s.io", "v1alpha1", NS, "podgroups")


def member(name: str, *, hosts: list[str]) -> dict[str, Any]:
    container = {
        "name": "trainer", "image": "ghcr.io/acme/train:1.4", "command": ["torchrun"],
        "args": ["train.py"], "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
        "resources": {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}},
    }  # fmt: skip
    required = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": hosts}]}]}  # fmt: skip
    return {
        "metadata": {
            "name": name,
            "labels": {"scheduling.x-k8s.io/pod-group": "train"},
            # Stands for Baton's per-placement marks: a copy that kept it would be
            # refused by the admission webhook.
            "annotations": {ADMITTED: "true"},
        },
        "spec": {
            "schedulerName": "baton",
            "containers": [container],
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
            },
        },
    }


async def test_a_bare_pod_gang_comes_back_whole_after_health_drains_its_not_ready_node() -> None:
    async with stack(nodes=8, namespaces=[NS], health_settings=HEALTH) as s:
        api, custom, sim = s.api, s.custom, s.sim
        hosts = sim.cluster.node_names()[:4]
        group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                 "metadata": {"name": "train"}, "spec": {"minMember": 2}}  # fmt: skip
        await custom.create_namespaced_custom_object(*PODGROUPS, group)
        for name in ("train-0", "train-1"):
            await api.create_namespaced_pod(NS, member(name, hosts=hosts))

        def pods() -> list[dict[str, Any]]:
            return list(sim.store.list("pods", namespace=NS)[0])

        def bound() -> bool:
            return len(pods()) == 2 and all(p["spec"].get("nodeName") for p in pods())

        await until(bound, within=30, what="the gang to be bound")
        old = {p["metadata"]["name"]: p for p in pods()}
        victim = old["train-0"]["spec"]["nodeName"]
        sim.cluster.node_not_ready(victim)

        def back() -> bool:
            uids = {p["metadata"]["uid"] for p in old.values()}
            return bound() and not uids & {p["metadata"]["uid"] for p in pods()}

        await until(back, within=90, what="both members recreated and placed again")
        drained = sim.store.get("nodes", None, victim)["spec"].get("taints", [])
        assert DRAINING in {t["key"] for t in drained}  # health drained it; gang followed
        for pod in pods():
            was = old[pod["metadata"]["name"]]
            assert pod["spec"]["containers"] == was["spec"]["containers"]  # image, command, env
            assert pod["spec"]["affinity"] == was["spec"]["affinity"]
            assert pod["spec"]["nodeName"] in hosts and pod["spec"]["nodeName"] != victim
            notes = pod["metadata"].get("annotations", {})
            assert ADMITTED not in notes
            assert notes[RECREATED_FROM] == was["metadata"]["uid"]
            assert pod["metadata"]["labels"] == was["metadata"]["labels"]
