"""Poison of any size is dead-lettered, never crash-loops a service, and never keeps one
unready: a message just under NATS's 1 MiB limit and 256 KiB of non-UTF-8 bytes on the
subjects gang, admission and the actuator consume; a 7-byte one before a restart."""

from __future__ import annotations

import asyncio

import pytest

from baton.libs.bus import Bus
from baton.proto import subjects
from baton.proto.actions import ActionResult, SetTaint
from baton.proto.deadletter import PAYLOAD_COPY, DeadLetter
from baton.proto.k8s import NodeEvent, Taint
from baton.services.actuator import main as actuator
from baton.services.admission import main as admission
from baton.services.gang import main as gang
from tests.pipeline import running, stop, until
from tests.support.actions import Producers
from tests.support.builders import node
from tests.support.nats import running_nats

pytestmark = [pytest.mark.connected, pytest.mark.timeout(120)]
C = "c1"
JUST_UNDER = 1024 * 1024 - 4096  # room for the subject and headers under max_payload
NOT_UTF8 = b"\xff\xfe" * (131 * 1024)  # ~262 KB; 4x as backslash escapes: over 1 MiB
BIG = b'{"type": "k8s.node.v1", "junk": "' + b"x" * (JUST_UNDER - 64) + b'"}'


def poison() -> list[tuple[str, bytes]]:
    return [
        (subjects.subject(C, subjects.K8S, "node", "big"), BIG),
        (subjects.subject(C, subjects.K8S, "node", "binary"), NOT_UTF8),
        (subjects.subject(C, subjects.K8S, "node", "tiny"), b"\x00garbag"),
    ]


async def letters(bus: Bus, want: int) -> list[DeadLetter]:
    async def found() -> list[DeadLetter]:
        got: list[DeadLetter] = await every_letter(bus)
        return got if len(got) >= want else []

    return await until(found, what=f"{want} dead letters", within=30.0)


async def every_letter(bus: Bus) -> list[DeadLetter]:
    got: list[DeadLetter] = []
    subject = subjects.wildcard(C, subjects.DEADLETTER, ">")
    async with bus.consume(subject, type_=DeadLetter, deliver="all") as sub:
        left = sub.initial_pending
        async with asyncio.timeout(10):
            while left > 0:
                msg = await anext(sub)
                await msg.ack()
                got.append(msg.event)
                left -= 1
    return got


async def publish_nodes(bus: Bus) -> None:
    for name in ("gpu-0", "gpu-1"):
        n = node(name, gpus=8).build()
        await bus.publish(subjects.subject(C, "k8s", "node", name),
                          NodeEvent(op="upsert", at=1.0, node=n))  # fmt: skip


async def test_gang_and_admission_dead_letter_poison_of_any_size_and_stay_ready() -> None:
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster=C, name="test")
        await bus.ensure_streams()
        await publish_nodes(bus)
        for subject, data in poison():  # before the start: in the snapshot
            await bus.js.publish(subject, data)
        admission_settings = admission.Settings(cluster=C)
        async with running(gang.SPEC, url, gang.Settings(cluster=C, cycle_interval=0.1)) as g:
            await until(lambda: g.ready, what="gang ready with poison in its snapshot")
            async with running(admission.SPEC, url, admission_settings) as a:
                await until(lambda: a.ready, what="admission ready with poison in its snapshot")
                for subject, data in poison():  # while running: live
                    await bus.js.publish(subject, data)
                await publish_nodes(bus)  # and both still take what follows
                await until(lambda: g.handled >= 4 and a.handled >= 4, what="inputs after")
                assert g.ready and a.ready
        found = await letters(bus, 6)  # 3 from the snapshot, 3 live (one letter each: msg ids)
        for letter in found:
            assert len(letter.payload.encode()) <= 4 * PAYLOAD_COPY
            assert letter.stream and letter.seq > 0  # where the whole message still is
        sizes = {(letter.subject.rsplit(".", 1)[-1], letter.size) for letter in found}
        assert sizes == {("big", len(BIG)), ("binary", len(NOT_UTF8)), ("tiny", 7)}
        assert all(letter.truncated == (letter.size > PAYLOAD_COPY) for letter in found)
        # A restart with a poison message as the last word on a node: ready again.
        async with running(admission.SPEC, url, admission_settings) as again:
            await until(lambda: again.ready, what="admission ready after a restart")
        await bus.close()


async def test_the_actuator_dead_letters_a_huge_action_and_applies_the_next() -> None:
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster=C, name="test")
        await bus.ensure_streams()
        actuator_bus = await Bus.connect(url, cluster=C, name="actuator")
        settings = actuator.Settings(cluster=C, dry_run=True)
        runner = actuator.runner(actuator_bus, settings, api=None)
        task = asyncio.create_task(runner.run(), name="actuator")
        try:
            for kind, data in (("bind-gang", b"{" + b" " * JUST_UNDER + b"}"),
                               ("taint", NOT_UTF8)):  # fmt: skip
                await bus.js.publish(subjects.subject(C, subjects.ACTION, kind, "x"), data)
            good = SetTaint(id="after-poison", by="admission", at=0.0, node="gpu-0",
                            taint=Taint(key="k", value="v", effect="NoSchedule"))  # fmt: skip
            await Producers(bus).publish(good)
            found = await letters(bus, 2)
            assert sorted(letter.size for letter in found) == sorted([JUST_UNDER + 2,
                                                                       len(NOT_UTF8)])  # fmt: skip
            assert all(letter.truncated for letter in found)

            async def result() -> list[ActionResult]:
                subject = subjects.wildcard(C, subjects.RESULT, ">")
                return await bus.snapshot(subject, ActionResult)

            done = await until(result, what="the next action's result")
            assert [r.action_id for r in done] == ["after-poison"]
            assert not task.done()
        finally:
            await stop(task, within=15.0, what="actuator")
            await actuator_bus.close()
            await bus.close()
