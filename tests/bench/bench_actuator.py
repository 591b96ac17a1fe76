"""Pods bound per second, end to end: BindGang actions on NATS -> actuator -> simcluster.

Publishes gangs as BindGang actions (pipelined) and times until every pod is bound in
the simulator's store. The baseline binds the same number of pods straight through
kubernetes-asyncio (``pods/binding``, same concurrency, no bus, no actuator) in the
same run. One process holds the simulator and the actuator; nats-server runs beside.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from baton.libs.bus import Bus, Outgoing
from baton.proto import subjects
from baton.proto.actions import BindGang, Binding
from baton.services.actuator import core
from baton.services.actuator import main as actuator_main
from baton.services.actuator.calling import Api
from tests.support.nats import running_nats
from tests.support.sim import Sim, running_sim

NS = "bench"
NODES = 512
CONCURRENCY = 64
RUNS = ((8, 4096), (64, 4096), (1024, 4096))  # (gang size, pods)


class Bound:
    """Counts pods of a prefix that got a nodeName, from the store's change feed."""

    def __init__(self, sim: Sim, prefix: str, want: int) -> None:
        self.prefix, self.want, self.count = prefix, want, 0
        self.done = asyncio.Event()
        sim.store.add_listener(self.on_change)

    def on_change(self, kind: str, res: str, obj: dict[str, Any]) -> None:
        if res != "pods" or kind != "MODIFIED" or not obj["spec"].get("nodeName"):
            return
        if obj["metadata"]["name"].startswith(self.prefix):
            self.count += 1
            if self.count >= self.want:
                self.done.set()


def setup(sim: Sim, prefix: str, pods: int) -> list[str]:
    names = [f"{prefix}-{i}" for i in range(pods)]
    for name in names:
        container = {"name": "main", "image": "pause"}
        body = {"metadata": {"name": name, "namespace": NS}, "spec": {"containers": [container]}}
        sim.store.create("pods", body)
    return names


async def baseline(sim: Sim, api: Api, pods: int) -> float:
    names = setup(sim, "raw", pods)
    gate = asyncio.Semaphore(CONCURRENCY)
    session = api.session()

    async def bind(i: int, name: str) -> None:
        target = {"apiVersion": "v1", "kind": "Node", "name": f"n-{i % NODES}"}
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": target}
        async with gate:
            await session.call("create", api.core.create_namespaced_pod_binding, name, NS, body)

    started = time.perf_counter()
    await asyncio.gather(*(bind(i, n) for i, n in enumerate(names)))
    return pods / (time.perf_counter() - started)


async def through_actuator(sim: Sim, bus: Bus, *, gang: int, pods: int, run: int) -> float:
    prefix = f"g{run}"
    names = setup(sim, prefix, pods)
    bound = Bound(sim, prefix, pods)
    outgoing = []
    for g in range(pods // gang):
        members = names[g * gang : (g + 1) * gang]
        bindings = tuple(
            Binding(namespace=NS, pod=p, node=f"n-{(g * gang + i) % NODES}")
            for i, p in enumerate(members)
        )
        action = BindGang(id=f"{prefix}-{g}", by="bench", at=time.time(), gang=f"{NS}/{prefix}-{g}",
                          bindings=bindings)  # fmt: skip
        subject = subjects.subject(bus.cluster, subjects.ACTION, "bind", NS, f"{prefix}-{g}")
        outgoing.append(Outgoing(subject, action, action.id))
    started = time.perf_counter()
    await bus.publish_many(outgoing)
    await asyncio.wait_for(bound.done.wait(), 300)
    return pods / (time.perf_counter() - started)


async def measure() -> list[tuple[str, int, float]]:
    rows = []
    async with running_nats() as url, running_sim() as sim:
        sim.store.create("namespaces", {"metadata": {"name": NS}})
        for i in range(NODES):
            sim.store.create("nodes", {"metadata": {"name": f"n-{i}"}})
        client = await sim.api_client()
        client.configuration.connection_pool_maxsize = 256
        api = Api(client)
        bus = await Bus.connect(url, cluster="bench", name="bench")
        await bus.ensure_streams()
        rows.append(
            ("raw kubernetes-asyncio binds, 64 at once", 4096, await baseline(sim, api, 4096))
        )
        actuator_bus = await Bus.connect(url, cluster="bench", name="actuator")
        limits = core.Limits(qps=0, concurrency=32)
        settings = actuator_main.Settings(cluster="bench", bind_concurrency=CONCURRENCY)
        actuator = actuator_main.runner(actuator_bus, settings, api=api, limits=limits)
        task = asyncio.create_task(actuator.run())
        try:
            for run, (gang, pods) in enumerate(RUNS):
                rate = await through_actuator(sim, bus, gang=gang, pods=pods, run=run)
                rows.append((f"actuator, BindGang of {gang}", pods, rate))
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await actuator_bus.close()
            await bus.close()
            await client.close()
    return rows


def main() -> None:
    rows = asyncio.run(measure())
    print("| path | pods | pods bound / s |")
    print("|---|---:|---:|")
    for path, pods, rate in rows:
        print(f"| {path} | {pods} | {rate:,.0f} |")


if __name__ == "__main__":
    main()
