"""The actuator's priority classes under a real rate limit: a real nats-server, simcluster
over HTTP, and an actuator allowed 5 writes a second. A health action published after a
backlog of balloon actions must jump the queue. The assertions are about order only."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from kubernetes_asyncio.client import CoreV1Api

from baton.libs.bus import Bus
from baton.proto import subjects
from baton.proto.actions import (
    ActionResult,
    Annotate,
    AnyAction,
    BindGang,
    Binding,
    GroupStatus,
    MarkNode,
    SetGroupStatus,
    SetLabels,
    SetTaint,
)
from baton.proto.k8s import Taint
from baton.services.actuator import core
from baton.services.actuator import main as actuator_main
from baton.services.actuator.calling import Api
from tests.pipeline import stop
from tests.support.actions import Producers
from tests.support.nats import running_nats
from tests.support.sim import running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(90)]

C = "c1"
NODES = [f"gpu-{i}" for i in range(4)]
BALLOONS = 20


def balloon(i: int) -> SetLabels:
    node = NODES[i % len(NODES)]
    labels: dict[str, str | None] = {f"baton.io/balloon-{i}": "on"}
    return SetLabels(id=f"b{i}", by="admission", at=0.0, node=node, labels=labels,
                     priority="balloon")  # fmt: skip


def health() -> SetTaint:
    taint = Taint(key="baton.io/unhealthy", effect="NoSchedule", value="xid-79")
    return SetTaint(id="h1", by="admission", at=0.0, node=NODES[0], taint=taint, priority="health")


async def collect(sub: Any, into: list[ActionResult]) -> None:
    async for msg in sub:
        into.append(msg.event)
        await msg.ack()


async def wait_for(results: list[ActionResult], count: int, *, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while len({r.action_id for r in results}) < count:
        if time.monotonic() > deadline:
            done = sorted({r.action_id for r in results})
            raise AssertionError(f"only {len(done)} of {count} results: {done}")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def running_actuator(url: str, api: Api, limits: core.Limits) -> AsyncIterator[None]:
    bus = await Bus.connect(url, cluster=C, name="actuator")
    runner = actuator_main.runner(bus, actuator_main.Settings(cluster=C), api=api, limits=limits)
    task = asyncio.create_task(runner.run())
    try:
        yield
    finally:
        await stop(task, within=15.0, what="actuator")
        await bus.close()


async def answered(backlog: list[AnyAction], limits: core.Limits, *, within: float = 60.0,
                   last: AnyAction | None = None) -> tuple[list[ActionResult], Any]:  # fmt: skip
    """Publish ``backlog``, then ``last`` (the health taint), all into ACTIONS before an
    actuator with ``limits`` starts; every result, and ``NODES[0]`` as the API has it after."""
    async with running_nats() as url, running_sim() as sim:
        bus = await Bus.connect(url, cluster=C, name="test")
        await bus.ensure_streams()
        client = await sim.api_client()
        results: list[ActionResult] = []
        sub = bus.consume(subjects.wildcard(C, subjects.RESULT, ">"), type_=ActionResult)
        reader = asyncio.create_task(collect(sub, results))
        try:
            for name in NODES:
                await CoreV1Api(client).create_node({"metadata": {"name": name}})
            producers = Producers(bus)
            for action in [*backlog, last or health()]:
                await producers.publish(action)
            async with running_actuator(url, Api(client, tries=2, base=0.01), limits):
                await wait_for(results, len(backlog) + 1, within=within)
            node = await CoreV1Api(client).read_node(NODES[0])
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            await sub.close()
            await client.close()
            await bus.close()
    return results, node


async def test_health_action_overtakes_queued_balloon_actions() -> None:
    # The backlog first, the health action last: all wait in ACTIONS.
    limits = core.Limits(qps=5, burst=2, backoff_base=0.05)
    results, node = await answered([balloon(i) for i in range(BALLOONS)], limits)

    assert {r.outcome for r in results} == {"applied"}, [r.error for r in results if r.error]
    assert any(t.key == "baton.io/unhealthy" for t in node.spec.taints or [])
    order = [r.action_id for r in sorted(results, key=lambda r: r.at)]
    before = order[: order.index("h1")]
    # Without priorities it would come last, behind all the balloons queued before it.
    assert len(before) < BALLOONS // 4, f"health applied after {before}"


STATUSES = 1_500  # more than one consumer's window of unacked deliveries (1,024)


def status(i: int) -> SetGroupStatus:
    """A status write for a PodGroup that does not exist: answered without a retry, at
    the cost of one API call, like the recounts of thousands of waiting gangs."""
    pending = GroupStatus(phase="Pending")
    return SetGroupStatus(id=f"s{i}", by="reporter", at=0.0, priority="status",
                          namespace="team-a", name=f"job-{i}", status=pending)  # fmt: skip


async def test_a_health_action_is_not_held_behind_a_backlog_of_status_writes() -> None:
    """1,500 status writes, then one taint, all in ACTIONS before the actuator starts.
    Read from one consumer in stream order, the taint could not even be delivered before
    ~500 status writes were answered (the window of unacked deliveries is full of them);
    status kinds have a consumer of their own, so it goes among the first few."""
    limits = core.Limits(qps=300, burst=10, backoff_base=0.05)
    results, _ = await answered([status(i) for i in range(STATUSES)], limits, within=120.0)

    taint = next(r for r in results if r.action_id == "h1")
    assert taint.outcome == "applied", taint.error
    order = [r.action_id for r in sorted(results, key=lambda r: r.at)]
    before = order.index("h1")
    assert before < 200, f"the taint was answered after {before} status writes"


def validation(i: int) -> SetLabels:
    """A node write of preflight's class, like the ~20,000 a new 7,500-node cluster asks."""
    return msgspec.structs.replace(balloon(i), id=f"v{i}", priority="validation")


