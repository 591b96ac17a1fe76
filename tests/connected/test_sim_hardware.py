"""Simulated hardware over HTTP: list and watch /sim/v1/hardware, faults through the API,
the CLI and traces, GPUs leaving allocatable, pods on their GPUs, preflight pods."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import msgspec
import pytest
from kubernetes_asyncio import client

from baton.services.simcluster import main
from baton.services.simcluster.api.kubeconfig import write_kubeconfig
from baton.services.simcluster.world import fault_trace
from baton.services.simcluster.world.spec import Delays
from baton.services.simcluster.world.targets import Target
from tests.pipeline import until
from tests.support.sim import Sim, running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]
FAST = {"speed": 100.0, "delays": Delays(pod_start_s=2, termination_s=5, preflight_s=5)}
T = TypeVar("T")


# The agreed document, strictly: an extra or a missing field fails the decode.
class Process(msgspec.Struct, forbid_unknown_fields=True):
    pid: int
    used_mib: int
    pod: str


class Mig(msgspec.Struct, forbid_unknown_fields=True):
    uuid: str
    profile: str
    gpu_instance: int
    pod: str


class Gpu(msgspec.Struct, forbid_unknown_fields=True):
    index: int
    uuid: str
    bus_id: str
    present: bool
    temperature_c: int
    ecc_volatile_sbe: int
    ecc_volatile_dbe: int
    ecc_aggregate_sbe: int
    ecc_aggregate_dbe: int
    retired_pages_pending: bool
    retired_pages: int
    row_remap_pending: bool
    row_remap_failure: bool
    nvlink_errors: int
    recovery_action: str
    processes: list[Process]
    pcie_root: str
    numa_node: int | None
    mig_enabled: bool | None
    mig: list[Mig]


class Disk(msgspec.Struct, forbid_unknown_fields=True):
    mount: str
    used_ratio: float
    read_only: bool


class Nic(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    up: bool
    rdma: bool
    pcie_root: str


class Line(msgspec.Struct, forbid_unknown_fields=True):
    seq: int
    line: str


class NodeHardware(msgspec.Struct, forbid_unknown_fields=True):
    node: str
    up: bool
    expected_gpus: int
    gpus: list[Gpu]
    disks: list[Disk]
    nics: list[Nic]
    pods: list[str]
    kernel_log: list[Line]
    kernel_log_seq: int


class HardwareList(msgspec.Struct, forbid_unknown_fields=True):
    resourceVersion: str  # the wire name
    items: list[NodeHardware]


@pytest.fixture
async def sim() -> AsyncIterator[Sim]:
    async with running_sim(nodes=4, **FAST) as s:
        yield s


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def hardware(sim: Sim, http: aiohttp.ClientSession, **query: str) -> HardwareList:
    async with http.get(f"{sim.url}/sim/v1/hardware", params=query) as resp:
        assert resp.status == 200, await resp.text()
        return msgspec.json.decode(await resp.read(), type=HardwareList)


async def post(
    sim: Sim, http: aiohttp.ClientSession, path: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    async with http.post(f"{sim.url}{path}", json=body) as resp:
        answer: dict[str, Any] = await resp.json()
        return resp.status, answer


async def test_list_and_watch_the_hardware_of_every_node(
    sim: Sim, http: aiohttp.ClientSession
) -> None:
    listed = await hardware(sim, http)
    assert [d.node for d in listed.items] == [f"gpu-0000{i}" for i in range(1, 5)]
    first = listed.items[0]
    assert (first.up, first.expected_gpus, len(first.gpus), len(first.nics)) == (True, 8, 8, 9)
    assert [g.bus_id for g in first.gpus][:2] == ["0000:18:00.0", "0000:3b:00.0"]
    params = {"watch": "1", "resourceVersion": listed.resourceVersion}
    async with http.get(f"{sim.url}/sim/v1/hardware", params=params) as resp:
        assert resp.status == 200
        sim.cluster.inject("xid", "gpu-00002", xid=79, gpu=1)
        event = json.loads(await asyncio.wait_for(resp.content.readline(), 10))
    assert event["type"] == "MODIFIED"
    doc = msgspec.convert(event["object"], NodeHardware)
    assert doc.node == "gpu-00002" and not doc.gpus[1].present
    assert doc.gpus[1].recovery_action == "reboot"
    assert doc.kernel_log[-2].line == (
        "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus."
    )
    assert int(event["resourceVersion"]) > int(listed.resourceVersion)
    one = await hardware(sim, http, node="gpu-00002")
    assert [d.node for d in one.items] == ["gpu-00002"]
    async with http.get(f"{sim.url}/sim/v1/hardware/gpu-00003") as resp:
        assert (await resp.json())["node"] == "gpu-00003"
    async with http.get(f"{sim.url}/sim/v1/hardware/gpu-09999") as resp:
        assert resp.status == 404 and (await resp.json())["reason"] == "NotFound"


async def test_a_node_watch_sees_only_its_node_and_added_then_deleted(
    sim: Sim, http: aiohttp.ClientSession, api: client.ApiClient
) -> None:
    params = {"watch": "1", "node": "gpu-00004"}
    async with http.get(f"{sim.url}/sim/v1/hardware", params=params) as resp:
        added = json.loads(await asyncio.wait_for(resp.content.readline(), 10))
        assert (added["type"], added["object"]["node"]) == ("ADDED", "gpu-00004")
        sim.cluster.inject("agent-down", "gpu-00003")
        sim.cluster.inject("agent-down", "gpu-00004")
        modified = json.loads(await asyncio.wait_for(resp.content.readline(), 10))
        assert (modified["object"]["node"], modified["object"]["up"]) == ("gpu-00004", False)
        await client.CoreV1Api(api).delete_node("gpu-00004")  # the cloud replaces it
        deleted = json.loads(await asyncio.wait_for(resp.content.readline(), 10))
        assert (deleted["type"], deleted["object"]["node"]) == ("DELETED", "gpu-00004")


@pytest.fixture
async def api(sim: Sim) -> AsyncIterator[client.ApiClient]:
    api_client = await sim.api_client()
    try:
        yield api_client
    finally:
        await api_client.close()


async def test_a_watch_from_too_old_a_version_gets_410(http: aiohttp.ClientSession) -> None:
    async with running_sim(nodes=2, hardware_history=2, **FAST) as sim:
        listed = await hardware(sim, http)
        for _ in range(3):
            sim.cluster.inject("nvlink", "gpu-00001")
            sim.cluster.hardware.flush()
        params = {"watch": "1", "resourceVersion": listed.resourceVersion}
        async with http.get(f"{sim.url}/sim/v1/hardware", params=params) as resp:
            event = json.loads(await asyncio.wait_for(resp.content.readline(), 10))
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")


def gpu_pod(name: str, gpus: int, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ]
        },
    }


async def bind(core: client.CoreV1Api, name: str, node: str) -> None:
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name=name),
        target=client.V1ObjectReference(kind="Node", name=node),
    )
    await core.create_namespaced_pod_binding(name, "default", body, _preload_content=False)


async def phase(core: client.CoreV1Api, name: str, wanted: str) -> Any:
    async def probe() -> Any:
        pod = await core.read_namespaced_pod(name, "default")
        return pod if pod.status.phase == wanted else None

    return await until(probe, what=f"pod {name} {wanted}")


async def test_running_pods_show_on_their_gpus_and_leave_them(
    sim: Sim, http: aiohttp.ClientSession, api: client.ApiClient
) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", gpu_pod("train", 2))
    await bind(core, "train", "gpu-00001")
    await phase(core, "train", "Running")
    doc = (await hardware(sim, http, node="gpu-00001")).items[0]
    assert doc.pods == ["default/train"]
    holders = [(g.index, p.pod) for g in doc.gpus for p in g.processes]
    assert holders == [(0, "default/train"), (1, "default/train")]
    await core.delete_namespaced_pod("train", "default", grace_period_seconds=0)

    async def idle() -> bool:
        doc = (await hardware(sim, http, node="gpu-00001")).items[0]
        return not doc.pods and not any(g.processes for g in doc.gpus)

    await until(idle, what="gpu-00001's GPUs free")


async def test_an_unhealthy_gpu_leaves_allocatable_until_healed(
    sim: Sim, api: client.ApiClient
) -> None:
    core = client.CoreV1Api(api)
    sim.cluster.inject("gpu-lost", "gpu-00003", gpu=5)
    sim.cluster.inject("ecc", "gpu-00003", gpu=6, dbe=1)
    node = await core.read_node("gpu-00003")
    assert (node.status.capacity["nvidia.com/gpu"], node.status.allocatable["nvidia.com/gpu"]) == (
        "8",
        "6",
    )
    # the kubelet admits against allocatable: 8 GPUs no longer fit
    await core.create_namespaced_pod("default", gpu_pod("big", 8))
    await bind(core, "big", "gpu-00003")
    failed = await phase(core, "big", "Failed")
    assert failed.status.reason == "OutOfnvidia.com/gpu"
    sim.cluster.heal("ecc", "gpu-00003", gpu=6)
    assert (await core.read_node("gpu-00003")).status.allocatable["nvidia.com/gpu"] == "7"
    sim.cluster.heal("gpu-lost", "gpu-00003")
    assert (await core.read_node("gpu-00003")).status.allocatable["nvidia.com/gpu"] == "8"
    # a full nodefs is DiskPressure, as the kubelet reports it
    sim.cluster.inject("disk-full", "gpu-00002", mount="/var/lib/containerd")
    node = await core.read_node("gpu-00002")
    assert {c.type: c.status for c in node.status.conditions}["DiskPressure"] == "True"


async def test_faults_over_http_pick_seeded_shares_of_a_pool(
    sim: Sim, http: aiohttp.ClientSession
) -> None:
    body = {
        "kind": "nic-down",
        "detail": {"nic": "ib2"},
        "target": {"pool": "gpu", "share": 0.5, "seed": 3},
    }
    status, answer = await post(sim, http, "/sim/v1/faults", body)
    assert status == 200 and len(answer["nodes"]) == 2
    expected = sim.cluster.faults.choose(Target(pool="gpu", share=0.5, seed=3))
    assert answer["nodes"] == expected
    for name in answer["nodes"]:
        assert not sim.cluster.hardware_of(name).nics[3].up
    status, answer = await post(sim, http, "/sim/v1/faults", {**body, "heal": True})
    assert status == 200 and all(sim.cluster.hardware_of(n).nics[3].up for n in answer["nodes"])
    status, answer = await post(
        sim, http, "/sim/v1/faults", {"kind": "xid", "target": {"nodes": ["gpu-09999"]}}
    )
    assert (status, answer["message"]) == (404, "nodes not found: gpu-09999")
    status, answer = await post(
        sim, http, "/sim/v1/faults",
        {"kind": "xid", "detail": {"gpu": 8}, "target": {"nodes": ["gpu-00001"]}},
    )  # fmt: skip
    assert status == 400 and "no GPU 8" in answer["message"]
    assert all(g.present for g in sim.cluster.hardware_of("gpu-00001").gpus)


async def test_the_cli_finds_the_simulator_through_kubeconfig_env(
    sim: Sim, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", sim.kubeconfig)
    argv = ["fault", "xid", "gpu-00001", "gpu-00002", "--xid", "48", "--gpu", "2"]
    assert await asyncio.to_thread(main.run, argv) == 0
    assert "gpu-00001: xid\ngpu-00002: xid" in capsys.readouterr().out
    assert sim.cluster.hardware_of("gpu-00002").gpus[2].ecc_volatile_dbe == 1
    assert await asyncio.to_thread(main.run, ["heal", "xid", "label:baton.io/pool=gpu"]) == 0
    assert sim.cluster.hardware_of("gpu-00002").gpus[2].ecc_volatile_dbe == 0
    assert await asyncio.to_thread(main.run, ["fault", "gpu-lost", "gpu-09999"]) == 1
    assert "404 nodes not found: gpu-09999" in capsys.readouterr().err


async def test_a_fault_trace_injects_then_heals_on_time(sim: Sim, tmp_path: Path) -> None:
    trace = tmp_path / "faults.csv"
    trace.write_text(
        "time_s,node,kind,detail,duration_s\n"
        "0,gpu-00001,gpu-lost,gpu=4,60\n"
        "30,random:2,node-notready,,0\n"
    )
    argv = ["fault", "--kubeconfig", sim.kubeconfig, "--trace", str(trace), "--speed", "2"]
    assert await asyncio.to_thread(main.run, argv) == 0

    async def lost() -> bool:
        return not sim.cluster.hardware_of("gpu-00001").gpus[4].present

    await until(lost, what="gpu-00001 GPU 4 lost")

    async def not_ready() -> list[str]:
        nodes, _ = sim.store.list("nodes")
        return [
            n["metadata"]["name"]
            for n in nodes
            if {c["type"]: c["status"] for c in n["status"]["conditions"]}["Ready"] == "False"
        ]

    assert len(await until(not_ready, what="two nodes NotReady")) == 2

    async def healed() -> bool:
        return sim.cluster.hardware_of("gpu-00001").gpus[4].present

    await until(healed, what="gpu-00001 GPU 4 back after 60/2 simulated seconds")
    rows = fault_trace.parse(trace.read_text().splitlines())
    assert rows[0].duration_s == 60


async def test_preflight_pods_pass_on_healthy_nodes_and_name_the_problem_otherwise(
    sim: Sim, api: client.ApiClient
) -> None:
    core = client.CoreV1Api(api)
    sim.cluster.inject("gpu-lost", "gpu-00002", gpu=3)
    sim.cluster.inject("disk-readonly", "gpu-00002", mount="/raid")
    sim.cluster.inject("nic-down", "gpu-00003", nic="ib5")
    for name, node in (("pf-1", "gpu-00001"), ("pf-2", "gpu-00002"), ("pf-3", "gpu-00003")):
        await core.create_namespaced_pod(
            "default", gpu_pod(name, 0, **{"baton.io/preflight": "true"})
        )
        await bind(core, name, node)
    assert (await phase(core, "pf-1", "Succeeded")).status.phase == "Succeeded"
    failed = await phase(core, "pf-2", "Failed")
    assert failed.status.message == (
        "preflight failed: 7 of 8 GPUs present; "
        "GPU 3 (0000:5d:00.0): not present (fallen off the bus); disk /raid read-only"
    )
    terminated = failed.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.message) == (1, failed.status.message)
    assert (await phase(core, "pf-3", "Failed")).status.message == "preflight failed: NIC ib5 down"


async def test_the_cli_says_when_no_simulator_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = tmp_path / "kubeconfig"
    write_kubeconfig(dead, "http://127.0.0.1:1")  # nothing listens on port 1
    argv = ["fault", "xid", "gpu-00001", "--kubeconfig", str(dead)]
    assert await asyncio.to_thread(main.run, argv) == 1
    assert "cannot reach http://127.0.0.1:1" in capsys.readouterr().err
