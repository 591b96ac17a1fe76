"""The bus against a real nats-server: dedup, ack/nak/term, dead letters, bootstrap, TTL."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from baton.libs.bus import Bus, Message, Outgoing
from baton.libs.bus.streams import ACTIONS, DEADLETTER, HISTORY, K8S
from baton.proto import subjects
from baton.proto.actions import AnyAction, Cordon
from baton.proto.deadletter import DeadLetter
from baton.proto.k8s import K8sEvent, Pod, PodEvent
from tests.pipeline import until
from tests.support.nats import running_nats

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]

CLUSTER = "c1"
PODS = subjects.wildcard(CLUSTER, subjects.K8S, "pod", ">")
DEAD = subjects.wildcard(CLUSTER, subjects.DEADLETTER, ">")


@pytest.fixture
async def nats_url() -> AsyncIterator[str]:
    async with running_nats() as url:
        yield url


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    bus = await Bus.connect(nats_url, cluster=CLUSTER, name="test")
    await bus.ensure_streams()
    yield bus
    await bus.close()


def pod_event(name: str, rv: str = "1", *, op: str = "upsert") -> tuple[str, PodEvent]:
    pod = Pod(namespace="team-a", name=name, uid=f"uid-{name}", resource_version=rv)
    event = PodEvent(op=op, at=1000.0 + int(rv), pod=pod)  # type: ignore[arg-type]
    return subjects.subject(CLUSTER, subjects.K8S, "pod", "team-a", name), event


async def next_message(sub: Any, within: float = 10.0) -> Message[Any]:
    async with asyncio.timeout(within):
        msg: Message[Any] = await anext(sub)
        return msg


async def test_ensure_streams_is_idempotent_and_declares_every_stream(bus: Bus) -> None:
    await bus.ensure_streams()  # second time: no error, no change
    names = {info.config.name for info in await bus.js.streams_info()}
    expected = {subjects.stream_name(CLUSTER, s) for s in (K8S, ACTIONS, DEADLETTER, HISTORY)}
    assert expected <= names
    assert "KV_BATON_C1_LEASES" in names  # the lease bucket: made with the streams, first
    k8s = await bus.js.stream_info(subjects.stream_name(CLUSTER, K8S))
    assert k8s.config.max_msgs_per_subject == 1
    assert k8s.config.allow_msg_ttl


async def test_history_keeps_every_version_from_the_first_publish(nats_url: str) -> None:
    """K8S keeps one message per object; HISTORY must still get each version, even
    an update superseded right after ensure_streams returns."""
    bus = await Bus.connect(nats_url, cluster=CLUSTER, name="first")
    try:
        await bus.ensure_streams()
        for rv in ("1", "2", "3"):
            subject, event = pod_event("early", rv)
            await bus.publish(subject, event, msg_id=f"early:{rv}")
        history = subjects.stream_name(CLUSTER, HISTORY)

        async def copied() -> bool:
            return (await bus.js.stream_info(history)).state.messages >= 3

        # the server copies by a source consumer it starts (and, if that fails under load,
        # retries seconds later): the deadline is for a loaded machine, not the usual ~0.1 s
        await until(copied, what="HISTORY holding the 3 versions copied from K8S", within=45)
        stored = [(await bus.js.get_msg(history, seq)).data for seq in (1, 2, 3)]
        versions = [msgspec.json.decode(data)["pod"]["resource_version"] for data in stored]
        assert versions == ["1", "2", "3"]
    finally:
        await bus.close()


async def test_same_msg_id_is_stored_once(bus: Bus) -> None:
    subject, event = pod_event("w-0")
    first = await bus.publish(subject, event, msg_id="uid-w-0:1")
    again = await bus.publish(subject, event, msg_id="uid-w-0:1")
    other = await bus.publish(subject, event, msg_id="uid-w-0:2")
    assert again == first
    assert other == first + 1


async def test_publish_many_stores_each_once(bus: Bus) -> None:
    items = [(*pod_event(f"w-{i}"), f"id-{i}") for i in range(500)]
    await bus.publish_many(items)  # type: ignore[arg-type]
    await bus.publish_many(items[:100])  # duplicates: not stored again
    info = await bus.js.stream_info(subjects.stream_name(CLUSTER, K8S))
    assert info.state.messages == 500
    assert info.state.last_seq == 500


async def test_nak_redelivers_and_term_dead_letters(bus: Bus) -> None:
    await bus.publish(*pod_event("a"))
    async with bus.consume(PODS, type_=K8sEvent, durable="t1", ack_wait=30) as sub:
        first = await next_message(sub)
        assert first.event.pod.name == "a" and first.deliveries == 1
        await first.nak(delay=0)
        again = await next_message(sub)
        assert (again.seq, again.deliveries) == (first.seq, 2)
        await again.term("refused by the test")
        await bus.publish(*pod_event("b"))
        second = await next_message(sub)
        assert second.event.pod.name == "b"
        await second.ack()

        async def settled() -> bool:
            info = await bus.js.consumer_info(sub.stream or "", "t1")
            return info.num_ack_pending == 0 and info.num_pending == 0

        await until(settled, what="settled")
    letters = await bus.snapshot(DEAD, DeadLetter)
    assert [(d.seq, d.reason, d.error_class) for d in letters] == [
        (first.seq, "refused by the test", "bad-input")
    ]


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\x00\xffnot json", "not JSON"),
        (b'{"type": "k8s.gizmo.v1", "op": "upsert", "at": 1}', "'k8s.gizmo.v1'"),
        (b'{"type": "k8s.pod.v9", "op": "upsert", "at": 1}', "unsupported schema version"),
        (b'{"type": "k8s.pod.v1", "op": "upsert", "at": "x"}', "Expected `float`, got `str`"),
    ],
)
async def test_poison_is_dead_lettered_and_does_not_block(
    bus: Bus, payload: bytes, reason: str
) -> None:
    poison_subject, _ = pod_event("poison")
    await bus.js.publish(poison_subject, payload)
    await bus.publish(*pod_event("good"))
    async with bus.consume(PODS, type_=K8sEvent) as sub:
        msg = await next_message(sub)
        assert msg.event.pod.name == "good"
        await msg.ack()
    letters = await bus.snapshot(DEAD, DeadLetter)
    assert len(letters) == 1
    letter = letters[0]
    assert reason in letter.reason
    assert (letter.subject, letter.seq, letter.error_class) == (poison_subject, 1, "bad-input")
    assert letter.payload == payload.decode("utf-8", errors="backslashreplace")


async def test_handler_failures_dead_letter_after_max_deliver(bus: Bus) -> None:
    await bus.publish(*pod_event("crashy"))
    await bus.publish(*pod_event("fine"))
    outcomes: list[bool] = []
    async with bus.consume(PODS, type_=K8sEvent, max_deliver=3) as sub:
        while True not in outcomes:
            msg = await next_message(sub)
            if msg.event.pod.name == "fine":
                await msg.ack()
                continue
            outcomes.append(await msg.fail("handler raised ZeroDivisionError"))
    assert outcomes == [False, False, True]
    letters = await bus.snapshot(DEAD, DeadLetter)
    assert [(d.error_class, d.deliveries) for d in letters] == [("bug", 3)]
    assert "gave up after 3 deliveries" in letters[0].reason


async def test_late_consumer_bootstraps_latest_state_then_follows(bus: Bus) -> None:
    for rv in ("1", "2", "3"):
        await bus.publish(*pod_event("w-0", rv))
    await bus.publish(*pod_event("w-1", "4"))
    state = await bus.snapshot(PODS, K8sEvent)
    assert [(e.pod.name, e.pod.resource_version) for e in state] == [("w-0", "3"), ("w-1", "4")]
    async with bus.consume(PODS, type_=K8sEvent, deliver="last_per_subject") as sub:
        seen = [(await next_message(sub)) for _ in range(2)]
        assert [m.event.pod.resource_version for m in seen] == ["3", "4"]
        assert seen[-1].pending == 0
        await bus.publish(*pod_event("w-2", "5"))
        live = await next_message(sub)
        assert live.event.pod.name == "w-2"


async def test_tombstone_expires_with_its_ttl(bus: Bus) -> None:
    await bus.publish(*pod_event("gone", "1"))
    subject, tomb = pod_event("gone", "2", op="delete")
    await bus.publish(subject, tomb, ttl="1s")
    assert [e.op for e in await bus.snapshot(PODS, K8sEvent)] == ["delete"]

    async def expired() -> bool:
        return await bus.snapshot(PODS, K8sEvent) == []

    await until(expired, what="expired")


async def test_history_keeps_k8s_and_actions_in_order(bus: Bus) -> None:
    await bus.publish(*pod_event("w-0"))
    action = Cordon(id="a1", by="test", at=1.0, node="gpu-1")
    await bus.publish(
        subjects.subject(CLUSTER, subjects.ACTION, "cordon", "gpu-1"), action, msg_id="a1"
    )
    async with bus.consume(
        subjects.wildcard(CLUSTER, subjects.ACTION, ">"), type_=AnyAction, durable="actuator"
    ) as sub:
        msg = await next_message(sub)
        await msg.ack()
    history = subjects.stream_name(CLUSTER, HISTORY)

    async def copied() -> bool:
        return (await bus.js.stream_info(history)).state.messages == 2

    await until(copied, what="copied")
    events = await bus.snapshot(subjects.wildcard(CLUSTER), K8sEvent | AnyAction, stream=history)
    assert sorted(type(e).__name__ for e in events) == ["Cordon", "PodEvent"]


async def test_publish_many_accepts_ttl(bus: Bus) -> None:
    subject, tomb = pod_event("x", "2", op="delete")
    await bus.publish_many([Outgoing(subject, tomb, "x:2", "1s")])

    async def expired() -> bool:
        return await bus.snapshot(PODS, K8sEvent) == []

    await until(expired, what="expired")


async def test_a_consumer_carries_on_across_a_server_restart(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = tmp_path / "js"
    async with running_nats(store_dir=store, port=port) as url:
        bus = await Bus.connect(url, cluster=CLUSTER, name="restart")
        await bus.ensure_streams()
        await bus.publish(*pod_event("before"))
        sub = bus.consume(PODS, type_=K8sEvent, durable="survivor")
        first = await next_message(sub)
        await first.ack()
        await bus.nc.flush()
    try:
        async with running_nats(store_dir=store, port=port):
            await bus.publish(*pod_event("after"))  # waits for the reconnect
            again = await next_message(sub, within=30)  # the pull is re-issued
            assert again.event.pod.name == "after"
            await again.ack()
    finally:
        await bus.close()
