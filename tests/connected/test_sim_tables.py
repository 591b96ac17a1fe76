"""simcluster answers kubectl's Table requests over HTTP: list, get, paging, watch, kubectl."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from baton.proto.actions import ObjectRef, RecordEvent
from baton.services.actuator.core.eventing import EventWrite
from baton.services.actuator.reporting import event_body
from tests.support.kubectl import kubectl as run_kubectl_out
from tests.support.kubectl import needs_kubectl
from tests.support.sim import Sim, running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]
TABLE = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,"
    "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)


@pytest.fixture
async def sim() -> AsyncIterator[Sim]:
    async with running_sim(nodes=3, speed=100) as s:
        yield s


def make_pod(sim: Sim, name: str, node: str | None = None) -> None:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    sim.store.create("pods", {"metadata": {"name": name, "namespace": "default"}, "spec": spec})


async def get_json(sim: Sim, path: str, accept: str = TABLE) -> Any:
    async with (
        aiohttp.ClientSession() as session,
        session.get(sim.url + path, headers={"Accept": accept}) as resp,
    ):
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def wait_phase(sim: Sim, name: str, phase: str) -> None:
    deadline = time.monotonic() + 10
    while sim.store.get("pods", "default", name).get("status", {}).get("phase") != phase:
        assert time.monotonic() < deadline, f"{name} never {phase}"
        await asyncio.sleep(0.02)


async def test_pod_list_as_table(sim: Sim) -> None:
    make_pod(sim, "a", node="gpu-00001")
    make_pod(sim, "b")
    await wait_phase(sim, "a", "Running")
    t = await get_json(sim, "/api/v1/namespaces/default/pods")
    assert t["kind"] == "Table" and t["apiVersion"] == "meta.k8s.io/v1"
    assert int(t["metadata"]["resourceVersion"]) == sim.store.rv
    names = [c["name"] for c in t["columnDefinitions"]]
    assert names[:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    rows = {r["cells"][0]: r for r in t["rows"]}
    assert rows["a"]["cells"][1:3] == ["1/1", "Running"]
    assert rows["a"]["cells"][names.index("Node")] == "gpu-00001"
    assert rows["b"]["cells"][2] == "Pending"
    assert rows["a"]["object"]["kind"] == "PartialObjectMetadata"
    assert rows["a"]["object"]["metadata"]["namespace"] == "default"


async def test_plain_json_is_unchanged_and_get_paging_include_object(sim: Sim) -> None:
    make_pod(sim, "a")
    make_pod(sim, "b")
    plain = await get_json(sim, "/api/v1/namespaces/default/pods", accept="application/json")
    assert plain["kind"] == "PodList"
    one = await get_json(sim, "/api/v1/namespaces/default/pods/a?includeObject=Object")
    assert [r["cells"][0] for r in one["rows"]] == ["a"]
    assert one["rows"][0]["object"]["kind"] == "Pod"
    page = await get_json(sim, "/api/v1/namespaces/default/pods?limit=1")
    assert [r["cells"][0] for r in page["rows"]] == ["a"]
    rest = await get_json(sim, f"/api/v1/pods?limit=5&continue={page['metadata']['continue']}")
    assert [r["cells"][0] for r in rest["rows"]] == ["b"]
    nodes = await get_json(sim, "/api/v1/nodes?fieldSelector=metadata.name=gpu-00002")
    assert [r["cells"][:2] for r in nodes["rows"]] == [["gpu-00002", "Ready"]]


async def test_watch_events_are_one_row_tables(sim: Sim) -> None:
    make_pod(sim, "a")
    rv = sim.store.rv
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            sim.url + f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}",
            headers={"Accept": TABLE},
        ) as resp,
    ):
        make_pod(sim, "b")
        event = json.loads(await resp.content.readline())
    assert event["type"] == "ADDED"
    assert event["object"]["kind"] == "Table"
    assert [r["cells"][0] for r in event["object"]["rows"]] == ["b"]


async def kubectl(sim: Sim, *args: str) -> str:
    return await run_kubectl_out(sim.kubeconfig, *args)


def columns(output: str) -> list[dict[str, str]]:
    """kubectl's table output as dicts keyed by header (cells are 3-space padded)."""
    head, *lines = output.strip().splitlines()
    keys = re.split(r"\s{2,}", head.strip())
    return [dict(zip(keys, re.split(r"\s{2,}", line.strip()), strict=True)) for line in lines]


@needs_kubectl
async def test_kubectl_get_pods_shows_status_and_wide_columns(sim: Sim) -> None:
    make_pod(sim, "train-0", node="gpu-00001")
    make_pod(sim, "train-1")
    await wait_phase(sim, "train-0", "Running")
    rows = {r["NAME"]: r for r in columns(await kubectl(sim, "get", "pods"))}
    assert rows["train-0"]["STATUS"] == "Running"
    assert rows["train-0"]["READY"] == "1/1"
    assert rows["train-1"]["STATUS"] == "Pending"
    assert "IP" not in rows["train-0"]
    wide = {r["NAME"]: r for r in columns(await kubectl(sim, "get", "pods", "-o", "wide"))}
    assert wide["train-0"]["NODE"] == "gpu-00001"
    assert wide["train-0"]["IP"] != "<none>"


@needs_kubectl
async def test_kubectl_get_nodes_shows_ready_and_cordoned(sim: Sim) -> None:
    sim.store.mutate("nodes", None, "gpu-00002", lambda n: n["spec"].update(unschedulable=True))
    sim.cluster.node_not_ready("gpu-00003")
    rows = {r["NAME"]: r for r in columns(await kubectl(sim, "get", "nodes"))}
    assert rows["gpu-00001"]["STATUS"] == "Ready"
    assert rows["gpu-00002"]["STATUS"] == "Ready,SchedulingDisabled"
    assert rows["gpu-00003"]["STATUS"] == "NotReady"
    md = columns(await kubectl(sim, "get", "machinedeployments", "-A"))
    # a NotReady node's machine is not a ready replica (Cluster API's Machine NodeHealthy)
    assert [(r["NAME"], r["REPLICAS"], r["READY"]) for r in md] == [("gpu", "3", "2")]


@needs_kubectl
async def test_kubectl_get_events_shows_and_sorts_baton_s_events(sim: Sim) -> None:
    api = await sim.api_client()
    try:
        for name, first, last, count in (("late", 100.0, 900.0, 3), ("early", 50.0, 60.0, 1)):
            ref = ObjectRef(kind="Pod", name=name, namespace="default", uid=name)
            action = RecordEvent(
                id=f"e-{name}", by="reporter", at=first, priority="status",
                reason="Scheduled", regarding=ref, note=f"assigned {name}",
            )  # fmt: skip
            body = event_body(action, EventWrite(name=name, count=count, first=first, last=last))
            await client.EventsV1Api(api).create_namespaced_event("default", body)
    finally:
        await api.close()
    out = await kubectl(sim, "get", "events", "--sort-by=.lastTimestamp")
    rows = columns(out)
    assert list(rows[0]) == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert [r["OBJECT"] for r in rows] == ["pod/early", "pod/late"]
    assert "(x3 over" in rows[1]["LAST SEEN"] and rows[1]["MESSAGE"] == "assigned late"
