"""The runner against a real nats-server: one ordered feed, outputs stored once, bugs
dead-lettered, ticks and starts on the bus, and stops that always end."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from baton.libs.bus import Bus
from baton.libs.bus.pulling import Puller
from baton.libs.runner import BusFeed, Input, Route, Runner, Spec, Timer
from baton.libs.runtime.settings import Base
from baton.proto import subjects, telemetry
from baton.proto.actions import AnyAction, Cordon, action_subject
from baton.proto.deadletter import DeadLetter
from baton.proto.k8s import Pod, PodEvent
from baton.proto.runner import Started, Tick
from baton.proto.telemetry import GpuReport
from tests.pipeline import every, stop, until
from tests.support.nats import running_nats

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]

CLUSTER = "c1"
ACTIONS = subjects.wildcard(CLUSTER, subjects.ACTION, ">")


class Toy(msgspec.Struct):
    """The toy core's state: each pod's node, and every input's kind in the order seen."""

    nodes: dict[str, str] = {}
    seen: list[str] = []
    wants_ticks: bool = False


class ToyPolicy(msgspec.Struct, frozen=True):
    flavour: str = "plain"


def step(state: Toy, event: Any, now: float) -> tuple[Toy, tuple[Cordon, ...]]:
    """Remember each pod's node; a pod named 'bad-*' means cordon its node; 'boom-*' is a bug."""
    if isinstance(event, Tick):
        state.seen.append(f"tick@{event.at:.0f}")
        return state, ()
    pod = event.pod
    if pod.name.startswith("boom"):
        raise ZeroDivisionError("the toy core's bug")
    state.nodes[pod.name] = pod.node_name
    state.seen.append(pod.name)
    if pod.name.startswith("bad"):
        return state, (Cordon(id=f"cordon-{pod.node_name}", by="toy", at=now, node=pod.node_name),)
    return state, ()


SPEC = Spec(
    name="toy",
    settings=Base,
    initial=lambda policy: Toy(),
    step=step,
    policy=lambda settings: ToyPolicy(flavour="spicy"),
    policy_type=ToyPolicy,
    inputs=(Input("k8s.pod.>", PodEvent),),
    routes=(Route(Cordon, to=lambda c, a: (action_subject(c, a), a.id), action=True),),
)


def pod_event(name: str, node: str = "gpu-1", at: float = 500.0) -> tuple[str, PodEvent]:
    pod = Pod(namespace="team-a", name=name, uid=f"uid-{name}", node_name=node)
    subject = subjects.subject(CLUSTER, subjects.K8S, "pod", "team-a", name)
    return subject, PodEvent(op="upsert", at=at, pod=pod)


@pytest.fixture
async def bus() -> AsyncIterator[Bus]:
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster=CLUSTER, name="toy")
        await bus.ensure_streams()
        yield bus
        await bus.close()


@contextlib.asynccontextmanager
async def running(bus: Bus, spec: Spec[Any] = SPEC, **kwargs: Any) -> AsyncIterator[Runner[Any]]:
    runner = Runner(spec, bus=bus, settings=Base(), stop_grace=2.0, **kwargs)
    task = asyncio.create_task(runner.run())
    try:
        yield runner
    finally:
        await stop(task, within=10.0, what=spec.name)


async def test_bootstraps_then_decides_and_publishes_once(bus: Bus) -> None:
    await bus.publish(*pod_event("w-0", "gpu-0"))
    async with running(bus) as runner:
        await until(lambda: runner.ready, what="caught up")
        assert runner.state.nodes == {"w-0": "gpu-0"}
        await bus.publish(*pod_event("bad-1", "gpu-7"))
        await bus.publish(*pod_event("bad-2", "gpu-7"))  # same decision id: stored once
        await until(lambda: runner.handled == 3, what="three inputs handled")
    actions = await bus.snapshot(ACTIONS, AnyAction)
    assert [(a.id, a.node, a.at) for a in actions] == [("cordon-gpu-7", "gpu-7", 500.0)]
    info = await bus.js.stream_info(subjects.stream_name(CLUSTER, "actions"))
    assert info.state.messages == 1


