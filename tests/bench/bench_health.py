"""Health benchmarks (``python -m tests.bench health``).

1. Fault -> taint on the API. A 1,500-node simcluster (32 nodes a rack) in this
   process; nats-server, ``baton bridge``, ``baton health``, ``baton actuator`` (its
   production rate limits: 200 writes/s, burst 400) and ``baton agent --fleet`` as
   their own processes, as ``baton up`` runs them. At t0 a GPU falls off the bus
   (Xid 79) on N nodes at once; the time each node takes to show
   ``baton.io/unhealthy`` in the simulator's store is its latency. N = 150 (every
   10th node, as scattered failures are: NVSentinel's test) and N = 750 (every other
   node: past the rails, which hold the level and publish the rest as withheld).
   Raw baseline in the same run: the same number of ``SetTaint`` actions published
   straight to the actuator at once, on other nodes (the API and actuator part alone).
2. Health events handled per second: the core alone, stepping GPU and node reports
   and Xids of 1,500 nodes; and the live runner, a burst of GPU reports published to
   TELEMETRY, until the runner has handled them all.

Preflight checks are off here (first checks of 1,500 new nodes would take the
cluster's first minutes); durations are the defaults.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from nats.js.api import DeliverPolicy

from baton.libs.bus import Bus, Outgoing
from baton.proto import codec, keys, subjects, telemetry
from baton.proto.actions import SetTaint, action_subject
from baton.proto.health import HealthPolicy, Withheld
from baton.proto.k8s import NodeEvent, Taint
from baton.proto.telemetry import GpuReport, GpuStatus, NodeReport, XidEvent
from baton.services.cli.processes import Child, baton, free_port
from baton.services.health import core
from tests.support.actions import take_lease
from tests.support.nats import running_nats
from tests.support.sim import Sim, running_sim

NODES = int(os.environ.get("BATON_BENCH_HEALTH_NODES", "1500"))
C = "bench"


@dataclass
class Taints:
    """When each node first showed a taint key in the simulator's store."""

    key: str
    seen: dict[str, float] = field(default_factory=dict)

    def on_change(self, kind: str, res: str, obj: dict[str, Any]) -> None:
        if res != "nodes" or kind != "MODIFIED":
            return
        name = obj["metadata"]["name"]
        if name not in self.seen and any(
            t.get("key") == self.key for t in obj["spec"].get("taints") or ()
        ):
            self.seen[name] = time.time()


@dataclass
class Stack:
    sim: Sim
    bus: Bus
    health_port: int
    children: list[Child]
    withheld: list[tuple[float, Withheld]] = field(default_factory=list)

    async def metric(self, name: str, **labels: str) -> float:
        url = f"http://127.0.0.1:{self.health_port}/metrics"
        async with aiohttp.ClientSession() as http, http.get(url) as r:
            text = await r.text()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total

    async def handled(self) -> float:
        return await self.metric("baton_runner_inputs_total{", service="health")


async def poll(check: Callable[[], bool], *, within: float, step: float = 0.05) -> None:
    """Until ``check()`` holds or ``within`` seconds passed (a benchmark reports what it got)."""
    deadline = time.monotonic() + within
    while not check() and time.monotonic() < deadline:  # noqa: ASYNC110 - another process
        await asyncio.sleep(step)


@contextlib.asynccontextmanager
async def stack() -> AsyncIterator[Stack]:
    async with running_nats() as url, running_sim(nodes=NODES) as sim:
        sim.store.create("namespaces", {"metadata": {"name": "baton-system"}})
        bus = await Bus.connect(url, cluster=C, name="bench")
        await bus.ensure_streams()
        logs = Path(tempfile.mkdtemp(prefix="baton-bench-health-"))
        env = {"BATON_NATS_URL": url, "BATON_CLUSTER": C, "KUBECONFIG": sim.kubeconfig,
               "BATON_HEALTH_PREFLIGHT": "0", "BATON_AGENT_SIM_URL": sim.url,
               }  # fmt: skip
        ports = {name: free_port() for name in ("bridge", "actuator", "health", "agent")}
        argv = {"bridge": baton("bridge"), "actuator": baton("actuator"),
                "health": baton("health"), "agent": baton("agent", "--fleet")}  # fmt: skip
        children = [
            Child(name, argv[name], logs / f"{name}.log", {**env, "BATON_OPS_PORT": str(port)})
            for name, port in ports.items()
        ]
        s = Stack(sim=sim, bus=bus, health_port=ports["health"], children=children)

        async def on_withheld(msg: Any) -> None:
            s.withheld.append((time.time(), codec.decode(msg.data, Withheld)))

        sub = await bus.nc.subscribe(f"baton.{C}.health.withheld.*", cb=on_withheld)
        try:
            for child in children[:3]:
                child.start()
            await ready(s)  # health reads telemetry from its start on: agents after it
            children[3].start()
            await settled(s)
            yield s
        finally:
            await sub.unsubscribe()
            for child in reversed(children):
                child.stop()
            await bus.close()


