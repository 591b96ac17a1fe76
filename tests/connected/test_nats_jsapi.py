"""The JetStream API each service's NATS user keeps (``access.stream_grants``), on a real
nats-server with the configuration ``baton nats-config`` generates: a service reads
only the streams its inputs come from (a consumer, a fetch or a get on another is a
permission violation), only the owner (the actuator) creates streams, and a service
started before the owner waits for them, then runs."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import nats.errors
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from structlog.testing import capture_logs

from baton.libs.bus.connection import StreamsMissing
from baton.libs.runner.serving import prepare_streams
from baton.proto import subjects
from baton.services.actuator import main as actuator
from baton.services.actuator.shell import done_bucket
from baton.services.gang import main as gang
from tests.connected.test_nats_auth import C, Violations, secured_nats
from tests.pipeline import running, until

pytestmark = [pytest.mark.connected, pytest.mark.timeout(120)]

LIMITS = subjects.stream_name(C, "limits")
TELEMETRY = subjects.stream_name(C, "telemetry")
K8S = subjects.stream_name(C, "k8s")
DONE = f"KV_{subjects.stream_name(C, 'done')}"


async def test_a_service_reads_only_the_streams_it_has_inputs_from(tmp_path: Path) -> None:
    """Gang (inputs: objects, results, its ticks) may not make a consumer on, fetch from
    or get a message of the limits stream, telemetry or the actuator's done bucket; it
    reads the objects stream."""
    async with secured_nats(tmp_path) as nats_:
        admin = await nats_.bus("admin", name="test")
        await admin.ensure_streams()
        limits = subjects.node_limits(C, "gpu-0")
        await admin.js.publish(limits, b'{"limits": "gpu-0"}')
        node = subjects.subject(C, subjects.K8S, "node", "gpu-0")
        await admin.js.publish(node, b'{"node": "gpu-0"}')
        peek = ConsumerConfig(durable_name="peek", ack_policy=AckPolicy.NONE)
        await admin.js.add_consumer(LIMITS, peek)  # one to fetch from, made by the operator
        owner = await nats_.bus("actuator")
        done = await done_bucket(owner)  # the actuator's own bucket, made when it starts
        await done.put("a-1", b"applied")
        violations = Violations()
        nc = await violations.connect(nats_.server, nats_.seed("gang"))
        try:
            js = nc.jetstream(timeout=1.0)
            refused: dict[str, Callable[[], Awaitable[object]]] = {
                f"$JS.API.CONSUMER.CREATE.{LIMITS}": lambda: js.add_consumer(
                    LIMITS, ConsumerConfig()
                ),
                f"$JS.API.CONSUMER.CREATE.{TELEMETRY}": lambda: js.add_consumer(
                    TELEMETRY, ConsumerConfig()
                ),
                f"$JS.API.DIRECT.GET.{LIMITS}": lambda: js.get_last_msg(
                    LIMITS, limits, direct=True
                ),
                f"$JS.API.STREAM.MSG.GET.{LIMITS}": lambda: js.get_last_msg(LIMITS, limits),
                f"$JS.API.CONSUMER.MSG.NEXT.{LIMITS}.peek": lambda: nc.request(
                    f"$JS.API.CONSUMER.MSG.NEXT.{LIMITS}.peek", b'{"batch": 1}', timeout=1.0
                ),
                f"$JS.API.STREAM.INFO.{DONE}": lambda: js.key_value(
                    subjects.stream_name(C, "done")
                ),
                f"$JS.API.STREAM.MSG.GET.{DONE}": lambda: js.get_last_msg(
                    DONE, "$KV.BATON_C1_DONE.a-1"
                ),
            }
            # all at once: each waits out its second for the answer the server never sends
            answers = await asyncio.gather(*(call() for call in refused.values()),
                                           return_exceptions=True)  # fmt: skip
            for api, answer in zip(refused, answers, strict=True):
                assert isinstance(answer, nats.errors.TimeoutError), (api, answer)  # dropped
                await until(lambda a=api: violations.saw(a), what=f"gang refused {api}")  # type: ignore[misc]
            # Its own: the objects it reads, by a consumer of its own, fetched.
            sub = await js.pull_subscribe(
                subjects.wildcard(C, subjects.K8S, "node", ">"), stream=K8S,
                config=ConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT),
            )  # fmt: skip
            got = await sub.fetch(1, timeout=5.0)
            assert [m.data for m in got] == [b'{"node": "gpu-0"}']
        finally:
            await nc.close()
            await owner.close()
            await admin.close()


async def test_a_service_started_before_the_owner_waits_then_runs(tmp_path: Path) -> None:
    """No stream yet: gang says which it waits for and does not start; once the actuator
    (the owner) has made them, it leads and ticks. Without the owner it gives up at its
    deadline, naming what is missing."""
    async with secured_nats(tmp_path) as nats_:
        gang_bus = await nats_.bus("gang")
        with capture_logs() as said, pytest.raises(StreamsMissing, match="KV_BATON_C1_LEASES"):
            await prepare_streams(gang_bus, gang.SPEC, authenticated=True, within=1.0)
        await gang_bus.close()
        waiting = [e for e in said if e["event"] == "waiting for streams"]
        assert waiting and waiting[0]["owner"] == "actuator", said
        assert f"{subjects.stream_name(C, 'history')}" in waiting[0]["streams"]

        settings = gang.Settings(cluster=C, cycle_interval=0.1,
                                 nats_nkey_seed_file=nats_.seed("gang"))  # fmt: skip
        started = asyncio.Event()

        async def run_gang() -> None:
            async with running(gang.SPEC, nats_.server, settings, cluster=C) as runner:
                await until(lambda: runner.ready and runner.leader, what="gang ready, leading")
                started.set()
                await asyncio.Event().wait()  # until cancelled

        with capture_logs() as looked:
            task = asyncio.create_task(run_gang(), name="gang-before-owner")
            await until(lambda: any(e["event"] == "waiting for streams" for e in looked),
                        what="gang looking for its streams")  # fmt: skip
        try:
            assert not started.is_set() and not task.done()  # it looked, and waits
            owner = await nats_.bus("actuator")
            await prepare_streams(owner, actuator.SPEC, authenticated=True)  # makes every stream
            await owner.close()
            await until(started.is_set, what="gang running once the streams exist", within=30.0)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