async def test_the_lag_behind_the_bus_is_measured_once_caught_up(bus: Bus) -> None:
    """``baton_runner_lag_seconds``: from an input's time on the bus to its outputs
    stored. A live input handled at once shows a lag of well under the test's time."""
    from prometheus_client import REGISTRY

    def lag() -> float | None:
        return REGISTRY.get_sample_value("baton_runner_lag_seconds", {"service": "lagging"})

    def batches(le: str = "+Inf") -> float | None:
        labels = {"service": "lagging", "le": le}
        return REGISTRY.get_sample_value("baton_runner_batch_lag_seconds_bucket", labels)

    spec = dataclasses.replace(SPEC, name="lagging")
    started = time.monotonic()
    async with running(bus, spec) as runner:
        await until(lambda: runner.ready, what="caught up")
        assert lag() is None  # nothing live handled yet
        await bus.publish(*pod_event("w-1", "gpu-1"))
        await until(lambda: lag() is not None, what="a lag measured")
    measured = lag()
    assert measured is not None and 0.0 <= measured <= time.monotonic() - started
    # every batch's lag is kept in the histogram too: this one, within 5 s
    assert batches() == 1 and batches("5.0") == 1


async def test_dry_run_publishes_no_action(bus: Bus) -> None:
    async with running(bus, dry_run=True) as runner:
        await bus.publish(*pod_event("bad-1", "gpu-7"))
        await until(lambda: runner.handled == 1, what="the input handled")
    assert await bus.snapshot(ACTIONS, AnyAction) == []


async def test_the_start_is_recorded_with_the_policy_and_where_the_feed_began(bus: Bus) -> None:
    await bus.publish(*pod_event("w-0"))
    async with running(bus) as runner:
        await until(lambda: runner.ready, what="caught up")
    started = await bus.snapshot(subjects.runner(CLUSTER, "started", "toy"), Started)
    (record,) = started
    assert record.policy == {"flavour": "spicy"}
    assert record.k8s_seq == 1  # the snapshot held w-0
    assert record.service == "toy" and record.instance


async def test_a_core_that_raises_dead_letters_the_input_and_goes_on(bus: Bus) -> None:
    await bus.publish(*pod_event("boom-1"))
    await bus.publish(*pod_event("w-1"))
    dead = subjects.wildcard(CLUSTER, subjects.DEADLETTER, ">")
    async with running(bus) as runner:
        await until(lambda: runner.state.nodes.get("w-1") == "gpu-1", what="w-1 handled")
        await bus.publish(*pod_event("boom-2"))  # live, after the snapshot: the same
        await bus.publish(*pod_event("w-2"))
        await until(lambda: "w-2" in runner.state.nodes, what="w-2 handled")
    letters = await every(bus, dead, DeadLetter)
    assert [letter.subject.rsplit(".", 1)[1] for letter in letters] == ["boom-1", "boom-2"]
    assert all(letter.error_class == "bug" for letter in letters)
    assert all("ZeroDivisionError: the toy core's bug" in letter.reason for letter in letters)


async def test_undecodable_input_is_dead_lettered_and_never_reaches_the_core(bus: Bus) -> None:
    async with running(bus) as runner:
        await until(lambda: runner.ready, what="caught up")
        await bus.js.publish(subjects.subject(CLUSTER, "k8s", "pod", "team-a", "junk"), b"\xff{")
        await bus.publish(*pod_event("w-3"))
        await until(lambda: "w-3" in runner.state.nodes, what="the good input after it")
    letters = await bus.snapshot(subjects.wildcard(CLUSTER, subjects.DEADLETTER, ">"), DeadLetter)
    assert [letter.error_class for letter in letters] == ["bad-input"]
    assert runner.state.seen == ["w-3"]


