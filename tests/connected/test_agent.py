"""The agent against a real nats-server and simulated hardware served over HTTP.

simcluster's ``/sim/v1/hardware`` is served here by ``tests.fake_hardware`` (same shape)
until simcluster has it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from baton.libs.bus import Bus
from baton.proto import codec, subjects
from baton.proto import telemetry as t
from baton.services.agent import core
from baton.services.agent.core.readings import Tick
from baton.services.agent.main import Settings, once
from baton.services.agent.shell import Agent
from baton.services.agent.simulated import SimHardware
from tests.fake_hardware import XID_79, FakeHardware, node_document, serving_hardware
from tests.pipeline import until
from tests.support.nats import running_nats

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]

CLUSTER = "c1"
A, B = "gpu-00001", "gpu-00002"


@dataclass
class Seen:
    """Telemetry as it arrives on the bus: (subject, event) in order."""

    messages: list[tuple[str, t.AnyTelemetry]] = field(default_factory=list)

    def of(self, kind: type[Any], node: str) -> list[Any]:
        subject = t.subject(CLUSTER, t.KIND_OF[kind], node)
        return [e for s, e in self.messages if s == subject and isinstance(e, kind)]


@contextlib.asynccontextmanager
async def running_agent(
    hardware: FakeHardware, *, nodes: list[str] | None
) -> AsyncIterator[tuple[Agent, Seen, Bus]]:
    """An agent (one node, or ``--fleet`` when ``nodes`` is None) on a fresh NATS."""
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster=CLUSTER, name="agent-test")
        await bus.ensure_streams()  # other services declare them; the agent never does
        seen = Seen()

        async def collect(msg: Any) -> None:
            seen.messages.append((msg.subject, codec.decode(msg.data, t.AnyTelemetry)))

        sub = await bus.nc.subscribe(
            subjects.wildcard(CLUSTER, subjects.TELEMETRY, ">"), cb=collect
        )
        config = core.Config(node="", version="test", backends=("sim",), heartbeat_s=0.1)
        agent = Agent(config=config, cluster=CLUSTER, nodes=nodes or (), tick_s=0.02)
        sim = SimHardware(hardware.url, nodes=nodes, clock=time.time)
        task = asyncio.create_task(agent.run(bus, [sim.run]))
        try:
            yield agent, seen, bus
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await sub.unsubscribe()
            await bus.close()


async def test_a_fault_lands_on_the_nodes_own_subjects() -> None:
    async with serving_hardware() as hw:
        hw.put(node_document(A))
        hw.put(node_document(B))
        async with running_agent(hw, nodes=[A]) as (_, seen, _bus):
            await until(lambda: seen.of(t.GpuReport, A), within=10, what="A's first GPU report")
            faulty = node_document(A, seq=11)
            faulty["gpus"][1]["present"] = False
            faulty["gpus"][0]["recovery_action"] = "reboot"
            faulty["kernel_log"].append({"seq": 11, "line": XID_79})
            hw.put(faulty)
            await until(lambda: seen.of(t.XidEvent, A), within=10, what="the Xid 79 event")
            await until(lambda: len(seen.of(t.GpuReport, A)) >= 2, within=10, what="GPU report")

        (xid,) = seen.of(t.XidEvent, A)
        assert (xid.xid, xid.gpu, xid.bus_id, xid.source, xid.seq, xid.pid) == (
            79, 1, "0000:3b:00", "kmsg", 11, None
        )  # fmt: skip
        assert xid.text == "GPU has fallen off the bus."
        report = seen.of(t.GpuReport, A)[-1]
        assert [g.present for g in report.gpus] == [True, False]
        assert report.gpus[0].recovery_action == "reboot"
        assert seen.of(t.NodeReport, A)[-1].gpus_found == 1
        assert not [s for s, _ in seen.messages if subjects.parse(s)[3] != (A,)]  # only A's


async def test_telemetry_is_stored_in_jetstream_per_node_subject() -> None:
    async with serving_hardware() as hw:
        hw.put(node_document(A))
        async with running_agent(hw, nodes=[A]) as (_, seen, bus):
            await until(lambda: seen.of(t.NodeReport, A), within=10, what="a node report")
            stream = subjects.stream_name(CLUSTER, "telemetry")
            stored = await bus.js.get_last_msg(stream, t.subject(CLUSTER, t.NODE, A))
            report = codec.decode(stored.data, t.NodeReport)
            assert report.node == A and [n.name for n in report.nics] == ["ib0", "eth0"]
            assert stored.headers and stored.headers["Nats-Msg-Id"].startswith(f"{A}:node:")


async def test_fleet_heartbeats_stop_while_a_node_is_off_and_restart_from_one() -> None:
    async with serving_hardware() as hw:
        hw.put(node_document(A))
        hw.put(node_document(B))
        async with running_agent(hw, nodes=None) as (agent, seen, _):
            await until(
                lambda: seen.of(t.Heartbeat, A) and seen.of(t.Heartbeat, B),
                within=10,
                what="heartbeats from both simulated nodes",
            )
            hw.put(node_document(A, up=False))
            await until(lambda: not agent.states[A].up, within=10, what="A powered off")
            beats_a = len(seen.of(t.Heartbeat, A))
            beats_b = len(seen.of(t.Heartbeat, B))
            await until(
                lambda: len(seen.of(t.Heartbeat, B)) >= beats_b + 5,
                within=10,
                what="five more heartbeats from B",
            )
            assert len(seen.of(t.Heartbeat, A)) == beats_a  # A said nothing meanwhile

            hw.put(node_document(A, up=True))
            await until(lambda: len(seen.of(t.Heartbeat, A)) > beats_a, within=10, what="A back")
        again = seen.of(t.Heartbeat, A)[beats_a]
        assert again.seq == 1 and again.started > seen.of(t.Heartbeat, A)[0].started


async def test_watch_expiry_and_an_in_stream_410_relist_and_miss_nothing() -> None:
    async with serving_hardware() as hw:
        hw.put(node_document(A))
        async with running_agent(hw, nodes=[A]) as (agent, seen, _bus):
            await until(lambda: seen.of(t.GpuReport, A), within=10, what="the first report")
            lists = hw.lists
            hw.expire_watches()  # watch ends; the next watch answers 410
            hot = node_document(A)
            hot["gpus"][0]["temperature_c"] = 85
            hw.put(hot)
            await until(lambda: hw.lists >= lists + 2, within=10, what="two more lists")
            await until(
                lambda: seen.of(t.GpuReport, A)[-1].gpus[0].temperature_c == 85,
                within=10,
                what="the change made while the watch was gone",
            )
            hw.error_410()
            hw.delete(A)  # after the in-stream 410 the relist no longer has A
            await until(lambda: hw.lists >= lists + 3, within=10, what="a list after the ERROR")
            await until(lambda: not agent.states[A].up, within=10, what="A gone, so off")


async def test_once_prints_one_round_for_a_simulated_node() -> None:
    async with serving_hardware() as hw:
        hw.put(node_document(A))
        settings = Settings(backend="sim", sim_url=hw.url)
        result = await once(settings, node=A, fleet=False)
    readings = [r["reading"] for r in result["readings"]]
    assert readings == ["gpus", "host", "pods"]
    published = {m["subject"]: m["event"]["type"] for m in result["telemetry"]}
    assert published == {
        f"baton.c1.telemetry.gpu.{A}": "telemetry.gpu.v1",
        f"baton.c1.telemetry.node.{A}": "telemetry.node.v1",
        f"baton.c1.telemetry.heartbeat.{A}": "telemetry.heartbeat.v1",
    }


async def test_an_xid_seen_while_nats_is_down_is_published_when_it_is_back(
    tmp_path: Path,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = tmp_path / "js"
    config = core.Config(node="", version="test", backends=("sim",), heartbeat_s=0.1)
    agent = Agent(config=config, cluster=CLUSTER, nodes=(A,), tick_s=0.02)
    stream = subjects.stream_name(CLUSTER, "telemetry")
    async with serving_hardware() as hw:
        hw.put(node_document(A))
        sim = SimHardware(hw.url, nodes=[A], clock=time.time)
        async with running_nats(store_dir=store, port=port) as url:
            bus = await Bus.connect(url, cluster=CLUSTER, name="agent-test")
            await bus.ensure_streams()
            task = asyncio.create_task(agent.run(bus, [sim.run]))
            await until(lambda: agent.ready, within=10, what="the agent's first publish")
        try:
            faulty = node_document(A, seq=11)
            faulty["kernel_log"].append({"seq": 11, "line": XID_79})
            hw.put(faulty)
            await until(
                lambda: any(isinstance(o.event, t.XidEvent) for o in agent.pending),
                within=10,
                what="the Xid waiting for NATS",
            )
            async with running_nats(store_dir=store, port=port):
                await until(lambda: not agent.pending, within=30, what="the backlog published")
                stored = await bus.js.get_last_msg(stream, t.subject(CLUSTER, t.XID, A))
                assert codec.decode(stored.data, t.XidEvent).xid == 79
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await bus.close()


def test_a_simulated_node_whose_name_cannot_be_a_subject_is_ignored() -> None:
    agent = Agent(config=core.Config(node=""), cluster=CLUSTER)
    assert agent.feed("Bad_Name", Tick(at=1.0)) == []
    assert agent.feed(A, Tick(at=1.0)) != []
    assert set(agent.states) == {A} and agent.rejected == {"Bad_Name"}
