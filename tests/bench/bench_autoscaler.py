"""Autoscaler benchmarks (``python -m tests.bench autoscaler``).

1. Verdict -> scale request, the core alone, at 7,500 nodes: three pools (5,000 H100,
   2,000 A100, 500 CPU nodes; every GPU node running a pod), 200 gangs already
   refused (waiting on quota), then 500 unschedulable verdicts, each a new gang of
   1..32 nodes of one of the GPU shapes. The latency of a verdict is the time its
   ``step`` takes to return the ``ScaleMachineDeployment`` (the core decides on a
   verdict's arrival; the runner adds its batch and the bus's publish, not measured
   here). Also: one full tick (follow plans, scale-ups, the idle-node scan) at that
   size. Raw baseline in the same run: decoding the verdict from its JSON and one
   ``NodeEvent`` step (the least any event costs this core).
2. Node-hours against queueing delay on a trace (``/work/shared/traces/philly.csv``
   when present, else skipped; ``BATON_BENCH_TRACE`` names another file): a discrete
   event model of an elastic cluster of 8-GPU nodes (``trace_sim``), balloons off,
   static and demand-aware, against fixed overprovisioning. Partial scale-ups: counted
   (0 by construction).
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import msgspec

from baton.proto import codec, keys
from baton.proto.actions import ScaleMachineDeployment
from baton.proto.admission import GangQueued
from baton.proto.autoscaler import AutoscalerPolicy
from baton.proto.k8s import MachineDeployment, MachineDeploymentEvent, NodeEvent, PodEvent
from baton.proto.placement import GangUnschedulable, Need
from baton.proto.runner import Tick
from baton.services.autoscaler import core
from tests.bench import trace_sim
from tests.support.builders import node, pod

POOLS = (("h100", 5000, 8), ("a100", 2000, 4), ("cpu", 500, 0))
VERDICTS = int(os.environ.get("BATON_BENCH_AUTOSCALER_VERDICTS", "500"))
TRACE = Path(os.environ.get("BATON_BENCH_TRACE", "/work/shared/traces/philly.csv"))


def cluster() -> core.State:
    state = core.initial(AutoscalerPolicy(max_joining=1_000_000, unneeded_s=600))
    for name, count, gpus in POOLS:
        md = MachineDeployment(
            namespace="default", name=name, uid=f"u-{name}", replicas=count,
            min_size=0, max_size=100_000, selector={keys.POOL: name},
        )  # fmt: skip
        core.step(state, MachineDeploymentEvent(op="upsert", at=0, machine_deployment=md), 0)
        for i in range(count):
            n = node(f"{name}-{i:05d}", gpus=gpus).in_pool(name)
            n = n.in_rack(f"{name}-r{i // 32}", block=f"{name}-b{i // 512}", zone="z1")
            core.step(state, NodeEvent(op="upsert", at=0, node=n.build()), 0)
            if gpus:
                busy = pod(f"w-{name}-{i}", gpus=gpus, node_name=f"{name}-{i:05d}",
                           phase="Running")  # fmt: skip
                core.step(state, PodEvent(op="upsert", at=0, pod=busy), 0)
    for g in range(200):
        gang = f"queued/g{g}"
        core.step(state, GangQueued(gang=gang, team="t", reason="quota", position=g, at=0), 0)
        core.step(state, verdict(gang, 4, 8, at=0.0), 0)
    return state


def verdict(gang: str, nodes: int, gpus: int, *, at: float) -> GangUnschedulable:
    need = Need(nodes=nodes, shape={keys.GPU: gpus})
    return GangUnschedulable(gang=gang, at=at, reason="r", need=need, members=nodes)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency() -> None:
    started = time.perf_counter()
    state = cluster()
    built = time.perf_counter() - started
    samples: list[float] = []
    partial = 0
    for i in range(VERDICTS):
        gpus = 8 if i % 3 else 4
        event = verdict(f"ml/job-{i}", 1 + (i * 7) % 32, gpus, at=10.0 + i)
        t0 = time.perf_counter()
        _, out = core.step(state, event, event.at)
        samples.append(time.perf_counter() - t0)
        scales = [o for o in out if isinstance(o, ScaleMachineDeployment)]
        if len(scales) != 1:
            raise SystemExit(f"verdict {i}: expected one scale request, got {out}")
        partial += state.partial
    ticks = []
    for j in range(5):
        t0 = time.perf_counter()
        core.step(state, Tick(at=20.0 + VERDICTS + j), 20.0 + VERDICTS + j)
        ticks.append(time.perf_counter() - t0)
    raw = verdict("ml/raw", 8, 8, at=1.0)
    data = msgspec.json.encode(raw)
    decode, step_node = [], []
    probe = node("h100-00000", gpus=8).in_pool("h100").build()
    for _ in range(VERDICTS):
        t0 = time.perf_counter()
        codec.decode(data, GangUnschedulable)
        decode.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        core.step(state, NodeEvent(op="upsert", at=1, node=probe), 1)
        step_node.append(time.perf_counter() - t0)
    nodes = sum(c for _, c, _ in POOLS)
    print(f"{nodes:,} nodes in 3 pools, 200 gangs waiting on quota; state built in {built:.1f}s\n")
    print("| what | n | p50 | p99 | max |")
    print("|---|---|---|---|---|")
    rows: list[tuple[str, list[float]]] = [
        ("verdict -> ScaleMachineDeployment (core step)", samples),
        ("full tick (plans, scale-ups, idle scan)", ticks),
        ("raw: decode the verdict JSON", decode),
        ("raw: one NodeEvent step", step_node),
    ]
    for what, values in rows:
        print(f"| {what} | {len(values)} | {ms(pct(values, 0.5))} | {ms(pct(values, 0.99))} "
              f"| {ms(max(values))} |")  # fmt: skip
    print(f"\npartial scale-ups: {partial}; mean verdict step {ms(statistics.mean(samples))}")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


def main() -> None:
    latency()
    print()
    if not TRACE.is_file():
        print(f"trace sim: skipped ({TRACE} is absent; set BATON_BENCH_TRACE to a Philly CSV)")
        return
    trace_sim.report(TRACE)
