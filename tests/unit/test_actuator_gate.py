"""``NodeGate``: gang binds onto a node share it; a pod created there by name holds it
alone, after the binds in flight, and before binds that came after it asked."""

from __future__ import annotations

import asyncio

import pytest

from baton.services.actuator.calling import NodeGate

pytestmark = pytest.mark.unit


async def test_binds_share_a_create_waits_for_them_and_later_binds_wait_for_it() -> None:
    gate, order = NodeGate(), []
    first, second = asyncio.Event(), asyncio.Event()

    async def bind(name: str, release: asyncio.Event) -> None:
        async with gate.shared():
            order.append(f"{name} in")
            await release.wait()
            order.append(f"{name} out")

    async def create() -> None:
        async with gate.alone():
            order.append("create")

    a = asyncio.create_task(bind("a", first))
    b = asyncio.create_task(bind("b", second))
    await asyncio.sleep(0)
    assert order == ["a in", "b in"]  # two binds onto one node run together
    made = asyncio.create_task(create())
    await asyncio.sleep(0)
    late = asyncio.create_task(bind("c", asyncio.Event()))
    await asyncio.sleep(0.01)
    assert order == ["a in", "b in"]  # the create waits; the later bind waits behind it
    first.set()
    await a
    assert "create" not in order  # b still binds
    second.set()
    await asyncio.wait_for(asyncio.gather(b, made), 1)
    await asyncio.sleep(0.01)
    assert order == ["a in", "b in", "a out", "b out", "create", "c in"]
    late.cancel()


async def test_a_create_that_is_cancelled_while_waiting_lets_binds_through() -> None:
    gate, hold = NodeGate(), asyncio.Event()

    async def bind() -> None:
        async with gate.shared():
            await hold.wait()

    running = asyncio.create_task(bind())
    await asyncio.sleep(0)

    async def create() -> None:
        async with gate.alone():
            pass

    waiting = asyncio.create_task(create())
    await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    async with asyncio.timeout(1):
        async with gate.shared():  # not blocked by the create that gave up
            pass
    hold.set()
    await running
