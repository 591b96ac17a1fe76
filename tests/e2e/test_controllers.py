"""Training jobs as users submit them - a JobSet, an MPIJob, an Indexed Job - through the
whole path on simcluster: the workload controllers inside simcluster create the pods,
bridge -> gang -> actuator place them, health drains a node whose GPU fell off the bus
(Xid 79), the gang service evicts the gang (pods get ``DisruptionTarget``) and the
controllers, not Baton, bring the pods back; Baton places them whole again."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi

from baton.proto import keys
from baton.services.health import main as health
from baton.services.simcluster.world.spec import from_dict
from tests.pipeline import running_services, until
from tests.support.nats import running_nats
from tests.support.sim import running_sim

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
HEALTH = health.Settings(preflight=False, tick_s=0.2)  # GPUHealthy=False drains at once
NS = "research"
Obj = dict[str, Any]
JOBSETS = ("jobset.x-k8s.io", "v1alpha2", NS, "jobsets")
MPIJOBS = ("kubeflow.org", "v2beta1", NS, "mpijobs")
JOBS = ("batch", "v1", NS, "jobs")
# The JobSet of the issue: 4 replicated Jobs x 8 pods x 8 GPUs, each Job in a rack of
# its own, on 5 racks of 8 nodes (one rack to spare for the restart).
JOBS_N, PODS_N = 4, 8
RACKS = from_dict({"pools": [{"name": "gpu", "count": 40}], "topology": {"nodes_per_rack": 8}})


def pod_template(*, gpus: int, seconds: float | None = None, **notes: str) -> Obj:
    container = {"name": "trainer", "image": "ghcr.io/acme/train:1", "command": ["torchrun"],
                 "resources": {"limits": {keys.GPU: str(gpus)}}}  # fmt: skip
    if seconds is not None:
        notes["sim.baton.io/duration-seconds"] = str(seconds)
    return {"metadata": {"annotations": notes},
            "spec": {"schedulerName": "baton", "restartPolicy": "Never",
                     "containers": [container]}}  # fmt: skip


def pods(sim: Any, selector: str) -> list[Obj]:
    return list(sim.store.list("pods", namespace=NS, label_selector=selector)[0])


def live(found: list[Obj]) -> list[Obj]:
    return [p for p in found if not p["metadata"].get("deletionTimestamp")]


def assert_exclusive(sim: Any, placed: list[Obj]) -> None:
    """Each Job's pods in one rack, no two Jobs in the same rack."""
    racks: dict[str, set[str]] = {}
    for pod in placed:
        node = sim.store.get("nodes", None, pod["spec"]["nodeName"])
        job = pod["metadata"]["labels"]["batch.kubernetes.io/job-name"]
        racks.setdefault(job, set()).add(node["metadata"]["labels"][keys.RACK])
    assert all(len(r) == 1 for r in racks.values()), racks
    assert len(set.union(*racks.values())) == len(racks), racks


def jobset(*, jobs: int, pods: int, gpus: int) -> Obj:
    """JobSet "llm": one replicated job of ``jobs`` Jobs x ``pods`` pods, each Job in a
    rack of its own, restarted on failure (up to 3 times)."""
    template = pod_template(gpus=gpus, **{keys.GANG_MEMBERS: str(jobs * pods)})
    job = {"parallelism": pods, "completions": pods, "backoffLimit": 0, "template": template}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "llm", "annotations": {keys.JOBSET_EXCLUSIVE: keys.RACK}},
            "spec": {"failurePolicy": {"maxRestarts": 3},
                     "replicatedJobs": [{"name": "workers", "replicas": jobs,
                                         "template": {"spec": job}}]}}  # fmt: skip


def all_bound(found: list[Obj], count: int) -> bool:
    return len(found) == count and all(p["spec"].get("nodeName") for p in found)