def bind() -> BindGang:
    """A gang's bind (of a pod that is not there: answered "failed" at once)."""
    member = Binding(namespace="team-a", pod="job-0", node=NODES[1])
    return BindGang(id="g1", by="gang", at=0.0, gang="team-a/job-0", bindings=(member,))


async def test_a_bind_is_not_held_behind_a_backlog_of_preflight_writes() -> None:
    """1,500 node writes of the validation class, then one bind. Read from one consumer in
    stream order, the bind waited for ~500 of them, and among those it held, the core took
    preflight's (then "health") class first; binds have a consumer of their own and rank
    above validation, so it goes among the first few."""
    limits = core.Limits(qps=300, burst=10, backoff_base=0.05)
    backlog: list[AnyAction] = [validation(i) for i in range(STATUSES)]
    results, _ = await answered(backlog, limits, within=120.0, last=bind())

    order = [r.action_id for r in sorted(results, key=lambda r: r.at)]
    before = order.index("g1")
    assert before < 200, f"the bind was answered after {before} preflight writes"


def mark(i: int) -> Annotate:
    """Admission's mark on a gang it admitted (a PodGroup that is not there: answered at
    the cost of one call), like the thousands of a new 7,500-node cluster's first minutes."""
    admitted: dict[str, str | None] = {"baton.io/admitted": "true"}
    return Annotate(id=f"m{i}", by="admission", at=0.0, priority="admission", kind="PodGroup",
                    namespace="team-a", name=f"job-{i}", annotations=admitted)  # fmt: skip


def preflight() -> MarkNode:
    """Health's mark on a node that passed its checks: validation class."""
    return MarkNode(id="p1", by="health", at=0.0, priority="validation", node=NODES[0],
                    labels={"baton.io/validated": "now"})  # fmt: skip


async def test_preflight_work_is_not_held_behind_a_backlog_of_admission_marks() -> None:
    """1,500 admission marks, then one validation write. Read from one consumer in stream
    order, the validation write waited for ~500 marks to be answered before the core saw
    it, however far ahead of them its assured share put it; marks have a consumer of
    their own, so it goes among the first few."""
    limits = core.Limits(qps=300, burst=10, backoff_base=0.05)
    backlog: list[AnyAction] = [mark(i) for i in range(STATUSES)]
    results, node = await answered(backlog, limits, within=120.0, last=preflight())

    marked = next(r for r in results if r.action_id == "p1")
    assert marked.outcome == "applied", marked.error
    assert node.metadata.labels.get("baton.io/validated") == "now"
    order = [r.action_id for r in sorted(results, key=lambda r: r.at)]
    before = order.index("p1")
    assert before < 200, f"the preflight write was answered after {before} admission marks"
