"""Test support: Baton's bridge, gang and actuator running in the test's own event loop,
against a real nats-server and a simcluster over HTTP (what `baton up` runs as
processes), and a poller for conditions with a deadline."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from kubernetes_asyncio.client import ApiClient

from libs.bus import Bus
from libs.testing.sim import Sim
from services.actuator import core as actuator_core
from services.actuator.calling import Api
from services.actuator.shell import Actuator
from services.bridge.shell import Bridge
from services.gang import core as gang_core
from services.gang.shell import GangShell


@dataclass
class Services:
    gang: GangShell
    client: ApiClient


@contextlib.asynccontextmanager
async def running_services(
    url: str, sim: Sim, *, cluster: str = "c1", policy: gang_core.Policy | None = None
) -> AsyncIterator[Services]:
    """bridge -> gang -> actuator on one bus, fast timers; all stopped on exit."""
    client = await sim.api_client()
    names = ("bridge", "gang", "actuator")
    buses = [await Bus.connect(url, cluster=cluster, name=n) for n in names]
    await buses[0].ensure_streams()
    gang = GangShell(buses[1], state=gang_core.initial(policy), interval=0.1)
    limits = actuator_core.Limits(qps=0, backoff_base=0.05)
    runners = [
        Bridge(bus=buses[0], api=client, cluster=cluster),
        gang,
        Actuator(buses[2], api=Api(client, tries=2, base=0.01), limits=limits),
    ]
    tasks = [asyncio.create_task(r.run()) for r in runners]
    try:
        yield Services(gang=gang, client=client)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for bus in buses:
            await bus.close()
        await client.close()


async def until(check: Callable[[], bool], *, within: float, what: str, step: float = 0.05) -> None:
    """Poll ``check`` until it holds; fail naming ``what`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(step)