async def test_a_jobset_restarts_whole_through_its_failure_policy_after_an_xid_79() -> None:
    async with (
        running_nats() as url,
        running_sim(spec=RACKS) as sim,
        running_services(url, sim, health_settings=HEALTH) as services,
    ):
        await CoreV1Api(services.client).create_namespace({"metadata": {"name": NS}})
        total = JOBS_N * PODS_N
        evicted: list[Obj] = []

        def on_change(event: str, res: str, obj: Obj) -> None:
            conditions = (obj.get("status") or {}).get("conditions") or ()
            if event == "DELETED" and res == "pods":
                evicted.extend(c for c in conditions if c["type"] == "DisruptionTarget")

        sim.store.add_listener(on_change)
        body = jobset(jobs=JOBS_N, pods=PODS_N, gpus=8)
        await CustomObjectsApi(services.client).create_namespaced_custom_object(*JOBSETS, body)
        selector = "jobset.sigs.k8s.io/jobset-name=llm"

        first = await until(
            lambda: (found := pods(sim, selector)) and all_bound(found, total) and found,
            within=60, what=f"all {total} JobSet pods bound",
        )  # fmt: skip
        assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for p in first} == {
            "0"
        }
        assert_exclusive(sim, first)
        victim = first[0]["spec"]["nodeName"]
        sim.cluster.gpu_fault(victim, xid=79, gpu=0)

        def again() -> list[Obj] | None:
            found = pods(sim, selector)
            fresh = [p for p in found if p["metadata"]["labels"][
                "jobset.sigs.k8s.io/restart-attempt"] == "1"]  # fmt: skip
            return fresh if all_bound(fresh, total) and len(found) == total else None

        second = await until(again, within=120, what=f"all {total} pods of attempt 1 bound")
        assert victim not in {p["spec"]["nodeName"] for p in second}
        assert_exclusive(sim, second)
        assert len(evicted) == total  # every old pod went through pods/eviction
        assert {c["reason"] for c in evicted} == {"EvictionByEvictionAPI"}
        status = sim.store.get("jobsets", NS, "llm")["status"]
        assert status["restarts"] == 1 and status["restartsCountTowardsMax"] == 1
        assert not [c for c in status.get("conditions", ()) if c["type"] == "Failed"]
        jobs = sim.store.list("jobs", namespace=NS)[0]
        assert sorted(j["metadata"]["name"] for j in jobs) == [
            f"llm-workers-{i}" for i in range(JOBS_N)
        ]
        assert all(j["metadata"]["labels"][
            "jobset.sigs.k8s.io/restart-attempt"] == "1" for j in jobs)  # fmt: skip


async def test_an_mpijob_with_a_launcher_runs_as_one_gang() -> None:
    async with (
        running_nats() as url,
        running_sim(nodes=3) as sim,
        running_services(url, sim) as services,
    ):
        await CoreV1Api(services.client).create_namespace({"metadata": {"name": NS}})
        specs = {"Launcher": {"replicas": 1, "template": pod_template(gpus=0, seconds=3)},
                 "Worker": {"replicas": 2, "template": pod_template(gpus=8)}}  # fmt: skip
        body = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "pi"},
                "spec": {"slotsPerWorker": 8, "runPolicy": {"cleanPodPolicy": "Running"},
                         "mpiReplicaSpecs": specs}}  # fmt: skip
        await CustomObjectsApi(services.client).create_namespaced_custom_object(*MPIJOBS, body)
        selector = "training.kubeflow.org/job-name=pi"
        placed = await until(
            lambda: (found := pods(sim, selector)) and all_bound(found, 3) and found,
            within=60, what="the launcher and both workers bound",
        )  # fmt: skip
        assert {p["metadata"]["labels"][keys.POD_GROUP] for p in placed} == {"pi"}
        assert sim.store.get("podgroups", NS, "pi")["spec"]["minMember"] == 3

        def succeeded() -> bool:
            status = sim.store.get("mpijobs", NS, "pi").get("status") or {}
            return any(c["type"] == "Succeeded" and c["status"] == "True"
                       for c in status.get("conditions", ()))  # fmt: skip

        await until(succeeded, within=60, what="the MPIJob Succeeded (its launcher completed)")


