"""Test support: Baton's bridge, gang and actuator (and health and the reporter, when
asked) running in the test's own event loop, against a real nats-server and a simcluster
over HTTP (what `baton up` runs as processes), and a poller for conditions with a deadline.
``stack`` is the e2e tests' prelude: the servers, the services, API clients, namespaces."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi

from baton.libs.bus import Bus
from baton.libs.runner import Runner, Spec
from baton.libs.runner.leasing import Lease
from baton.libs.runner.serving import prepare_streams
from baton.libs.runtime.settings import Base
from baton.libs.runtime.stopping import stuck_tasks, where
from baton.services.actuator import core as actuator_core
from baton.services.actuator import main as actuator
from baton.services.actuator.calling import Api
from baton.services.agent import core as agent_core
from baton.services.agent.shell import Agent
from baton.services.agent.simulated import SimHardware
from baton.services.bridge import main as bridge
from baton.services.bridge.shell import WatchFeed
from baton.services.gang import core as gang_core
from baton.services.gang import main as gang
from baton.services.health import core as health_core
from baton.services.health import heartbeats
from baton.services.health import main as health
from baton.services.reporter import core as reporter_core
from baton.services.reporter import main as reporter
from tests.support.nats import running_nats
from tests.support.sim import Sim, running_sim

T = TypeVar("T")


@dataclass
class Services:
    gang: Runner[gang_core.State]
    client: ApiClient
    health: Runner[health_core.State] | None = None
    reporter: Runner[reporter_core.State] | None = None


@contextlib.asynccontextmanager
async def running_services(
    url: str,
    sim: Sim,
    *,
    cluster: str = "c1",
    gang_settings: gang.Settings | None = None,
    health_settings: health.Settings | None = None,
    reporter_settings: reporter.Settings | None = None,
) -> AsyncIterator[Services]:
    """bridge -> gang -> actuator on one bus (and health, with its heartbeat watch, and the
    reporter, when their settings are given), fast timers; all stopped on exit (each
    within a deadline, naming what was stuck)."""
    client = await sim.api_client()
    names: tuple[str, ...] = ("bridge", "gang", "actuator")
    if health_settings is not None:
        names += ("health",)
    if reporter_settings is not None:
        names += ("reporter",)
    buses = {n: await Bus.connect(url, cluster=cluster, name=n) for n in names}
    await buses["bridge"].ensure_streams()
    bridge_settings = bridge.Settings(cluster=cluster)
    watch = WatchFeed(buses["bridge"], client, options=bridge_settings.options())
    actuator_settings = actuator.Settings(cluster=cluster, qps=0)
    runners: dict[str, Runner[Any]] = {
        "bridge": Runner(bridge.SPEC, bus=buses["bridge"], settings=bridge_settings, feed=watch,
                         batch=4096),
        "gang": Runner(gang.SPEC, bus=buses["gang"], lease=Lease(buses["gang"], "gang"),
                       settings=gang_settings or gang.Settings(cycle_interval=0.1)),
        "actuator": actuator.runner(
            buses["actuator"], actuator_settings, api=Api(client, tries=2, base=0.01),
            limits=actuator_core.Limits(qps=0, backoff_base=0.05),
        ),
    }  # fmt: skip
    if health_settings is not None:
        runners["health"] = Runner(health.SPEC, bus=buses["health"], settings=health_settings,
                                   dry_run=health_settings.dry_run, stop_grace=5.0,
                                   lease=Lease(buses["health"], "health"))  # fmt: skip
    if reporter_settings is not None:
        runners["reporter"] = Runner(reporter.SPEC, bus=buses["reporter"],
                                     settings=reporter_settings,
                                     lease=Lease(buses["reporter"], "reporter"))  # fmt: skip
    tasks = [asyncio.create_task(runners[n].run(), name=f"{n}-runner") for n in names]
    if health_settings is not None:
        watching = heartbeats.watch(
            buses["health"],
            after_s=health_settings.silence_after_s,
            check_s=0.2,
            ready=lambda: runners["health"].started is not None,
        )
        tasks.append(asyncio.create_task(watching, name="heartbeats"))
        names += ("heartbeats",)
    try:
        yield Services(gang=runners["gang"], client=client, health=runners.get("health"),
                       reporter=runners.get("reporter"))  # fmt: skip
    finally:
        for task, name in zip(tasks, names, strict=True):
            await stop(task, within=15.0, what=name)
        for bus in buses.values():
            await bus.close()
        await client.close()


@dataclass
class Stack:
    """What ``stack`` yields: the bus URL, the simcluster, API clients on it, its node
    names in name order, and the services when they run."""

    url: str
    sim: Sim
    api: CoreV1Api
    custom: CustomObjectsApi
    nodes: list[str]
    services: Services | None

    @property
    def gang(self) -> Runner[gang_core.State]:
        assert self.services is not None, "stack(services=False) runs no gang"
        return self.services.gang


@contextlib.asynccontextmanager
async def stack(
    nodes: int = 0,
    *,
    namespaces: Sequence[str] = (),
    pools: Sequence[str] = (),
    services: bool = True,
    cluster: str = "c1",
    gang_settings: gang.Settings | None = None,
    health_settings: health.Settings | None = None,
    reporter_settings: reporter.Settings | None = None,
    **sim_options: Any,
) -> AsyncIterator[Stack]:
    """A nats-server and a simcluster of ``nodes`` (or ``sim_options``: ``spec=``, as
    ``running_sim`` takes), the nodes labelled ``baton.io/pool`` with ``pools`` in name
    order, ``namespaces`` made; with ``services``, ``running_services`` with the settings
    given (before the namespaces); everything stopped and closed on exit."""
    async with (
        running_nats() as url,
        running_sim(nodes, **sim_options) as sim,
        contextlib.AsyncExitStack() as exits,
    ):
        started: Services | None = None
        if services:
            wired = running_services(url, sim, cluster=cluster, gang_settings=gang_settings,
                                     health_settings=health_settings,
                                     reporter_settings=reporter_settings)  # fmt: skip
            started = await exits.enter_async_context(wired)
            client = started.client
        else:
            client = await sim.api_client()
            exits.push_async_callback(client.close)
        api, custom = CoreV1Api(client), CustomObjectsApi(client)
        names = sorted(n.metadata.name for n in (await api.list_node()).items)
        if pools and len(pools) != len(names):
            raise ValueError(f"stack: {len(pools)} pools for {len(names)} nodes: one a node")
        for node, pool in zip(names, pools, strict=False):
            await api.patch_node(node, {"metadata": {"labels": {"baton.io/pool": pool}}})
        for ns in namespaces:
            await api.create_namespace({"metadata": {"name": ns}})
        yield Stack(url=url, sim=sim, api=api, custom=custom, nodes=names, services=started)


@contextlib.asynccontextmanager
async def running(
    spec: Spec[Any], url: str, settings: Base, *, cluster: str = "c1", stop_within: float = 15.0
) -> AsyncIterator[Runner[Any]]:
    """One service on the runner, in this event loop, on its own connection; stopped
    (within ``stop_within`` seconds, naming what was stuck) on exit."""
    bus = await Bus.connect(url, cluster=cluster, name=spec.name, ca_file=settings.nats_ca_file,
                            seed_file=settings.nats_nkey_seed_file)  # fmt: skip
    await prepare_streams(bus, spec, authenticated=bool(settings.nats_nkey_seed_file), within=30.0)
    runner = Runner(
        spec,
        bus=bus,
        settings=settings,
        dry_run=settings.dry_run,
        stop_grace=5.0,
        lease=Lease(bus, spec.name),
    )  # its actions carry its epoch, as in serve()
    task = asyncio.create_task(runner.run(), name=f"{spec.name}-runner")
    try:
        yield runner
    finally:
        await stop(task, within=stop_within, what=spec.name)
        await bus.close()


@contextlib.asynccontextmanager
async def running_fleet(
    url: str, sim: Sim, *, cluster: str = "c1", heartbeat_s: float = 0.5
) -> AsyncIterator[Agent]:
    """``baton agent --fleet`` in this event loop: one agent core per simulated node, fed
    from simcluster's ``/sim/v1/hardware`` over HTTP, publishing to NATS."""
    bus = await Bus.connect(url, cluster=cluster, name="agent-fleet")
    await bus.ensure_streams()
    config = agent_core.Config(node="", version="test", backends=("sim",),
                               heartbeat_s=heartbeat_s)  # fmt: skip
    agent = Agent(config=config, cluster=cluster, tick_s=0.1)
    source = SimHardware(sim.url, nodes=None, clock=time.time)
    task = asyncio.create_task(agent.run(bus, [source.run]), name="agent-fleet")
    try:
        yield agent
    finally:
        await stop(task, within=15.0, what="agent fleet")
        await bus.close()


