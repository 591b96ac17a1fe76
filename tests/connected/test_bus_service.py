"""run_core against a real nats-server: decide, publish, ack; bugs dead-letter; graceful stop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from libs.bus import Bus
from libs.service import CoreStatus, Input, run_core
from libs.testing.nats import running_nats
from proto import subjects
from proto.actions import AnyAction, Cordon
from proto.deadletter import DeadLetter
from proto.k8s import K8sEvent, Pod, PodEvent

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]

CLUSTER = "c1"
PODS = subjects.wildcard(CLUSTER, subjects.K8S, "pod", ">")
ACTIONS = subjects.wildcard(CLUSTER, subjects.ACTION, ">")

State = dict[str, str]  # pod name -> node


def step(state: State, event: Any, now: float) -> tuple[State, tuple[Cordon, ...]]:
    """A toy core: remember each pod's node; a pod named 'bad-*' means cordon its node."""
    pod = event.pod
    if pod.name.startswith("boom"):
        raise ZeroDivisionError("the toy core's bug")
    new = {**state, pod.name: pod.node_name}
    if pod.name.startswith("bad"):
        return new, (Cordon(id=f"cordon-{pod.node_name}", by="toy", at=now, node=pod.node_name),)
    return new, ()


def route(output: Cordon) -> tuple[str, str]:
    return subjects.subject(CLUSTER, subjects.ACTION, "cordon", output.node), output.id


def pod_event(name: str, node: str = "gpu-1") -> tuple[str, PodEvent]:
    pod = Pod(namespace="team-a", name=name, uid=f"uid-{name}", node_name=node)
    return subjects.subject(CLUSTER, subjects.K8S, "pod", "team-a", name), PodEvent(
        op="upsert", at=500.0, pod=pod
    )


@pytest.fixture
async def bus() -> AsyncIterator[Bus]:
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster=CLUSTER, name="toy")
        await bus.ensure_streams()
        yield bus
        await bus.close()


async def eventually(check: Callable[[], Awaitable[bool] | bool], within: float = 15.0) -> None:
    async with asyncio.timeout(within):
        while True:
            result = check()
            if await result if isinstance(result, Awaitable) else result:
                return
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def running_core(
    bus: Bus, status: CoreStatus[State], *, max_deliver: int = 5
) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(
        run_core(
            bus,
            name="toy",
            core_step=step,
            state={},
            inputs=[Input(PODS, K8sEvent, "last_per_subject", max_deliver=max_deliver)],
            route=route,
            status=status,
        )
    )
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_bootstraps_then_decides_and_publishes_once(bus: Bus) -> None:
    await bus.publish(*pod_event("w-0", "gpu-0"))
    status: CoreStatus[State] = CoreStatus({})
    async with running_core(bus, status):
        await eventually(lambda: status.caught_up)
        assert status.state == {"w-0": "gpu-0"}
        await bus.publish(*pod_event("bad-1", "gpu-7"))
        await bus.publish(*pod_event("bad-2", "gpu-7"))  # same decision id: stored once
        await eventually(lambda: status.handled == 3)
    actions = await bus.snapshot(ACTIONS, AnyAction)
    assert [(a.id, a.node, a.at) for a in actions] == [("cordon-gpu-7", "gpu-7", 500.0)]
    info = await bus.js.stream_info(subjects.stream_name(CLUSTER, "actions"))
    assert info.state.messages == 1


async def test_a_core_that_raises_dead_letters_and_goes_on(bus: Bus) -> None:
    await bus.publish(*pod_event("boom-1"))
    await bus.publish(*pod_event("w-1"))
    status: CoreStatus[State] = CoreStatus({})
    dead = subjects.wildcard(CLUSTER, subjects.DEADLETTER, ">")

    async def dead_lettered() -> bool:
        return bool(await bus.snapshot(dead, DeadLetter))

    async with running_core(bus, status, max_deliver=2):
        await eventually(lambda: status.state.get("w-1") == "gpu-1")
        await eventually(dead_lettered)  # delivered twice, 1 s apart
    [letter] = await bus.snapshot(dead, DeadLetter)
    assert letter.error_class == "bug"
    assert "ZeroDivisionError: the toy core's bug" in letter.reason
    assert "boom-1" not in status.state


async def test_cancel_finishes_and_closes_consumers(bus: Bus) -> None:
    status: CoreStatus[State] = CoreStatus({})
    async with running_core(bus, status) as task:
        await bus.publish(*pod_event("w-2"))
        await eventually(lambda: status.handled == 1)
    assert task.cancelled()
    stream = subjects.stream_name(CLUSTER, "k8s")
    consumers = await bus.js.consumers_info(stream)
    assert consumers == []  # the ephemeral consumer was deleted on the way out