async def ready(s: Stack) -> None:
    deadline = time.monotonic() + 120
    url = f"http://127.0.0.1:{s.health_port}/readyz"
    async with aiohttp.ClientSession() as http:
        while True:
            assert time.monotonic() < deadline, "health never became ready"
            await asyncio.sleep(0.5)
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(url) as r:
                    if r.status == 200:
                        return


async def settled(s: Stack) -> None:
    """Health has every node and their first reports, and nothing new is coming in."""
    deadline = time.monotonic() + 300
    last, quiet = -1.0, 0
    while quiet < 3:
        assert time.monotonic() < deadline, "the stack did not settle: " + " | ".join(
            c.tail(3) for c in s.children
        )
        assert all(c.alive for c in s.children), [c.tail() for c in s.children if not c.alive]
        await asyncio.sleep(1.0)
        try:
            healthy = await s.metric("baton_health_nodes{", state="healthy")
            handled = await s.handled()
        except aiohttp.ClientError:
            continue
        quiet = quiet + 1 if healthy == NODES and handled == last and handled > 2 * NODES else 0
        last = handled


def percentiles(values: list[float]) -> tuple[float, float, float, float]:
    ordered = sorted(values)
    if len(ordered) < 2:
        return ordered[0], ordered[0], ordered[0], ordered[0]
    q = statistics.quantiles(ordered, n=100, method="inclusive")
    return q[49], q[89], q[98], ordered[-1]


async def fault_to_taint(s: Stack, every: int, offset: int = 0) -> dict[str, Any]:
    names = s.sim.cluster.node_names()
    failing = names[offset::every]
    watch = Taints(keys.UNHEALTHY)
    s.sim.store.add_listener(watch.on_change)
    before = len(s.withheld)
    t0 = time.time()
    s.sim.cluster.inject("gpu-lost", failing, gpu=0)
    deadline, stable, last = time.monotonic() + 120, 0, -1
    while stable < 20 and time.monotonic() < deadline:  # 2 s without a new taint or verdict
        await asyncio.sleep(0.1)
        now = len(watch.seen) + len(s.withheld)
        stable = stable + 1 if now == last else 0
        last = now
        if len(watch.seen) == len(failing):
            break
    latencies = [watch.seen[n] - t0 for n in failing if n in watch.seen]
    held = s.withheld[before:]
    return {
        "failing": len(failing), "tainted": len(latencies),
        "withheld": len({w.node for _, w in held}),
        "rails": sorted({w.rail for _, w in held}),
        "last_withheld_s": max((t - t0 for t, _ in held), default=0.0),
        "latency": percentiles(latencies) if latencies else (0.0,) * 4,
    }  # fmt: skip


async def raw_taints(s: Stack, every: int, offset: int) -> tuple[float, float, float, float]:
    """The same number of SetTaint actions straight to the actuator, at once."""
    names = s.sim.cluster.node_names()[offset::every]
    watch = Taints("baton.io/bench")
    s.sim.store.add_listener(watch.on_change)
    taint = Taint(key="baton.io/bench", value="true", effect="NoSchedule")
    t0 = time.time()
    epoch = await take_lease(s.bus, "admission")  # taints: admission's to ask for
    actions = [SetTaint(id=f"raw-{n}", by="admission", at=t0, epoch=epoch, priority="health",
                        node=n, taint=taint) for n in names]  # fmt: skip
    await s.bus.publish_many([Outgoing(action_subject(C, a), a, a.id) for a in actions])
    await poll(lambda: len(watch.seen) >= len(names), within=60)
    return percentiles([watch.seen[n] - t0 for n in names if n in watch.seen])


async def stages(s: Stack, every: int, offset: int) -> dict[str, tuple[float, ...]]:
    """Where one fault's time goes: when each failing node's Xid was published, reached
    HISTORY, its ``MarkNode`` was published, its result came, and its taint was stored
    (seconds after the fault, p50/p90/p99/max). ``BATON_BENCH_HEALTH_STAGES=1``."""
    names = s.sim.cluster.node_names()[offset::every]
    first: dict[tuple[str, str], float] = {}

    def seen(stage: str) -> Callable[[Any], Any]:
        async def on(msg: Any) -> None:
            first.setdefault((stage, msg.subject.rsplit(".", 1)[1]), time.time())

        return on

    nc, history = s.bus.nc, subjects.stream_name(C, "history")
    marks = f"baton.{C}.action.mark-node.health.*"
    subs = [await nc.subscribe(f"baton.{C}.telemetry.xid.*", cb=seen("xid published")),
            await nc.subscribe(marks, cb=seen("MarkNode published")),
            await nc.subscribe(f"baton.{C}.result.mark-node.*", cb=seen("result published")),
            await s.bus.js.subscribe(f"baton.{C}.telemetry.xid.*", stream=history,
                                     cb=seen("xid in HISTORY"), ordered_consumer=True,
                                     deliver_policy=DeliverPolicy.NEW)]  # fmt: skip
    watch = Taints(keys.UNHEALTHY)
    s.sim.store.add_listener(watch.on_change)
    t0 = time.time()
    s.sim.cluster.inject("gpu-lost", names, gpu=0)
    await poll(lambda: len(watch.seen) >= len(names), within=60)
    await asyncio.sleep(0.5)
    for sub in subs:
        await sub.unsubscribe()
    order = ("xid published", "xid in HISTORY", "MarkNode published", "result published")
    out = {stage: percentiles([first[(stage, n)] - t0 for n in names if (stage, n) in first])
           for stage in order if any((stage, n) in first for n in names)}  # fmt: skip
    out["taint stored"] = percentiles([watch.seen[n] - t0 for n in names if n in watch.seen])
    return out


