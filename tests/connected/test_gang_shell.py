"""The gang service on the runner, on a real nats-server: bootstrap from K8S, ticks,
actions and decisions out."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from baton.libs.bus import Bus
from baton.libs.runner import Runner
from baton.proto import subjects
from baton.proto.actions import ActionResult, AnyAction, BindGang
from baton.proto.k8s import NodeEvent, PodEvent, PodGroupEvent
from baton.proto.placement import AnyPlacement, GangPlaced, GangUnschedulable
from baton.services.gang import core
from baton.services.gang.main import SPEC, Settings
from tests.pipeline import running
from tests.support.builders import gang, node
from tests.support.nats import running_nats

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]
C = "c1"


@contextlib.asynccontextmanager
async def gang_service(url: str, **settings: Any) -> AsyncIterator[Runner[core.State]]:
    async with running(SPEC, url, Settings(cycle_interval=0.05, **settings)) as runner:
        yield runner


async def publish_cluster(bus: Bus, *, nodes: int, gangs: list[tuple[str, int]]) -> None:
    for i in range(nodes):
        n = node(f"gpu-{i}", gpus=8).in_rack(f"r{i // 4}", block="b1", zone="z1").build()
        await bus.publish(
            subjects.subject(C, "k8s", "node", n.name), NodeEvent(op="upsert", at=1.0, node=n)
        )
    for name, size in gangs:
        group, members = gang(name, size, gpus=8, created_at=float(len(name)))
        await bus.publish(
            subjects.subject(C, "k8s", "podgroup", "default", name),
            PodGroupEvent(op="upsert", at=1.0, pod_group=group),
        )
        for p in members:
            await bus.publish(
                subjects.subject(C, "k8s", "pod", "default", p.name),
                PodEvent(op="upsert", at=1.0, pod=p),
            )


async def collect(
    bus: Bus, subject: str, type_: Any, want: int, *, where: Any = None, within: float = 20.0
) -> list[Any]:
    """The first ``want`` events on ``subject`` (that ``where`` accepts)."""
    got: list[Any] = []
    sub = bus.consume(subject, type_=type_, deliver="all")
    try:
        async with asyncio.timeout(within):
            async for msg in sub:
                await msg.ack()
                if where is None or where(msg.event):
                    got.append(msg.event)
                if len(got) >= want:
                    break
    finally:
        await sub.close()
    return got


async def test_bootstraps_from_the_k8s_stream_then_binds_whole_gangs_and_explains_the_rest() -> (
    None
):
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster=C, name="test")
        try:
            await bus.ensure_streams()
            # State that exists before the service starts: 8 nodes, a 4-gang and a 12-gang.
            await publish_cluster(bus, nodes=8, gangs=[("small", 4), ("huge", 12)])
            async with gang_service(url) as shell:
                actions = await collect(bus, f"baton.{C}.action.bind-gang.>", AnyAction, 1)
                decisions = await collect(bus, f"baton.{C}.placement.>", AnyPlacement, 2)
                assert shell.ready
            (bind,) = actions
            assert isinstance(bind, BindGang) and bind.gang == "default/small"
            assert sorted(b.pod for b in bind.bindings) == [f"small-{i}" for i in range(4)]
            assert len({b.node.split("-")[1] for b in bind.bindings}) == 4
            by_type = {type(d): d for d in decisions}
            assert by_type[GangPlaced].action_id == bind.id
            assert by_type[GangPlaced].level == "baton.io/rack"
            assert by_type[GangUnschedulable].gang == "default/huge"
            # huge is older, so it was judged first, against all 8 free nodes.
            assert by_type[GangUnschedulable].need.nodes == 4
        finally:
            await bus.close()


async def test_a_rolled_back_bind_is_retried_with_a_new_action_id() -> None:
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster=C, name="test")
        try:
            await bus.ensure_streams()
            await publish_cluster(bus, nodes=4, gangs=[("job", 4)])
            async with gang_service(url, backoff_s=0.2):
                (first,) = await collect(bus, f"baton.{C}.action.bind-gang.>", AnyAction, 1)
                result = ActionResult(
                    action_id=first.id, action_type="action.bind-gang.v1", by="actuator", at=5.0,
                    outcome="rolled-back", error="node gone",
                )  # fmt: skip
                await bus.publish(f"baton.{C}.result.bind-gang.default.job", result, msg_id="r1")
                (second,) = await collect(
                    bus,
                    f"baton.{C}.action.bind-gang.>",
                    AnyAction,
                    1,
                    where=lambda a: a.id != first.id,
                )
            assert second.id != first.id
            assert second.gang == "default/job"
        finally:
            await bus.close()