async def test_poison_on_an_object_is_refused_and_its_last_good_state_kept(bus: Bus) -> None:
    """A pod claiming 1,000 GPUs (published with the bridge's rights, past the bridge's
    bounds) and bytes that decode as nothing, each on a real pod's subject: the running
    core keeps what it knew, and so does a restarted one, although K8S now holds only
    the poison for those subjects."""
    await bus.publish(*pod_event("w-0", "gpu-0"))
    await bus.publish(*pod_event("w-1", "gpu-1"))
    subject = pod_event("w-0")[0]
    huge = Pod(namespace="team-a", name="w-0", uid="uid-w-0", node_name="gpu-9",
               requests={"nvidia.com/gpu": 1000})  # fmt: skip
    async with running(bus) as runner:
        await until(lambda: runner.ready, what="caught up")
        await bus.publish(subject, PodEvent(op="upsert", at=501.0, pod=huge))
        await bus.js.publish(pod_event("w-1")[0], b"\xff{")
        await bus.publish(*pod_event("w-2", "gpu-2"))
        await until(lambda: "w-2" in runner.state.nodes, what="the good input after them")
        assert runner.state.nodes == {"w-0": "gpu-0", "w-1": "gpu-1", "w-2": "gpu-2"}
    letters = await every(bus, subjects.wildcard(CLUSTER, subjects.DEADLETTER, ">"), DeadLetter)
    assert any("out of bounds: pod team-a/w-0 requests 1000 nvidia.com/gpu" in letter.reason
               for letter in letters), [letter.reason for letter in letters]  # fmt: skip
    async with running(bus) as restarted:
        await until(lambda: restarted.ready, what="the restarted core caught up")
        assert restarted.state.nodes == {"w-0": "gpu-0", "w-1": "gpu-1", "w-2": "gpu-2"}
    pods = await bus.snapshot(subjects.wildcard(CLUSTER, subjects.K8S, "pod", ">"), PodEvent)
    assert sorted((e.pod.name, e.pod.node_name) for e in pods) == [
        ("w-0", "gpu-0"), ("w-1", "gpu-1"), ("w-2", "gpu-2")]  # fmt: skip


async def test_the_core_sees_history_order_across_inputs_and_ticks(bus: Bus) -> None:
    """Ticks go through the bus: a tick lands between the inputs it followed, live."""
    asked: list[float] = []  # when the timer asked whether the core wants a tick

    def wants(state: Toy, now: float) -> bool:
        asked.append(now)
        return state.wants_ticks

    spec = Spec(
        name="ticker", settings=Base, initial=lambda policy: Toy(), step=step,
        inputs=SPEC.inputs, routes=SPEC.routes,
        timer=Timer(every=lambda s: 0.05, wants=wants),
    )  # fmt: skip
    async with running(bus, spec) as runner:
        await until(lambda: runner.ready, what="caught up")
        await until(lambda: len(asked) >= 3, what="the timer asking the core thrice")
        assert runner.state.seen == []  # no ticks while the core wants none
        runner.state.wants_ticks = True
        await until(lambda: len(runner.state.seen) >= 2, what="ticks")
        await bus.publish(*pod_event("w-4"))
        await until(lambda: "w-4" in runner.state.seen, what="w-4")
        runner.state.wants_ticks = False
        await asyncio.sleep(0.2)
        seen = list(runner.state.seen)
    ticks = await bus.snapshot(subjects.runner(CLUSTER, "tick", "ticker"), Tick)
    assert ticks and seen.count("w-4") == 1
    # What the core saw is what HISTORY holds, in the same order.
    history = await _history(bus)
    expected = [f"tick@{e.at:.0f}" if isinstance(e, Tick) else e.pod.name for e in history]
    assert seen == expected[: len(seen)]


