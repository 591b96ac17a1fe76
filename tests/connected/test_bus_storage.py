"""A JetStream store that is too small or fills up: a clear error at start, not ready
while full, and work resumes by itself once space is freed."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import nats.js.errors
import pytest

from baton.libs.bus import Bus, storage
from baton.libs.bus.streams import stream_configs
from baton.proto import subjects
from baton.proto.actions import AnyAction
from tests.connected.test_runner import ACTIONS, running
from tests.connected.test_runner import pod_event as toy_input
from tests.pipeline import until
from tests.support.nats import running_nats

pytestmark = [pytest.mark.connected, pytest.mark.timeout(90)]
C = "c1"


def small_store(tmp_path: Path, size: str = "4MB") -> Path:
    conf = tmp_path / "small.conf"
    conf.write_text(f"jetstream {{ max_file_store: {size} }}\n")
    return conf


async def test_a_store_too_small_for_the_reservations_says_which_and_how_much(
    tmp_path: Path,
) -> None:
    async with running_nats(config=small_store(tmp_path)) as url:
        bus = await Bus.connect(url, cluster=C, name="actuator")
        try:
            history = r"cannot reserve 10.00 GiB for stream BATON_C1_HISTORY"
            with pytest.raises(storage.StoreTooSmall, match=history):
                await bus.ensure_streams()
            bus.nodes = 64  # sized for the cluster: 256 MiB, still more than 4 MB
            with pytest.raises(storage.StoreTooSmall, match=r"cannot reserve 0.25 GiB"):
                await bus.ensure_streams()
        finally:
            await bus.close()


async def test_a_full_store_is_not_ready_and_work_resumes_once_it_is_freed(
    tmp_path: Path,
) -> None:
    """The store fills (another writer's decisions); the toy core's cordon cannot be
    stored: its service is not ready and says why. The operator frees space: the
    runner's retry stores the cordon by itself, and the service is ready again."""
    async with running_nats(config=small_store(tmp_path)) as url:
        bus = await Bus.connect(url, cluster=C, name="toy")
        await bus.ensure_streams(stream_configs(C, history_max_bytes=1024**2))
        await bus.publish(*toy_input("bad-1", "gpu-7"))
        filled = await _fill(bus)
        watch = storage.Watch(bus, every=0.1)
        watching = asyncio.create_task(watch.run())
        try:
            async with running(bus) as runner:
                await until(lambda: "insufficient resources" in watch.problem, within=30,
                            what="not ready while the store is full")  # fmt: skip
                await bus.js.purge_stream(subjects.stream_name(C, "events"))
                await until(lambda: runner.handled == 1, within=30,
                            what="the input handled, its cordon stored, once freed")  # fmt: skip
                await until(lambda: not watch.problem, within=30, what="ready once freed")
            actions = await bus.snapshot(ACTIONS, AnyAction)
            assert [a.id for a in actions] == ["cordon-gpu-7"] and filled > 0
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
            await bus.close()


async def _fill(bus: Bus) -> int:
    """Store decisions of 100 kB until JetStream refuses one for want of space."""
    subject = subjects.subject(C, subjects.PLACEMENT, "filler")
    for count in range(1000):
        try:
            await bus.js.publish(subject, os.urandom(100_000))
        except nats.js.errors.APIError as exc:
            assert storage.refused_for_space(exc), exc
            return count
    raise AssertionError("a 4 MB store took 100 MB")
