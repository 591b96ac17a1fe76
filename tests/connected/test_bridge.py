"""The bridge against a real nats-server and simcluster over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

from baton.libs.bus import Bus, Subscription
from baton.libs.kube import Options
from baton.libs.runner import Runner
from baton.proto import k8s, subjects
from baton.services.bridge import core
from baton.services.bridge import main as bridge_main
from tests.pipeline import stop, until
from tests.support.nats import running_nats
from tests.support.sim import Sim, running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]

CLUSTER = "c1"
K8S = subjects.wildcard(CLUSTER, subjects.K8S, ">")


@pytest.fixture
async def nats_url() -> AsyncIterator[str]:
    async with running_nats() as url:
        yield url


@contextlib.asynccontextmanager
async def running_bridge(sim: Sim, url: str) -> AsyncIterator[Runner[core.State]]:
    """A bridge on its own NATS connection, ready (every kind listed and published)."""
    bus = await Bus.connect(url, cluster=CLUSTER, name="bridge")
    await bus.ensure_streams()
    api = await sim.api_client()
    settings = bridge_main.Settings(cluster=CLUSTER)
    bridge = bridge_main.runner(bus, api, settings, options=Options(backoff_initial_s=0.05))
    task = asyncio.create_task(bridge.run())
    try:
        await until(lambda: bridge.ready or task.done(), what="bridge ready", within=30)
        if task.done():
            task.result()
        yield bridge
    finally:
        await stop(task, within=15.0, what="bridge")
        await bus.close()
        await api.close()


async def collect(
    sub: Subscription[Any],
    done: Callable[[dict[str, k8s.K8sEvent]], bool],
    *,
    within: float = 20.0,
) -> dict[str, k8s.K8sEvent]:
    """Latest event per subject from ``sub`` until ``done(latest)``."""
    latest: dict[str, k8s.K8sEvent] = {}

    async def read() -> None:
        async for msg in sub:
            latest[msg.subject] = msg.event
            await msg.ack()
            if done(latest):
                return

    await asyncio.wait_for(read(), within)
    return latest


def pod(name: str, ns: str = "team-a", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "schedulerName": "baton",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
    }


def populate(sim: Sim, *, pods: int) -> None:
    store = sim.store
    store.create("namespaces", {"metadata": {"name": "team-a"}})
    for i in range(3):
        store.create(
            "nodes",
            {
                "metadata": {"name": f"gpu-{i}.rack-1", "labels": {"rack": "r1"}},
                "status": {
                    "allocatable": {"nvidia.com/gpu": "8"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
        )
    for i in range(pods):
        store.create("pods", pod(f"w-{i}"))
    store.create(
        "podgroups", {"metadata": {"name": "job7", "namespace": "team-a"}, "spec": {"minMember": 4}}
    )
    store.create(
        "endpointslices",
        {
            "metadata": {
                "name": "svc-1",
                "namespace": "team-a",
                "labels": {"kubernetes.io/service-name": "svc"},
            },
            "endpoints": [{"addresses": ["10.0.0.1"]}],
            "ports": [{"port": 80}],
        },
    )


def counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def pod_subject(name: str) -> str:
    return subjects.subject(CLUSTER, subjects.K8S, "pod", "team-a", name)


async def test_a_late_consumer_gets_current_state_then_live_changes(nats_url: str) -> None:
    async with running_sim() as sim:
        populate(sim, pods=10)
        sim.store.delete("pods", "team-a", "w-9", grace_seconds=0)  # before the bridge: never seen
        async with running_bridge(sim, nats_url):
            sim.store.mutate(
                "pods", "team-a", "w-0", lambda p: p["metadata"]["labels"].update(v="2")
            )
            sim.store.delete("pods", "team-a", "w-1", grace_seconds=0)
            bus = await Bus.connect(nats_url, cluster=CLUSTER, name="late")
            async with bus.consume(K8S, type_=k8s.K8sEvent, deliver="last_per_subject") as sub:
                # 3 nodes + 9 pods (one a tombstone) + podgroup + endpointslice
                state = await collect(
                    sub,
                    lambda s: len(s) == 14 and s[pod_subject("w-0")].pod.labels.get("v") == "2",  # type: ignore[union-attr]
                )
                assert pod_subject("w-9") not in state
                assert state[pod_subject("w-1")].op == "delete"
                node = state[subjects.subject(CLUSTER, subjects.K8S, "node", "gpu-0.rack-1")]
                assert isinstance(node, k8s.NodeEvent) and node.node.allocatable == {
                    "nvidia.com/gpu": 8
                }
                assert isinstance(state["baton.c1.k8s.podgroup.team-a.job7"], k8s.PodGroupEvent)
                assert isinstance(
                    state["baton.c1.k8s.endpointslice.team-a.svc-1"], k8s.EndpointSliceEvent
                )
                live = {k: v for k, v in state.items() if v.op == "upsert"}
                assert len(live) == 13

                sim.store.create("pods", pod("late-1"))
                later = await collect(sub, lambda s: pod_subject("late-1") in s)
                assert later[pod_subject("late-1")].op == "upsert"
            await bus.close()


async def test_deletes_during_a_watch_outage_are_found_by_the_relist(nats_url: str) -> None:
    # A tiny change window and watcher queue: a burst closes the watch and its
    # resourceVersion is then too old, so the bridge gets 410 Gone and relists.
    async with running_sim(history=4, watch_queue=2) as sim:
        populate(sim, pods=12)
        async with running_bridge(sim, nats_url):
            relists = counter("baton_bridge_relists_total", kind="pod")
            for i in range(8):  # one synchronous burst: no loop turn for the watcher in between
                sim.store.delete("pods", "team-a", f"w-{i}", grace_seconds=0)
            for n in range(20):
                sim.store.mutate(
                    "pods",
                    "team-a",
                    "w-11",
                    lambda p, n=n: p["metadata"]["labels"].update(n=str(n)),
                )
            await until(
                lambda: counter("baton_bridge_relists_total", kind="pod") > relists,
                what="a pod relist",
                within=30,
            )

            bus = await Bus.connect(nats_url, cluster=CLUSTER, name="check")
            async with bus.consume(
                subjects.wildcard(CLUSTER, subjects.K8S, "pod", ">"),
                type_=k8s.K8sEvent,
                deliver="last_per_subject",
            ) as sub:

                def settled(s: dict[str, k8s.K8sEvent]) -> bool:
                    deleted = all(
                        s.get(pod_subject(f"w-{i}")) is not None
                        and s[pod_subject(f"w-{i}")].op == "delete"
                        for i in range(8)
                    )
                    last = s.get(pod_subject("w-11"))
                    return deleted and last is not None and last.pod.labels.get("n") == "19"  # type: ignore[union-attr]

                state = await collect(sub, settled)
            await bus.close()
            assert [state[pod_subject(f"w-{i}")].op for i in range(8, 11)] == ["upsert"] * 3


async def stream_last_seq(url: str) -> int:
    bus = await Bus.connect(url, cluster=CLUSTER, name="probe")
    info = await bus.js.stream_info(subjects.stream_name(CLUSTER, "k8s"))
    await bus.close()
    return int(info.state.last_seq)


async def test_a_restarted_bridge_publishes_no_duplicates(nats_url: str) -> None:
    async with running_sim() as sim:
        populate(sim, pods=20)
        async with running_bridge(sim, nats_url):
            await until_published(nats_url, 3 + 20 + 2)
        before = await stream_last_seq(nats_url)
        published = counter("baton_bridge_events_published_total", kind="pod", op="upsert")

        # While the bridge is down: one pod changes, one is deleted.
        sim.store.mutate("pods", "team-a", "w-3", lambda p: p["metadata"]["labels"].update(x="1"))
        sim.store.delete("pods", "team-a", "w-4", grace_seconds=0)

        async with running_bridge(sim, nats_url):
            await until_published(nats_url, before + 2)
            # a further change proves the restarted bridge is live and caught up
            sim.store.mutate(
                "pods", "team-a", "w-5", lambda p: p["metadata"]["labels"].update(x="1")
            )
            await until_published(nats_url, before + 3)
            assert await stream_last_seq(nats_url) == before + 3
            assert (
                counter("baton_bridge_events_published_total", kind="pod", op="upsert")
                == published + 2
            )

        bus = await Bus.connect(nats_url, cluster=CLUSTER, name="check")
        state = {core.subject_of(CLUSTER, e): e for e in await bus.snapshot(K8S, k8s.K8sEvent)}
        await bus.close()
        assert state[pod_subject("w-4")].op == "delete"
        assert state[pod_subject("w-3")].pod.labels == {"x": "1"}  # type: ignore[union-attr]


async def until_published(url: str, last_seq: int) -> None:
    deadline = time.monotonic() + 20
    while (seq := await stream_last_seq(url)) < last_seq:
        if time.monotonic() > deadline:
            raise AssertionError(f"K8S stream at seq {seq}, expected {last_seq}")
        await asyncio.sleep(0.05)


async def test_six_consumers_cost_the_api_server_one_watch_per_kind(nats_url: str) -> None:
    async with running_sim() as sim:
        populate(sim, pods=5)
        async with running_bridge(sim, nats_url):
            buses = [
                await Bus.connect(nats_url, cluster=CLUSTER, name=f"svc-{i}") for i in range(6)
            ]
            subs = [b.consume(K8S, type_=k8s.K8sEvent, deliver="last_per_subject") for b in buses]
            states = await asyncio.gather(*(collect(s, lambda st: len(st) == 10) for s in subs))
            assert all(len(s) == 10 for s in states)
            watches = {
                res: sim.metric("apiserver_longrunning_requests", verb="WATCH", resource=res)
                for res in ("nodes", "pods", "podgroups", "endpointslices")
            }
            # podgroups: scheduler-plugins', upstream's (scheduling.k8s.io) and Volcano's
            assert watches == {"nodes": 1, "pods": 1, "podgroups": 3, "endpointslices": 1}
            lists = sim.metric(
                "apiserver_request_total", verb="LIST", resource="pods", subresource="", code="200"
            )
            assert lists == 1
            for s, b in zip(subs, buses, strict=True):
                await s.close()
                await b.close()


async def test_a_kind_the_server_does_not_serve_does_not_block_readiness(nats_url: str) -> None:
    import dataclasses

    from baton.libs.kube import NODES, POD_GROUPS

    missing = dataclasses.replace(POD_GROUPS, path="/apis/scheduling.example.io/v1/podgroups")
    async with running_sim() as sim:
        populate(sim, pods=1)
        bus = await Bus.connect(nats_url, cluster=CLUSTER, name="bridge")
        await bus.ensure_streams()
        api = await sim.api_client()
        settings = bridge_main.Settings(cluster=CLUSTER)
        bridge = bridge_main.runner(bus, api, settings, kinds=(NODES, missing))
        task = asyncio.create_task(bridge.run())
        try:
            await until(lambda: bridge.ready, what="ready without the CRD", within=30)
            assert counter("baton_bridge_watch_restarts_total", kind="podgroup") >= 1
        finally:
            await stop(task, within=15.0, what="bridge")
            await bus.close()
            await api.close()


async def test_the_upstream_pod_group_kind_is_read_at_the_version_the_server_serves() -> None:
    """A server that serves only v1alpha2 (Kubernetes 1.36): after the v1beta1 path's 404
    the reflector lists and watches v1alpha2."""
    import dataclasses

    from baton.libs.kube import UPSTREAM_POD_GROUPS, Reflector

    only_alpha = dataclasses.replace(
        UPSTREAM_POD_GROUPS, path="/apis/scheduling.k8s.io/v1gamma1/podgroups"
    )
    rack = {"topology": [{"key": "baton.io/rack"}]}
    body = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 4}},
                     "schedulingConstraints": rack}}  # fmt: skip
    async with running_sim() as sim:
        sim.store.create("namespaces", {"metadata": {"name": "ml"}})
        sim.store.create("podgroups.scheduling.k8s.io", body)
        api = await sim.api_client()
        reflector = Reflector(api, only_alpha, options=Options(backoff_initial_s=0.01))
        try:
            async with asyncio.timeout(20):
                async for batch in reflector.batches():
                    if batch:
                        break
            (event,) = batch
            assert isinstance(event, k8s.PodGroupEvent)
            group = event.pod_group
            assert (group.key, group.api, group.min_member, group.topology) == (
                "ml/train", k8s.UPSTREAM_API, 4, "baton.io/rack"
            )  # fmt: skip
            assert reflector.path.endswith("/v1alpha2/podgroups")
        finally:
            await api.close()