def drain_as_health_does(sim: Sim, node: str) -> None:
    """Put on ``node`` what the health service puts on a node it judged failed, once the
    checkpoint grace is over: the quarantine and drain taints (gang restarts its gangs)."""

    def taint(obj: dict[str, Any]) -> None:
        taints = obj.setdefault("spec", {}).setdefault("taints", [])
        taints += [
            {"key": "baton.io/unhealthy", "value": "true", "effect": "NoSchedule"},
            {"key": "baton.io/draining", "value": "true", "effect": "NoExecute"},
        ]

    sim.store.mutate("nodes", None, node, taint)


async def stop(task: asyncio.Task[Any], *, within: float, what: str) -> None:
    """Cancel ``task`` and wait for it; fail naming where it is stuck after ``within`` s."""
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=within)
    if not done:
        stuck = "; ".join(stuck_tasks(besides=asyncio.current_task()))
        raise AssertionError(f"{what} did not stop within {within}s: {where(task)}; tasks: {stuck}")
    if not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]


async def until(
    check: Callable[[], T | Awaitable[T | None] | None],
    *,
    what: str,
    within: float = 10.0,
    step: float = 0.02,
    guard: Callable[[], None] | None = None,
) -> T:
    """Poll ``check`` (plain or async) until it returns something truthy, and return it;
    fail naming ``what`` (and the last value) after ``within`` seconds. ``guard``, when
    given, runs before each look and raises to fail at once (a child process that exited)."""
    deadline = time.monotonic() + within
    while True:
        if guard is not None:
            guard()
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what} (last: {value!r})")
        await asyncio.sleep(step)


async def every(bus: Bus, subject: str, type_: Any, *, within: float = 30.0) -> list[Any]:
    """Every message stored on ``subject`` so far, oldest first (not only the last per
    subject, as ``Bus.snapshot`` gives)."""
    got: list[Any] = []
    async with bus.consume(subject, type_=type_, deliver="all") as sub:
        if sub.initial_pending == 0:
            return got
        async with asyncio.timeout(within):
            async for msg in sub:
                got.append(msg.event)
                await msg.ack()
                if msg.pending == 0:
                    break
    return got


def until_sync(check: Callable[[], bool], *, within: float, what: str, step: float = 0.2) -> None:
    """``until`` for tests that drive other processes without an event loop (their
    checks block: subprocesses, HTTP)."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(step)
