"""Watching simcluster over HTTP: resume, bookmarks, 410 and relist, selectors, metrics."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.support.sim import Sim, running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]
SPEC = {"containers": [{"name": "main", "image": "train:1"}]}


@pytest.fixture
async def sim() -> AsyncIterator[Sim]:
    async with running_sim(history=50, bookmark_seconds=0.2) as s:
        yield s


@pytest.fixture
async def core(sim: Sim) -> AsyncIterator[client.CoreV1Api]:
    api_client = await sim.api_client()
    try:
        yield client.CoreV1Api(api_client)
    finally:
        await api_client.close()


def make_pod(sim: Sim, name: str, **labels: str) -> dict[str, Any]:
    return sim.store.create(
        "pods", {"metadata": {"name": name, "namespace": "default", "labels": labels}, "spec": SPEC}
    )


async def collect(stream: watch.Watch, func: Any, count: int, **kw: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async with stream:
        async for event in stream.stream(func, timeout_seconds=10, **kw):
            events.append(event)
            if len(events) == count:
                break
    return events


async def test_watch_resumes_from_a_resource_version(sim: Sim, core: client.CoreV1Api) -> None:
    make_pod(sim, "a")
    listed = await core.list_namespaced_pod("default")
    make_pod(sim, "b")
    sim.store.mutate("pods", "default", "a", lambda p: p["metadata"].update(labels={"x": "1"}))
    sim.store.delete("pods", "default", "b")
    events = await collect(
        watch.Watch(),
        core.list_namespaced_pod,
        3,
        namespace="default",
        resource_version=listed.metadata.resource_version,
    )
    seen = [(e["type"], e["object"].metadata.name) for e in events]
    assert seen == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    rvs = [int(e["object"].metadata.resource_version) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(listed.metadata.resource_version)


async def test_watch_without_resource_version_starts_with_current_objects(
    sim: Sim, core: client.CoreV1Api
) -> None:
    make_pod(sim, "a")
    make_pod(sim, "b")

    async def later() -> None:
        await asyncio.sleep(0)
        make_pod(sim, "c")

    task = asyncio.create_task(later())
    events = await collect(watch.Watch(), core.list_namespaced_pod, 3, namespace="default")
    await task
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("ADDED", "c"),
    ]


async def test_bookmarks_carry_the_current_resource_version(
    sim: Sim, core: client.CoreV1Api
) -> None:
    make_pod(sim, "a")
    sim.store.create("nodes", {"metadata": {"name": "n"}})  # moves the RV, not a pod
    events = await collect(
        watch.Watch(),
        core.list_namespaced_pod,
        2,
        namespace="default",
        resource_version="1",
        allow_watch_bookmarks=True,
    )
    assert events[0]["type"] == "ADDED"
    assert events[1]["type"] == "BOOKMARK"
    assert events[1]["raw_object"]["metadata"]["resourceVersion"] == str(sim.store.rv)


async def test_too_old_resource_version_is_410_then_relist_works(
    sim: Sim, core: client.CoreV1Api
) -> None:
    make_pod(sim, "a")
    old = (await core.list_namespaced_pod("default")).metadata.resource_version
    for i in range(60):  # more changes than the ring of 50 keeps
        sim.store.create("nodes", {"metadata": {"name": f"n{i}"}})
    with pytest.raises(ApiException) as err:
        await collect(
            watch.Watch(), core.list_namespaced_pod, 1, namespace="default", resource_version=old
        )
    assert err.value.status == 410 and "Expired" in err.value.reason
    relisted = await core.list_namespaced_pod("default")
    make_pod(sim, "b")
    events = await collect(
        watch.Watch(),
        core.list_namespaced_pod,
        1,
        namespace="default",
        resource_version=relisted.metadata.resource_version,
    )
    assert events[0]["object"].metadata.name == "b"


async def test_selector_watch_sees_objects_enter_and_leave(
    sim: Sim, core: client.CoreV1Api
) -> None:
    start = sim.store.rv
    make_pod(sim, "a", team="x")
    make_pod(sim, "b", team="y")
    sim.store.mutate("pods", "default", "b", lambda p: p["metadata"]["labels"].update(team="x"))
    sim.store.mutate("pods", "default", "a", lambda p: p["metadata"]["labels"].update(team="z"))
    sim.store.mutate("pods", "default", "b", lambda p: p["spec"].update(nodeName="n1"))
    events = await collect(
        watch.Watch(),
        core.list_namespaced_pod,
        4,
        namespace="default",
        resource_version=str(start),
        label_selector="team=x",
    )
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("DELETED", "a"),
        ("MODIFIED", "b"),
    ]
    bound = await collect(
        watch.Watch(),
        core.list_pod_for_all_namespaces,
        1,
        resource_version=str(start),
        field_selector="spec.nodeName=n1",
    )
    assert [(e["type"], e["object"].metadata.name) for e in bound] == [("ADDED", "b")]


async def test_slow_watcher_is_closed_not_buffered_forever() -> None:
    async with running_sim(watch_queue=5) as sim:
        watcher = sim.store.watch(
            "pods", namespace=None, predicate=None, since=sim.store.rv, capacity=5
        )
        for i in range(10):
            make_pod(sim, f"p{i}")
        assert watcher.closed and watcher.overflowed and len(watcher.lines) == 5
        sim.store.unwatch(watcher)


async def test_metrics_count_requests_and_open_watches(sim: Sim, core: client.CoreV1Api) -> None:
    await core.list_namespaced_pod("default")
    await core.list_namespaced_pod("default")
    with pytest.raises(ApiException):
        await core.read_namespaced_pod("missing", "default")
    lists = sim.metric(
        "apiserver_request_total", verb="LIST", resource="pods", subresource="", code="200"
    )
    assert lists == 2
    assert (
        sim.metric(
            "apiserver_request_total", verb="GET", resource="pods", subresource="", code="404"
        )
        == 1
    )
    stream = watch.Watch()
    opened = asyncio.Event()

    async def follow() -> None:
        async with stream:
            async for _ in stream.stream(
                core.list_namespaced_pod,
                namespace="default",
                timeout_seconds=30,
                allow_watch_bookmarks=True,
            ):
                opened.set()

    task = asyncio.create_task(follow())
    await asyncio.wait_for(opened.wait(), 10)  # the first bookmark: the watch is open
    assert sim.metric("apiserver_longrunning_requests", verb="WATCH", resource="pods") == 1
    stream.stop()
    make_pod(sim, "wake")  # lets the stream see stop()
    await asyncio.wait_for(task, 10)
    deadline = asyncio.get_running_loop().time() + 10
    while sim.metric("apiserver_longrunning_requests", verb="WATCH", resource="pods") != 0:
        assert asyncio.get_running_loop().time() < deadline, "watch gauge never went down"
        await asyncio.sleep(0.05)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
async def test_kubectl_get_patch_delete(sim: Sim) -> None:
    make_pod(sim, "train-0", team="x")
    sim.store.create("nodes", {"metadata": {"name": "gpu-1"}})

    async def kubectl(*args: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            "kubectl",
            f"--kubeconfig={sim.kubeconfig}",
            *args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        return out.decode()

    assert "train-0" in await kubectl("get", "pods", "-l", "team=x")
    assert "gpu-1" in await kubectl("get", "nodes")
    assert "train-0" in await kubectl("describe", "pod", "train-0")
    await kubectl("patch", "node", "gpu-1", "-p", '{"spec":{"unschedulable":true}}')
    assert sim.store.get("nodes", None, "gpu-1")["spec"]["unschedulable"] is True
    await kubectl("delete", "pod", "train-0")
    assert sim.store.list("pods")[0] == []


async def test_a_client_that_goes_away_releases_its_watch(sim: Sim) -> None:
    async with aiohttp.ClientSession() as session:
        resp = await session.get(f"{sim.url}/api/v1/pods?watch=1&resourceVersion={sim.store.rv}")
        deadline = asyncio.get_running_loop().time() + 10
        while sim.metric("apiserver_longrunning_requests", verb="WATCH", resource="pods") != 1:
            assert asyncio.get_running_loop().time() < deadline, "watch never opened"
            await asyncio.sleep(0.05)
        resp.close()  # no event is ever written to notice the reset
    deadline = asyncio.get_running_loop().time() + 10
    while sim.metric("apiserver_longrunning_requests", verb="WATCH", resource="pods") != 0:
        assert asyncio.get_running_loop().time() < deadline, "an abandoned watch stayed open"
        await asyncio.sleep(0.05)
    assert sim.store.watchers() == []