async def runner_rate(s: Stack, events: int = 20_000) -> float:
    """A burst of GPU reports on TELEMETRY until health's runner handled them all."""
    names = s.sim.cluster.node_names()
    start = await s.handled()
    now = time.time()
    out = []
    for i in range(events):
        node = names[i % len(names)]
        gpus = tuple(GpuStatus(index=g, temperature_c=40 + i % 7) for g in range(8))
        report = GpuReport(node=node, at=now, gpus=gpus)
        out.append(Outgoing(telemetry.subject(C, telemetry.GPU, node), report, f"b{i}"))
    t0 = time.perf_counter()
    for chunk in range(0, len(out), 2000):
        await s.bus.publish_many(out[chunk : chunk + 2000])
    deadline, done = time.monotonic() + 120, 0.0
    while done < events and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        done = await s.handled() - start
    return done / (time.perf_counter() - t0)


def core_rate() -> tuple[int, float]:
    """The core alone: GPU reports, node reports and application Xids of every node."""
    from tests.support.builders import racks

    nodes = racks(zones=1, blocks=6, racks=8, nodes=32)[:NODES]
    state = core.initial(HealthPolicy(preflight=False))
    for n in nodes:
        core.step(state, NodeEvent(op="upsert", at=0.0, node=n), 0.0)
    events: list[Any] = []
    for round_ in range(10):
        at = 10.0 + round_
        for n in nodes:
            gpus = tuple(GpuStatus(index=g, temperature_c=40 + round_) for g in range(8))
            events.append(GpuReport(node=n.name, at=at, gpus=gpus))
            events.append(NodeReport(node=n.name, at=at, gpus_expected=8, gpus_found=8))
            events.append(XidEvent(node=n.name, at=at, xid=13, source="kmsg", gpu=0))
    started = time.perf_counter()
    for e in events:
        core.step(state, e, e.at)
    return len(events), len(events) / (time.perf_counter() - started)


async def measure() -> dict[str, Any]:
    results: dict[str, Any] = {}
    async with stack() as s:
        results["150"] = await fault_to_taint(s, every=10, offset=0)
        results["raw"] = await raw_taints(s, every=10, offset=5)
        if os.environ.get("BATON_BENCH_HEALTH_STAGES"):
            results["stages"] = await stages(s, every=10, offset=3)
        results["runner"] = await runner_rate(s)
    async with stack() as s:
        results["750"] = await fault_to_taint(s, every=2, offset=0)
    return results


def main() -> None:
    results = asyncio.run(measure())
    events, rate = core_rate()
    print(f"{NODES} nodes, 32 a rack; health, bridge, actuator (200/s, burst 400) and the "
          "agent fleet as processes\n")  # fmt: skip
    print("| case | failing | tainted | withheld | p50 s | p90 s | p99 s | max s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    cases = (("150", "GPU lost, every 10th node"), ("750", "GPU lost, every other node"))
    for case, label in cases:
        r = results[case]
        p50, p90, p99, most = r["latency"]
        print(f"| {label} | {r['failing']} | {r['tainted']} | {r['withheld']} | {p50:.2f} | "
              f"{p90:.2f} | {p99:.2f} | {most:.2f} |")  # fmt: skip
    p50, p90, p99, most = results["raw"]
    n = results["150"]["failing"]
    print(f"| raw: {n} SetTaint actions straight to the actuator | {n} | {n} | - | {p50:.2f} | "
          f"{p90:.2f} | {p99:.2f} | {most:.2f} |")  # fmt: skip
    if "stages" in results:
        print("\n| stage (a second fault: every 10th node from the 4th; s after it) "
              "| p50 | p90 | p99 | max |")  # fmt: skip
        print("|---|---:|---:|---:|---:|")
        for stage, (p50, p90, p99, most) in results["stages"].items():
            print(f"| {stage} | {p50:.2f} | {p90:.2f} | {p99:.2f} | {most:.2f} |")
    r750 = results["750"]
    print(f"\n750 case: rails {', '.join(r750['rails']) or '-'}; every withheld verdict published "
          f"within {r750['last_withheld_s']:.2f} s of the fault\n")  # fmt: skip
    print("| health events handled | events | per second |")
    print("|---|---:|---:|")
    print(f"| core alone (GPU and node reports, Xids of {NODES} nodes) | {events} | {rate:,.0f} |")
    print(f"| live runner (a burst of GPU reports on TELEMETRY) | 20000 | "
          f"{results['runner']:,.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