async def test_an_indexed_job_s_evicted_pods_are_replaced_and_rejoin_their_gang() -> None:
    async with (
        running_nats() as url,
        running_sim(nodes=4) as sim,
        running_services(url, sim, health_settings=HEALTH) as services,
    ):
        await CoreV1Api(services.client).create_namespace({"metadata": {"name": NS}})
        group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                 "metadata": {"name": "ix"}, "spec": {"minMember": 2}}  # fmt: skip
        await CustomObjectsApi(services.client).create_namespaced_custom_object(
            "scheduling.x-k8s.io", "v1alpha1", NS, "podgroups", group
        )
        template = pod_template(gpus=8)
        template["metadata"]["labels"] = {keys.POD_GROUP: "ix"}
        ignore = {"rules": [{"action": "Ignore",
                             "onPodConditions": [{"type": "DisruptionTarget"}]}]}  # fmt: skip
        body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ix"},
                "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2,
                         "backoffLimit": 0, "podFailurePolicy": ignore,
                         "template": template}}  # fmt: skip
        await CustomObjectsApi(services.client).create_namespaced_custom_object(*JOBS, body)
        selector = "batch.kubernetes.io/job-name=ix"
        first = await until(
            lambda: (found := pods(sim, selector)) and all_bound(found, 2) and found,
            within=60, what="both indexes bound",
        )  # fmt: skip
        old = {p["metadata"]["uid"] for p in first}
        victim = next(p for p in first if p["metadata"]["labels"][INDEX] == "1")
        node = victim["spec"]["nodeName"]
        sim.cluster.gpu_fault(node, xid=79, gpu=0)

        def replaced() -> list[Obj] | None:
            found = pods(sim, selector)
            fresh = [p for p in found if p["metadata"]["uid"] not in old]
            return fresh if all_bound(fresh, 2) and len(found) == 2 else None

        fresh = await until(replaced, within=90, what="both indexes replaced and bound again")
        assert sorted(p["metadata"]["labels"][INDEX] for p in fresh) == ["0", "1"]
        assert node not in {p["spec"]["nodeName"] for p in fresh}
        assert {p["metadata"]["labels"][keys.POD_GROUP] for p in fresh} == {"ix"}
        status = sim.store.get("jobs", NS, "ix")["status"]
        assert status.get("failed", 0) == 0  # the Ignore rule: evictions do not count
        assert not [c for c in status.get("conditions", ()) if c["type"] == "Failed"]


INDEX = "batch.kubernetes.io/job-completion-index"


async def test_exclusive_jobs_never_share_a_rack_that_could_hold_both() -> None:
    """Two Jobs of two 4-GPU pods fit on one node pair, so one rack of two nodes could
    hold the whole JobSet; exclusive placement gives each Job a rack of its own."""
    small = from_dict({"pools": [{"name": "gpu", "count": 6}], "topology": {"nodes_per_rack": 2}})
    async with (
        running_nats() as url,
        running_sim(spec=small) as sim,
        running_services(url, sim) as services,
    ):
        await CoreV1Api(services.client).create_namespace({"metadata": {"name": NS}})
        body = jobset(jobs=2, pods=2, gpus=4)
        await CustomObjectsApi(services.client).create_namespaced_custom_object(*JOBSETS, body)
        placed = await until(
            lambda: (found := pods(sim, "jobset.sigs.k8s.io/jobset-name=llm"))
            and all_bound(found, 4) and found,
            within=60, what="the 4 JobSet pods bound",
        )  # fmt: skip
        assert_exclusive(sim, placed)


async def test_an_mpijob_comes_back_whole_through_its_operator_after_an_xid_79() -> None:
    """Workers are the MPI operator's pods (created again under their names), the launcher
    the Job controller's (replaced); the gang is evicted, never copied by Baton."""
    async with (
        running_nats() as url,
        running_sim(nodes=4) as sim,
        running_services(url, sim, health_settings=HEALTH) as services,
    ):
        await CoreV1Api(services.client).create_namespace({"metadata": {"name": NS}})
        specs = {"Launcher": {"replicas": 1, "template": pod_template(gpus=0)},
                 "Worker": {"replicas": 2, "template": pod_template(gpus=8)}}  # fmt: skip
        body = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "pi"},
                "spec": {"mpiReplicaSpecs": specs}}  # fmt: skip
        await CustomObjectsApi(services.client).create_namespaced_custom_object(*MPIJOBS, body)
        selector = "training.kubeflow.org/job-name=pi"
        first = await until(
            lambda: (found := pods(sim, selector)) and all_bound(found, 3) and found,
            within=60, what="the launcher and both workers bound",
        )  # fmt: skip
        old = {p["metadata"]["uid"] for p in first}
        worker = next(p for p in first if p["metadata"]["name"] == "pi-worker-0")
        victim = worker["spec"]["nodeName"]
        sim.cluster.gpu_fault(victim, xid=79, gpu=0)

        def back() -> list[Obj] | None:
            found = pods(sim, selector)
            fresh = [p for p in found if p["metadata"]["uid"] not in old]
            return fresh if all_bound(fresh, 3) and len(found) == 3 else None

        fresh = await until(back, within=90, what="the MPIJob's 3 pods replaced and bound")
        names = {p["metadata"]["name"] for p in fresh}
        assert {"pi-worker-0", "pi-worker-1"} <= names  # the operator's names, again
        assert victim not in {p["spec"]["nodeName"] for p in fresh}
        assert all(keys.RECREATED_FROM not in p["metadata"].get("annotations", {}) for p in fresh)
