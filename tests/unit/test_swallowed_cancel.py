"""A cancel that nats-py swallows does not keep a loop running.

On Python 3.11, ``asyncio.wait_for`` (which nats-py wraps every request in) returns
the answer instead of raising when the answer lands in the loop turn the cancel
arrives in. The task is still marked as cancelling, and asyncio does not cancel it a
second time: a loop that goes on waits for ever, and whatever stops it (a TaskGroup, a
``gather``) waits with it. A CI run once hung 300 s on the actuator's stop this way.
Each long-running loop that makes a request calls ``checkpoint()`` once per turn;
these tests swallow the cancel where the request is made and check the loop ends."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from baton.libs.bus import storage
from baton.libs.runtime.stopping import where
from baton.services.actuator import core
from baton.services.actuator.shell import Desk


async def answer_despite_a_cancel(value: Any) -> Any:
    """A request whose answer arrives with the cancel: returned, as ``wait_for`` does."""
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        return value
    return value


async def cancel_and_expect_the_end(task: asyncio.Task[Any], *, within: float = 5.0) -> None:
    await asyncio.sleep(0.05)  # let it reach the request
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=within)
    if not done:
        task.cancel()  # do not leak it into the next test
        await asyncio.wait([task], timeout=1.0)
        pytest.fail(f"still running {within} s after its cancel: {where(task)}")
    assert task.cancelled()


async def test_the_jetstream_watch_ends_when_its_question_swallowed_the_cancel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(storage, "problem", lambda bus: answer_despite_a_cancel(""))
    watch = storage.Watch(bus=None, every=0.01)  # type: ignore[arg-type]
    await cancel_and_expect_the_end(asyncio.create_task(watch.run()))


async def test_the_actuator_desk_stops_forwarding_when_a_lookup_swallowed_the_cancel() -> None:
    desk = Desk(None, api=None, limits=core.Limits(), clock=time.time, dry_run=True)  # type: ignore[arg-type]

    async def judge(subject: str, action: Any) -> tuple[str, str]:
        return await answer_despite_a_cancel(("ok", ""))

    desk._judge = judge  # type: ignore[method-assign]
    looking: asyncio.Queue[Any] = asyncio.Queue()
    action = SimpleNamespace(id="a1", expires=0.0)
    msg = SimpleNamespace(event=action, subject="baton.c1.action.label", deliveries=1, seq=1)
    done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    done.set_result("")
    looking.put_nowait((msg, 1, done))
    await cancel_and_expect_the_end(asyncio.create_task(desk._forward(looking)))
    assert desk.inbox.qsize() == 1  # the delivery in hand still reached the core
