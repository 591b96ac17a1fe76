"""simcluster's simulation (kubelets, cloud, faults, workload) seen over HTTP."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from baton.services.simcluster import main
from baton.services.simcluster.world import trace
from baton.services.simcluster.world.spec import Delays
from tests.pipeline import until
from tests.support.sim import Sim, running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]
MERGE = "application/merge-patch+json"
CAPI = ("cluster.x-k8s.io", "v1beta1", "default", "machinedeployments")
# 100x simulated time: a 30 s provisioning delay takes 0.3 s
FAST = {"speed": 100.0, "delays": Delays(pod_start_s=2, termination_s=5, provisioning_s=30)}
T = TypeVar("T")


@pytest.fixture
async def sim() -> AsyncIterator[Sim]:
    async with running_sim(nodes=4, **FAST) as s:
        yield s


@pytest.fixture
async def api(sim: Sim) -> AsyncIterator[client.ApiClient]:
    api_client = await sim.api_client()
    try:
        yield api_client
    finally:
        await api_client.close()


def gpu_pod(name: str, *, gpus: int, duration: float | None = None) -> dict[str, Any]:
    annotations = {} if duration is None else {"sim.baton.io/duration-seconds": str(duration)}
    resources = {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "schedulerName": "baton",
            "containers": [{"name": "main", "image": "train:1", "resources": resources}],
        },
    }


async def bind(core: client.CoreV1Api, name: str, node: str) -> None:
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name=name),
        target=client.V1ObjectReference(kind="Node", name=node),
    )
    await core.create_namespaced_pod_binding(name, "default", body, _preload_content=False)


def phase_is(core: client.CoreV1Api, name: str, phase: str) -> Callable[[], Awaitable[Any]]:
    async def probe() -> Any:
        pod = await core.read_namespaced_pod(name, "default")
        return pod if pod.status.phase == phase else None

    return probe


async def test_bound_pod_runs_for_its_duration_then_succeeds(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", gpu_pod("train", gpus=8, duration=300))
    assert (await core.read_namespaced_pod("train", "default")).status.phase == "Pending"
    await bind(core, "train", "gpu-00002")
    running = await until(phase_is(core, "train", "Running"), what="train Running")
    assert running.status.pod_ip
    assert running.status.host_ip == "10.0.0.2"
    assert {c.type: c.status for c in running.status.conditions}["Ready"] == "True"
    done = await until(phase_is(core, "train", "Succeeded"), what="train Succeeded")
    (container,) = done.status.container_statuses
    assert container.state.terminated.reason == "Completed"


async def test_pod_that_does_not_fit_fails_like_the_kubelet(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    for name in ("first", "second"):
        await core.create_namespaced_pod("default", gpu_pod(name, gpus=6))
        await bind(core, name, "gpu-00001")
    failed = await until(phase_is(core, "second", "Failed"), what="second Failed")
    assert failed.status.reason == "OutOfnvidia.com/gpu"
    assert "requested: 6, used: 6, capacity: 8" in failed.status.message
    assert (await core.read_namespaced_pod("first", "default")).status.phase != "Failed"


async def test_deleted_pod_terminates_and_frees_its_node(sim: Sim, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", gpu_pod("serve", gpus=8))
    await bind(core, "serve", "gpu-00003")
    await until(phase_is(core, "serve", "Running"), what="serve Running")
    assert sim.cluster.used("gpu-00003")["nvidia.com/gpu"] == 8
    terminating = await core.delete_namespaced_pod("serve", "default")
    assert terminating.metadata.deletion_timestamp is not None  # graceful, not gone at once

    async def gone() -> bool:
        try:
            await core.read_namespaced_pod("serve", "default")
        except ApiException as err:
            return err.status == 404
        return False

    await until(gone, what="the pod gone")
    assert "nvidia.com/gpu" not in sim.cluster.used("gpu-00003")


async def pool_nodes(core: client.CoreV1Api) -> list[Any]:
    nodes = await core.list_node(label_selector="baton.io/pool=gpu")
    return list(nodes.items)


async def test_machine_deployment_scale_adds_then_removes_nodes(api: client.ApiClient) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    md = await custom.get_namespaced_custom_object(*CAPI, "gpu")
    assert (md["spec"]["replicas"], md["status"]["readyReplicas"]) == (4, 4)
    # bound ahead to a node that has not joined yet: it starts once the node is there
    await core.create_namespaced_pod("default", gpu_pod("early", gpus=8))
    await bind(core, "early", "gpu-00005")
    await custom.patch_namespaced_custom_object_scale(
        *CAPI, "gpu", {"spec": {"replicas": 6}}, _content_type=MERGE
    )

    async def six_ready() -> list[Any] | None:
        nodes = await pool_nodes(core)
        return nodes if len(nodes) == 6 else None

    nodes = await until(six_ready, what="six nodes ready")
    newest = nodes[-1]
    assert newest.metadata.name == "gpu-00006"
    assert newest.metadata.labels["baton.io/rack"] == "gpu-rack-000"
    assert {c.type: c.status for c in newest.status.conditions}["Ready"] == "True"
    md = await custom.get_namespaced_custom_object(*CAPI, "gpu")
    assert (md["status"]["readyReplicas"], md["status"]["phase"]) == (6, "Running")
    assert (
        await until(phase_is(core, "early", "Running"), what="early Running")
    ).spec.node_name == "gpu-00005"

    # a busy node survives scale-down; empty ones go
    await core.create_namespaced_pod("default", gpu_pod("busy", gpus=1))
    await bind(core, "busy", "gpu-00006")
    await until(phase_is(core, "busy", "Running"), what="busy Running")
    # the autoscaler's choice, as Cluster API's delete-machine annotation, goes first
    marked = {"metadata": {"annotations": {"cluster.x-k8s.io/delete-machine": "yes"}}}
    await core.patch_node("gpu-00005", marked)
    await custom.patch_namespaced_custom_object(
        *CAPI, "gpu", {"spec": {"replicas": 2}}, _content_type=MERGE
    )

    async def two_left() -> list[str] | None:
        names = [n.metadata.name for n in await pool_nodes(core)]
        return names if len(names) == 2 else None

    # marked gpu-00005 first, then the empty ones newest first; busy gpu-00006 stays
    assert await until(two_left, what="two nodes left") == ["gpu-00001", "gpu-00006"]
    md = await custom.get_namespaced_custom_object(*CAPI, "gpu")
    assert (md["status"]["replicas"], md["status"]["readyReplicas"]) == (2, 2)


def condition(node: Any, type_: str) -> Any:
    return next(c for c in node.status.conditions if c.type == type_)


async def test_faults_from_tests_make_a_node_not_ready_and_heal(
    sim: Sim, api: client.ApiClient
) -> None:
    core = client.CoreV1Api(api)
    sim.cluster.node_not_ready("gpu-00004")
    node = await core.read_node("gpu-00004")
    assert (condition(node, "Ready").status, condition(node, "Ready").reason) == (
        "False",
        "KubeletNotReady",
    )
    sim.cluster.gpu_fault("gpu-00004", xid=48, gpu=5)
    node = await core.read_node("gpu-00004")
    assert condition(node, "GPUHealthy").reason == "Xid48"
    assert node.metadata.annotations["sim.baton.io/gpu-fault"] == "xid=48,gpu=5"
    sim.cluster.node_ready("gpu-00004")
    sim.cluster.gpu_heal("gpu-00004")
    node = await core.read_node("gpu-00004")
    assert condition(node, "Ready").status == "True"
    assert condition(node, "GPUHealthy").status == "True"
    assert "sim.baton.io/gpu-fault" not in node.metadata.annotations


async def test_fault_cli_patches_nodes_through_the_api(sim: Sim, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    cli = ["fault", "--kubeconfig", sim.kubeconfig]
    rc = await asyncio.to_thread(
        main.run, [*cli, "gpu-fault", "gpu-00002", "--xid", "79", "--gpu", "3"]
    )
    assert rc == 0
    node = await core.read_node("gpu-00002")
    assert condition(node, "GPUHealthy").message == "GPU 3: Xid 79: GPU has fallen off the bus"
    assert node.metadata.annotations["sim.baton.io/gpu-fault"] == "xid=79,gpu=3"
    assert await asyncio.to_thread(main.run, [*cli, "node-notready", "gpu-00002", "gpu-00003"]) == 0
    for name in ("gpu-00002", "gpu-00003"):
        assert condition(await core.read_node(name), "Ready").status == "False"
    assert await asyncio.to_thread(main.run, [*cli, "gpu-heal", "gpu-00002"]) == 0
    node = await core.read_node("gpu-00002")
    assert condition(node, "GPUHealthy").status == "True"
    assert "sim.baton.io/gpu-fault" not in (node.metadata.annotations or {})
    assert await asyncio.to_thread(main.run, [*cli, "node-ready", "no-such-node"]) == 1


async def test_trace_replay_creates_gangs_in_team_namespaces(
    sim: Sim, api: client.ApiClient
) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    jobs = trace.read(trace.sample_path(), limit=30)
    await sim.cluster.replay(jobs, speed=1e6)
    teams = {f"team-{j.team}" for j in jobs}
    namespaces = {n.metadata.name for n in (await core.list_namespace()).items}
    assert teams <= namespaces
    groups = await custom.list_cluster_custom_object("scheduling.x-k8s.io", "v1alpha1", "podgroups")
    assert len(groups["items"]) == 30
    pods = (
        await core.list_pod_for_all_namespaces(label_selector="scheduling.x-k8s.io/pod-group")
    ).items
    by_group: dict[str, int] = {}
    for p in pods:
        assert p.spec.scheduler_name == "baton"
        assert p.metadata.namespace in teams
        group = p.metadata.labels["scheduling.x-k8s.io/pod-group"]
        by_group[group] = by_group.get(group, 0) + 1
    for g in groups["items"]:
        assert by_group[g["metadata"]["name"]] == g["spec"]["minMember"]
    expected = sum(max(1, -(-j.gpus // 8)) for j in jobs)
    assert len(pods) == expected


async def test_baton_sim_serves_until_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "baton.services.simcluster.main",
        "--nodes",
        "3",
        "--listen",
        "127.0.0.1:0",
        "--kubeconfig",
        str(kubeconfig),
        "--trace",
        "synthetic",
        "--speed",
        "1000",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert line.startswith("simcluster ready url=http://127.0.0.1:"), line
        assert kubeconfig.exists()
        from kubernetes_asyncio import config

        api_client = await config.new_client_from_config(config_file=str(kubeconfig))
        async with api_client:
            nodes = await client.CoreV1Api(api_client).list_node()
            assert len(nodes.items) == 3
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_trace_after_the_webhook_starts_once_a_webhook_is_registered(
    sim: Sim, api: client.ApiClient
) -> None:
    """``baton up``'s trace: no job before Baton's webhook is there (so every job passes
    it, and reaches admission's queue in submission order, not all at once by name)."""
    custom = client.CustomObjectsApi(api)
    replaying = sim.cluster.replay(trace.read(trace.sample_path(), limit=5), speed=1e6,
                                   after_webhook=True)  # fmt: skip
    await asyncio.sleep(0.3)  # room for a replay that does not wait to submit early
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "baton"},
        "webhooks": [],  # calls nothing: only its presence counts
    }
    made = await custom.create_cluster_custom_object(
        "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", config
    )
    await asyncio.wait_for(replaying, timeout=30)
    groups = await custom.list_cluster_custom_object("scheduling.x-k8s.io", "v1alpha1", "podgroups")
    versions = [int(g["metadata"]["resourceVersion"]) for g in groups["items"]]
    assert len(versions) == 5
    assert min(versions) > int(made["metadata"]["resourceVersion"]), "a job came first"