async def test_a_core_that_says_work_waits_gets_a_tick_before_the_interval(bus: Bus) -> None:
    """``Timer.soon``: the interval is a minute, yet the tick the core asks for comes
    within seconds; without ``soon`` none would come before the minute is out."""

    def ticks(state: Toy) -> list[str]:
        return [s for s in state.seen if s.startswith("tick@")]

    def soon(state: Toy) -> bool:
        return "w-soon" in state.nodes and len(ticks(state)) < 2

    spec = Spec(
        name="ticker", settings=Base, initial=lambda policy: Toy(wants_ticks=True), step=step,
        inputs=SPEC.inputs, routes=SPEC.routes,
        timer=Timer(every=lambda s: 60.0, wants=lambda state, now: state.wants_ticks, soon=soon),
    )  # fmt: skip
    async with running(bus, spec) as runner:
        await until(lambda: len(ticks(runner.state)) == 1, what="the first tick, at start")
        await bus.publish(*pod_event("w-soon"))
        await until(lambda: len(ticks(runner.state)) == 2, what="a tick soon after w-soon",
                    within=20)  # fmt: skip
        assert [seen.split("@")[0] for seen in runner.state.seen] == ["tick", "w-soon", "tick"]


async def _history(bus: Bus) -> list[Any]:
    spec = Spec(name="ticker", settings=Base, initial=lambda p: None, step=step,
                inputs=SPEC.inputs, timer=Timer(every=lambda s: 1.0))  # fmt: skip
    feed = BusFeed(bus, spec)
    got: list[Any] = []
    info = await bus.js.stream_info(subjects.stream_name(CLUSTER, "history"))
    sub = await bus.js.subscribe(
        f"baton.{CLUSTER}.>", stream=subjects.stream_name(CLUSTER, "history"),
        ordered_consumer=True,
    )  # fmt: skip
    try:
        for _ in range(info.state.messages):
            msg = await sub.next_msg(timeout=5)
            if msg.subject.startswith(("baton.c1.k8s.pod.", "baton.c1.runner.tick.ticker")):
                got.append(msgspec.json.decode(msg.data, type=feed.spec.input_types))
    finally:
        await sub.unsubscribe()
    return got


async def test_cancel_stops_and_removes_the_consumer(bus: Bus) -> None:
    async with running(bus) as runner:
        await bus.publish(*pod_event("w-2"))
        await until(lambda: runner.handled == 1, what="one input")
    history = subjects.stream_name(CLUSTER, "history")
    assert await bus.js.consumers_info(history) == []


async def test_a_reader_cancelled_as_messages_arrive_always_stops(bus: Bus) -> None:
    """On Python 3.11 nats-py's next_msg can drop a cancel that lands in the same loop turn
    as a message; the reader then reads on forever. Ours never does: cancel a reader at
    random moments of a burst, 60 times, and each stops."""
    stream = subjects.stream_name(CLUSTER, "k8s")
    rng = random.Random(7)
    for round_ in range(60):
        info = await bus.js.add_consumer(
            stream, config=__import__("nats.js.api").js.api.ConsumerConfig(
                filter_subject=f"baton.{CLUSTER}.k8s.pod.>",
                deliver_policy=__import__("nats.js.api").js.api.DeliverPolicy.NEW,
                ack_policy=__import__("nats.js.api").js.api.AckPolicy.NONE,
            ),
        )  # fmt: skip
        puller = Puller(bus.nc, stream=stream, consumer=info.name, batch=64)
        await puller.start()
        received = 0

        async def read(p: Puller = puller) -> None:
            nonlocal received
            while True:
                await p.next()
                received += 1

        reader = asyncio.create_task(read())
        for i in range(20):
            await bus.nc.publish(f"baton.{CLUSTER}.k8s.pod.team-a.p{round_}-{i}", b"{}")
        for _ in range(rng.randrange(0, 40)):
            await asyncio.sleep(0)
        reader.cancel()
        done, _ = await asyncio.wait([reader], timeout=3.0)
        assert done, f"round {round_}: the reader went on after its cancel ({received} read)"
        assert reader.cancelled()
        await puller.stop()
        await bus.js.delete_consumer(stream, info.name)


