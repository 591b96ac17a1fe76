"""SIGTERM in the middle of work: each service, as its own process (``baton <service>``),
exits within its stop grace, and nothing is lost: started again, it finishes the work.

- bridge: stopped in the middle of its first list of 20,000 pods; the next run
  publishes every object, each once.
- gang: stopped while it bootstraps 20,000 pods; the next run places the waiting gang.
- actuator: stopped with 600 label actions queued; the next run answers every one and
  every node carries its labels.
- admission: stopped while it bootstraps 20,000 pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from baton.libs.bus import Bus, Outgoing
from baton.proto import subjects
from baton.proto.actions import ActionResult, AnyAction, SetLabels, action_subject
from baton.proto.k8s import NodeEvent, PodEvent, PodGroupEvent
from baton.services.cli.processes import Child, baton
from tests.pipeline import every, until
from tests.support.actions import take_lease
from tests.support.builders import gang, node, pod
from tests.support.nats import running_nats
from tests.support.sim import Sim, running_sim

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(360)]

C = "c1"
GRACE = 5.0
PODS = 20_000
LIST_PODS = 60_000  # the bridge lists and publishes ~50k objects/s here: stop it mid-way


@contextlib.asynccontextmanager
async def bus_for(url: str) -> AsyncIterator[Bus]:
    bus = await Bus.connect(url, cluster=C, name="test")
    await bus.ensure_streams()
    try:
        yield bus
    finally:
        await bus.close()


def child(name: str, url: str, sim: Sim | None, tmp: Path, run: int) -> Child:
    env = {"BATON_NATS_URL": url, "BATON_CLUSTER": C, "BATON_OPS_PORT": "0",
           "BATON_STOP_GRACE_S": str(GRACE)}  # fmt: skip
    if sim is not None:
        env["KUBECONFIG"] = sim.kubeconfig
    return Child(name, baton(name), tmp / f"{name}-{run}.log", env=env)


async def sigterm(proc: Child, *, what: str) -> float:
    """SIGTERM, then the seconds until the process exited (it must, within the grace)."""
    assert proc.process is not None and proc.alive, f"{proc.name} died early:\n{proc.tail()}"
    deadline = time.monotonic() + 30
    while "nats connected" not in proc.log.read_text(errors="replace"):  # handlers are in place
        assert time.monotonic() < deadline, f"{proc.name} never connected:\n{proc.tail()}"
        await asyncio.sleep(0.02)
    began = time.monotonic()
    proc.process.terminate()
    deadline = began + GRACE + 10  # the grace, plus interpreter start-up and teardown
    while proc.alive:
        if time.monotonic() > deadline:
            proc.stop(grace=0.1)
            raise AssertionError(f"{proc.name} still running {deadline - began:.0f}s after "
                                 f"SIGTERM ({what}):\n{proc.tail(30)}")  # fmt: skip
        await asyncio.sleep(0.05)
    assert proc.exit_code() == 0, f"{proc.name} exited {proc.exit_code()}:\n{proc.tail(30)}"
    return time.monotonic() - began


def alive(proc: Child) -> Callable[[], None]:
    """A guard for ``until``: fail at once, with its last lines, when ``proc`` exited."""

    def guard() -> None:
        if not proc.alive:
            raise AssertionError(f"{proc.name} exited:\n{proc.tail(30)}")

    return guard


def add_pods(sim: Sim, count: int) -> None:
    sim.store.create("namespaces", {"metadata": {"name": "load"}})
    for i in range(count):
        sim.store.create(
            "pods",
            {"metadata": {"name": f"p-{i}", "namespace": "load"},
             "spec": {"containers": [{"name": "c", "image": "x"}]}},
        )  # fmt: skip


async def k8s_subjects(bus: Bus) -> int:
    info = await bus.js.stream_info(subjects.stream_name(C, "k8s"))
    return int(info.state.messages)  # K8S keeps one message per object


async def test_bridge_stopped_mid_list_exits_in_its_grace_and_loses_nothing(
    tmp_path: Path,
) -> None:
    async with running_nats() as url, running_sim(nodes=16) as sim, bus_for(url) as bus:
        add_pods(sim, LIST_PODS)
        pools = len(sim.store.list("machinedeployments", namespace=None)[0])
        objects = len(sim.store.list("pods", namespace=None)[0]) + 16 + pools  # + nodes, pools
        first = child("bridge", url, sim, tmp_path, 1)
        # small pages: the list takes seconds, so the stop lands in it even when this test
        # is slow to send it (a loaded machine)
        first.env["BATON_BRIDGE_PAGE_SIZE"] = "50"
        first.start()
        try:
            await until(
                lambda: _more_than(bus, 200),
                what="the first list publishing",
                within=90,
                guard=alive(first),
            )
            assert await k8s_subjects(bus) < objects, "the list ended before the stop"
            await sigterm(first, what="in the middle of the first list")
        finally:
            first.stop()
        assert await k8s_subjects(bus) < objects, "the stop did not stop the list"
        second = child("bridge", url, sim, tmp_path, 2)
        second.start()
        try:
            await until(
                lambda: _all_held(bus, objects),
                what=f"{objects} objects",
                within=90,
                guard=alive(second),
            )
        finally:
            await sigterm(second, what="idle")
        assert await k8s_subjects(bus) == objects  # every object, none twice


async def _more_than(bus: Bus, count: int) -> bool:
    return await k8s_subjects(bus) > count


async def _all_held(bus: Bus, count: int) -> bool:
    return await k8s_subjects(bus) >= count


async def publish_cluster(bus: Bus, *, pods: int) -> None:
    """8 nodes, a 4-member gang, and ``pods`` unrelated pods, straight onto K8S."""
    items: list[Outgoing] = []
    for i in range(8):
        n = node(f"gpu-{i}", gpus=8).in_rack("r0", block="b0", zone="z0").build()
        items.append(Outgoing(subjects.subject(C, "k8s", "node", n.name),
                              NodeEvent(op="upsert", at=1.0, node=n), f"n{i}"))  # fmt: skip
    group, members = gang("job", 4, gpus=8)
    items.append(Outgoing(subjects.subject(C, "k8s", "podgroup", "default", "job"),
                          PodGroupEvent(op="upsert", at=1.0, pod_group=group), "g"))  # fmt: skip
    for p in members:
        items.append(Outgoing(subjects.subject(C, "k8s", "pod", "default", p.name),
                              PodEvent(op="upsert", at=1.0, pod=p), p.uid))  # fmt: skip
    for i in range(pods):  # running pods of another scheduler: read, not placed
        p = pod(f"p-{i}", namespace="load", scheduler="default-scheduler",
                node_name=f"gpu-{i % 8}", cpu=0, memory=0)  # fmt: skip
        items.append(Outgoing(subjects.subject(C, "k8s", "pod", "load", p.name),
                              PodEvent(op="upsert", at=1.0, pod=p), p.uid))  # fmt: skip
    await bus.publish_many(items)


async def _placed(bus: Bus) -> bool:
    found = await bus.snapshot(subjects.wildcard(C, "action", "bind-gang", ">"), AnyAction)
    return any(getattr(a, "gang", "") == "default/job" for a in found)


@pytest.mark.parametrize("service", ["gang", "admission", "autoscaler", "balloon"])
async def test_a_service_stopped_while_it_bootstraps_exits_in_its_grace(
    tmp_path: Path, service: str
) -> None:
    async with running_nats() as url, bus_for(url) as bus:
        await publish_cluster(bus, pods=PODS)
        first = child(service, url, None, tmp_path, 1)
        first.start()
        try:
            await until(
                lambda: _consumer_open(bus), what="its feed open", within=90, guard=alive(first)
            )
            await sigterm(first, what="while it bootstraps")
        finally:
            first.stop()
        if service != "gang":
            return
        second = child(service, url, None, tmp_path, 2)
        second.start()
        try:
            # 20k objects to read first: on a loaded 2-core machine that alone takes a minute.
            await until(
                lambda: _placed(bus),
                what="the gang placed",
                within=200,
                guard=alive(second),
            )
        finally:
            await sigterm(second, what="idle")


async def _consumer_open(bus: Bus) -> bool:
    for what in ("k8s", "history"):
        info = await bus.js.stream_info(subjects.stream_name(C, what))
        if (info.state.consumer_count or 0) > 0:
            return True
    return False


async def test_actuator_stopped_with_a_backlog_exits_in_its_grace_and_answers_everything(
    tmp_path: Path,
) -> None:
    async with running_nats() as url, running_sim(nodes=20) as sim, bus_for(url) as bus:
        nodes = sorted(o["metadata"]["name"] for o in sim.store.list("nodes")[0])
        epoch = await take_lease(bus, "admission")  # the producer's lease: applied
        actions = [
            SetLabels(id=f"label-{i}", by="admission", at=1.0, epoch=epoch, priority="balloon",
                      node=nodes[i % len(nodes)], labels={f"test.baton.io/l{i}": "yes"})
            for i in range(600)
        ]  # fmt: skip
        await bus.publish_many([Outgoing(action_subject(C, a), a, a.id) for a in actions])
        first = child("actuator", url, sim, tmp_path, 1)
        first.env["BATON_ACTUATOR_QPS"] = "100"  # slow enough to stop it half way
        first.start()
        try:
            await until(
                lambda: _results(bus, 50), what="some results", within=90, guard=alive(first)
            )
            await sigterm(first, what="with a backlog")
        finally:
            first.stop()
        second = child("actuator", url, sim, tmp_path, 2)
        second.start()
        try:
            await until(
                lambda: _results(bus, len(actions)),
                what="every result",
                within=90,
                guard=alive(second),
            )
        finally:
            await sigterm(second, what="idle")
        results = await every(bus, subjects.wildcard(C, "result", ">"), ActionResult)
        answered = {r.action_id for r in results if r.outcome in ("applied", "already")}
        assert answered == {a.id for a in actions}
        for name in nodes:
            labels = sim.store.get("nodes", None, name)["metadata"].get("labels", {})
            wanted = {k for a in actions if a.node == name for k in a.labels}
            assert wanted <= labels.keys(), f"{name} lacks {sorted(wanted - labels.keys())[:3]}"


async def _results(bus: Bus, count: int) -> bool:
    info = await bus.js.stream_info(subjects.stream_name(C, "events"))
    return int(info.state.messages) >= count