async def test_a_stop_while_nats_is_away_ends_within_the_grace_naming_what_was_stuck(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The batch in hand cannot store its output (NATS is gone): the stop waits the grace
    period, then ends anyway and says which outputs were not stored."""
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster=CLUSTER, name="toy")
        await bus.ensure_streams()
        runner = Runner(SPEC, bus=bus, settings=Base(), stop_grace=1.0)
        task = asyncio.create_task(runner.run())
        await until(lambda: runner.ready, what="caught up")
        held = asyncio.Event()
        real = bus.publish_many

        async def stalled(items: Any) -> None:
            held.set()
            await asyncio.sleep(3600)  # JetStream never answers
            await real(items)

        bus.publish_many = stalled  # type: ignore[method-assign]
        await bus.publish(*pod_event("bad-9", "gpu-9"))
        await asyncio.wait_for(held.wait(), 10)
        loop = asyncio.get_running_loop()
        began = loop.time()
        await stop(task, within=5.0, what="toy")
        assert loop.time() - began < 4.0
        await bus.close()


def telemetry_step(state: Toy, event: Any, now: float) -> tuple[Toy, tuple[()]]:
    state.seen.append(f"{event.node}@{event.at:.0f}" if isinstance(event, GpuReport) else "x")
    return state, ()


async def test_a_bootstrapped_telemetry_report_is_in_the_snapshot_and_not_fed_twice(
    bus: Bus,
) -> None:
    """A node's last report stated before the start is fed first (as an object's last
    event is), once, and reports after it follow live."""
    spec = Spec(name="watcher", settings=Base, initial=lambda p: Toy(), step=telemetry_step,
                inputs=(Input("telemetry.gpu.>", GpuReport, bootstrap=True),))  # fmt: skip
    for at in (1.0, 2.0):  # n1 reported twice before the start: only the last counts
        report = GpuReport(node="n1", at=at)
        await bus.publish(telemetry.subject(CLUSTER, "gpu", "n1"), report, msg_id=f"r{at}")
    async with running(bus, spec) as runner:
        await until(lambda: runner.ready, what="caught up")
        await bus.publish(telemetry.subject(CLUSTER, "gpu", "n1"), GpuReport(node="n1", at=3.0))
        await until(lambda: len(runner.state.seen) >= 2, what="the live report")
        marker = GpuReport(node="n2", at=4.0)  # fed after whatever else was coming
        await bus.publish(telemetry.subject(CLUSTER, "gpu", "n2"), marker)
        await until(lambda: "n2@4" in runner.state.seen, what="the report after it")
        seen = list(runner.state.seen)
    assert seen == ["n1@2", "n1@3", "n2@4"]
    (started,) = await bus.snapshot(subjects.runner(CLUSTER, "started", "watcher"), Started)
    assert started.telemetry_seq == 2 and started.k8s_seq == 0


async def test_a_live_batch_takes_every_input_that_has_already_arrived(bus: Bus) -> None:
    """Not one input a batch: each batch costs its outputs' publish and ack round trip,
    and a burst (150 health verdicts) would wait them out one after another."""
    feed = BusFeed(bus, SPEC)
    await feed.start()
    try:
        await bus.publish(*pod_event("a-0"))
        assert [item.event.pod.name for item in await feed.take(100)] == ["a-0"]  # live
        for i in range(5):
            await bus.publish(*pod_event(f"b-{i}"))
        puller = feed._puller
        assert puller is not None
        await until(lambda: puller._queue.qsize() >= 5, what="five inputs delivered")
        first = await feed.take(100)
        taken = [item.event.pod.name for item in first]
        while len(taken) < 5:  # an idle heartbeat may have counted as one of the five
            taken += [item.event.pod.name for item in await feed.take(100)]
    finally:
        await feed.close()
    assert len(first) > 1
    assert taken == [f"b-{i}" for i in range(5)]
