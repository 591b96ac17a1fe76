"""Scheduling quality (``python -m tests.bench scheduling``): one harness, several
placers, two workloads, and the decision time with a long queue.

Placers: the gang core under strict FIFO; as it was before this work (the first gang
that does not fit reserves at once, smaller ones backfill outside the reservation, no
preemption, no defragmentation); with today's defaults (the same, plus priority
preemption and defragmentation); with a starvation threshold (the head reserves only
after 30 min); with EASY backfill (today's defaults: learned estimates, or users'
estimates of the true duration x U(1, 3); with and without loans); EASY with one-pod
gangs ordered shortest expected work first (``shortest_first_s``); and pod-by-pod greedy
(kube-scheduler-like: each pod alone, on the least allocated node, partial jobs hold
GPUs). ``BATON_SCHEDULING_PLACERS`` picks rows by key (``compare``),
``BATON_SCHEDULING_PARTS`` the parts (decision, philly, llm).

Workloads, in a pure discrete-event harness (a cycle every 30 trace seconds):

1. Philly: jobs 48,000-51,000 of the trace (52 h; BATON_PHILLY or ../shared beside
   the clone, else the bundled sample, said so) on 40 8-GPU nodes (offered load ~117%).
   The whole trace (82,247 jobs, 109 days) is the part ``philly-full``, not run by
   default: 60 nodes (78% offered load), minutes to tens of minutes per placer.
2. An LLM-style large-gang mix generated from published statistics (Acme's Kalos
   cluster, Hu et al., NSDI '24: evaluation jobs are most jobs but a sliver of GPU
   time; pretraining gangs of 256-1,024 GPUs hold most of it): 256 8-GPU nodes, 3 days,
   seeded. Evaluation jobs (1-8 GPUs, minutes) are marked preemptible; pretraining
   gangs have priority 10, everything else 0.

Preempted jobs restart from scratch (work lost = GPUs x time run; with checkpoints the
loss is smaller); evictions take effect at once (no grace in trace time).
"""

from __future__ import annotations

import csv
import dataclasses
import gc
import heapq
import math
import os
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from baton.libs.runtime import tune_gc
from baton.proto import keys
from baton.proto.actions import BindGang
from baton.proto.k8s import GPU, Node, NodeEvent, PodEvent, PodGroupEvent
from baton.proto.placement import GangRestarted
from baton.services.gang import core
from baton.services.simcluster.world import mixes
from baton.services.simcluster.world.trace import sample_path
from tests.support.builders import gang, pod, racks

TRACE = Path(
    os.environ.get("BATON_PHILLY", Path(__file__).resolve().parents[3] / "shared/traces/philly.csv")
)
CYCLE_S = 30.0
CLASSES = ((1, 1, "1 GPU"), (2, 8, "2-8"), (9, 64, "9-64"), (65, 255, "65-255"),
           (256, 1 << 20, "256+"))  # fmt: skip


@dataclass(frozen=True)
class Job:
    name: str
    submit: float
    gpus: int
    duration: float
    priority: int = 0
    preemptible: bool = False
    team: str = ""  # the pods' baton.io/team label (Philly: the virtual cluster)
    estimate: float | None = None  # baton.io/expected-duration on its pods, if any

    def pods(self, per_node: int = 8) -> list[int]:
        if self.gpus <= per_node:
            return [self.gpus]
        return [per_node] * math.ceil(self.gpus / per_node)


@dataclass
class Outcome:
    started: dict[str, float] = field(default_factory=dict)  # job -> (last) start
    first: dict[str, float] = field(default_factory=dict)  # job -> first start (its wait)
    useful: float = 0.0  # GPU-seconds of work kept, within the window
    lost: float = 0.0  # GPU-seconds of work thrown away by preemption
    preempted: int = 0
    held: float = 0.0  # GPU-seconds partial jobs held idle (greedy)
    fragmented: list[float] = field(default_factory=list)  # per cycle: free GPUs not on idle nodes
    took: float = 0.0


# -- workloads ---------------------------------------------------------------------------


def philly(first: int = 48_000, count: int = 3_000) -> tuple[list[Job], str]:
    path, note = TRACE, f"Philly jobs {first:,}-{first + count:,}"
    if not path.exists():
        path, first, count = sample_path(), 0, min(count, 2_000)
        note = f"the bundled Philly sample, jobs 0-{count} (full trace not at {TRACE})"
    with path.open() as f:
        rows = list(csv.DictReader(f))[first : first + count]
    t0 = float(rows[0]["submit_s"])
    jobs = [
        Job(f"j{r['job_id']}", float(r["submit_s"]) - t0, int(r["num_gpus"]),
            float(r["duration_s"]), team=r.get("vc") or "")
        for r in rows
    ]  # fmt: skip
    return jobs, note


def llm_mix(seed: int = 7, hours: float = 72.0) -> list[Job]:
    """The Kalos-like mix ``baton sim --trace llm`` also runs (``simcluster.mixes``):
    evaluation jobs preemptible, pretraining gangs priority 10."""
    return [
        Job(j.job_id, j.submit_s, j.gpus, j.duration_s, team=f"team{j.team}",
            priority=10 if j.job_id.startswith("pretrain") else 0,
            preemptible=j.job_id.startswith("eval"))
        for j in mixes.llm_mix(seed, hours)
    ]  # fmt: skip


def overestimated(jobs: list[Job], seed: int = 11, most: float = 3.0) -> list[Job]:
    """Users' estimates: the true duration times a factor uniform in [1, ``most``] (users
    overestimate to stay clear of limits; never under, so no run overruns its estimate)."""
    rng = random.Random(seed)
    return [dataclasses.replace(j, estimate=j.duration * rng.uniform(1.0, most)) for j in jobs]


# -- placers -----------------------------------------------------------------------------


def run_core(
    jobs: list[Job], nodes: list[Node], policy: core.Policy, cycle_s: float = CYCLE_S
) -> Outcome:
    state = core.initial(policy)
    for n in nodes:
        core.step(state, NodeEvent(op="upsert", at=0.0, node=n), 0.0)
    by_name = {j.name: j for j in jobs}
    generation: dict[str, int] = {}
    out = Outcome()
    window = max(j.submit for j in jobs)

    def members(job: Job, t: float) -> None:
        sizes = job.pods()
        notes = {keys.PREEMPTIBLE: "true"} if job.preemptible else {}
        if job.estimate is not None:
            notes[keys.EXPECTED_DURATION] = f"{job.estimate:.0f}"
        labels = {keys.TEAM: job.team} if job.team else {}
        group, pods = gang(job.name, len(sizes), gpus=sizes[0], created_at=job.submit,
                           priority=job.priority, annotations=notes, labels=labels)  # fmt: skip
        if job.name not in generation:
            core.step(state, PodGroupEvent(op="upsert", at=t, pod_group=group), t)
        for p in pods:
            fresh = msgspec.structs.replace(p, uid=f"{p.uid}-{generation.get(job.name, 0)}")
            core.step(state, PodEvent(op="upsert", at=t, pod=fresh), t)

    def place(t: float, events: list[tuple[float, int, str, str, int]]) -> None:
        _, outputs = core.step(state, core.Tick(at=t), t)
        for o in outputs:
            if isinstance(o, GangRestarted):
                preempt(t, by_name[o.gang.split("/")[1]])
        for bind in (o for o in outputs if isinstance(o, BindGang)):
            job = by_name[bind.gang.split("/")[1]]
            out.started[job.name] = t
            out.first.setdefault(job.name, t)
            for b in bind.bindings:
                p = state.cluster.pods[f"{b.namespace}/{b.pod}"]
                running = msgspec.structs.replace(p, node_name=b.node, phase="Running")
                core.step(state, PodEvent(op="upsert", at=t, pod=running), t)
            gen = generation.get(job.name, 0)
            heapq.heappush(events, (t + job.duration, 0, "finish", job.name, gen))
        out.fragmented.append(_fragmented(
            (v.node.allocatable.get(GPU, 0), v.free.get(GPU, 0))
            for v in state.cluster.nodes.values()
        ))  # fmt: skip

    def preempt(t: float, job: Job) -> None:
        start = out.started.pop(job.name)
        out.preempted += 1
        out.lost += job.gpus * (t - start)
        out.useful -= job.gpus * max(0.0, min(t, window) - min(start, window))
        _delete(job, t)
        generation[job.name] = generation.get(job.name, 0) + 1
        members(job, t)  # its controller (or RecreatePod) makes the pods again

    def _delete(job: Job, t: float) -> None:
        for i in range(len(job.pods())):
            p = state.cluster.pods.get(f"default/{job.name}-{i}")
            if p is not None:
                core.step(state, PodEvent(op="delete", at=t, pod=p), t)

    def arrive(t: float, job: Job) -> None:
        members(job, t)

    def finish(t: float, job: Job) -> None:
        _delete(job, t)

    started = time.perf_counter()
    _simulate(jobs, arrive=arrive, finish=finish, place=place, generation=generation,
              cycle_s=cycle_s)  # fmt: skip
    out.took = time.perf_counter() - started
    for name, start in out.started.items():
        job = by_name[name]
        out.useful += job.gpus * max(0.0, min(start + job.duration, window) - min(start, window))
    return out


def run_greedy(jobs: list[Job], nodes: list[Node], cycle_s: float = CYCLE_S) -> Outcome:
    """Each pod alone on the least allocated node, in arrival order; a job starts when
    its last pod is bound, and its bound pods hold their GPUs idle until then."""
    free = {n.name: n.allocatable[GPU] for n in nodes}
    size = dict(free)
    by_name = {j.name: j for j in jobs}
    pending: list[tuple[str, int, int]] = []
    bound: dict[str, dict[int, tuple[str, float]]] = {}
    out = Outcome()
    window = max(j.submit for j in jobs)

    def arrive(t: float, job: Job) -> None:
        pending.extend((job.name, i, g) for i, g in enumerate(job.pods()))
        bound[job.name] = {}

    def place(t: float, events: list[tuple[float, int, str, str, int]]) -> None:
        nonlocal pending
        left = []
        most = max(free.values())  # no pod asking more fits anywhere: skipped unlooked
        for name, i, g in pending:
            if g > most:
                left.append((name, i, g))
                continue
            target = max(free, key=lambda n: (free[n], n))
            free[target] -= g
            most = max(free.values())
            bound[name][i] = (target, t)
            job = by_name[name]
            if len(bound[name]) == len(job.pods()):
                out.started[name] = out.first[name] = t
                out.held += sum(
                    job.pods()[k] * (min(t, window) - min(s, window))
                    for k, (_, s) in bound[name].items()
                )
                out.useful += job.gpus * max(0.0, min(t + job.duration, window) - min(t, window))
                heapq.heappush(events, (t + job.duration, 0, "finish", name, 0))
        pending = left
        out.fragmented.append(_fragmented((size[n], free[n]) for n in free))

    def finish(t: float, job: Job) -> None:
        for k, (node_name, _) in bound.pop(job.name).items():
            free[node_name] += job.pods()[k]

    started = time.perf_counter()
    _simulate(jobs, arrive=arrive, finish=finish, place=place, generation={}, cycle_s=cycle_s)
    out.took = time.perf_counter() - started
    for name, pods in bound.items():  # partial jobs that never started held GPUs to the end
        if name not in out.started:
            out.held += sum(
                by_name[name].pods()[k] * max(0.0, window - s) for k, (_, s) in pods.items()
            )
    return out


def _fragmented(nodes: object) -> float:
    """The share of free GPUs that are not on a wholly free node."""
    free = scattered = 0
    for total, idle in nodes:  # type: ignore[attr-defined]
        idle = max(0, min(total, idle))
        free += idle
        if idle < total:
            scattered += idle
    return scattered / free if free else 0.0


def _simulate(
    jobs: list[Job], *, arrive: Callable[..., None], finish: Callable[..., None],
    place: Callable[..., None], generation: dict[str, int], cycle_s: float = CYCLE_S,
) -> None:  # fmt: skip
    events: list[tuple[float, int, str, str, int]] = [
        (j.submit, 1, "submit", j.name, 0) for j in jobs
    ]
    heapq.heapify(events)
    by_name = {j.name: j for j in jobs}
    while events:
        t = math.ceil(events[0][0] / cycle_s) * cycle_s
        while events and events[0][0] <= t:
            _, _, kind, name, gen = heapq.heappop(events)
            if kind == "submit":
                arrive(t, by_name[name])
            elif gen == generation.get(name, 0):  # a preempted run's end is no end
                finish(t, by_name[name])
        place(t, events)


# -- results -----------------------------------------------------------------------------


def row(label: str, jobs: list[Job], out: Outcome, gpus: int) -> str:
    window = max(j.submit for j in jobs)
    cells = [f"{label} ({out.took:.0f} s)", f"{out.useful / (gpus * window):.1%}"]
    for low, high, _ in CLASSES:
        waits = sorted(
            (out.first[j.name] - j.submit) / 60
            for j in jobs
            if low <= j.gpus <= high and j.name in out.first
        )
        if not any(low <= j.gpus <= high for j in jobs):
            cells.append("-")
            continue
        never = sum(1 for j in jobs if low <= j.gpus <= high and j.name not in out.first)
        p50 = statistics.median(waits) if waits else math.nan
        p95 = waits[int(len(waits) * 0.95)] if waits else math.nan
        cells.append(f"{p50:.0f} / {p95:.0f}" + (f" ({never} never)" if never else ""))
    cells.append(f"{out.preempted} / {out.lost / 3600:,.0f}")
    cells.append(f"{out.held / (gpus * window):.1%}")
    frag = statistics.mean(out.fragmented) if out.fragmented else 0.0
    cells.append(f"{frag:.0%}")
    return "| " + " | ".join(cells) + " |"


def header() -> str:
    classes = " | ".join(f"{name} wait p50 / p95 min" for _, _, name in CLASSES)
    return (
        f"| placer | GPU utilisation | {classes} | preempted / GPU-h lost "
        "| GPUs held idle by partial jobs | free GPUs scattered |\n"
        "|---|---:|" + "---:|" * (len(CLASSES) + 3)
    )


OFF = {"backfill_estimates": False}  # the rows of before EASY backfill
STRICT = core.Policy(strict_fifo=True, preemption=False, defrag_moves_per_hour=0, **OFF)
BEFORE = core.Policy(preemption=False, defrag_moves_per_hour=0, **OFF)
NOW = core.Policy(**OFF)  # preemption and defragmentation, no EASY backfill
STARVATION = core.Policy(reserve_after_s=1800.0, **OFF)
EASY = core.Policy(learn_estimates=True)  # EASY backfill, learned estimates (off by default)
NO_LOANS = core.Policy(backfill_loans=False, learn_estimates=True)  # the head waits for them
# EASY, and one-pod gangs moved back in the queue by 0.25 x expected GPU-s, at most 3 h
SHORTEST = core.Policy(learn_estimates=True, shortest_first_s=3 * 3600.0)


def compare(
    jobs: list[Job], nodes: list[Node], *, only: str = "", cycle_s: float = CYCLE_S
) -> None:
    """``only``: a comma-separated subset of the placers' keys (all when empty);
    ``cycle_s``: trace seconds between cycles."""
    gpus = sum(n.allocatable[GPU] for n in nodes)
    print(header())
    told = overestimated(jobs)
    placers: list[tuple[str, str, Callable[[], Outcome]]] = [
        ("strict", "strict FIFO", lambda: run_core(jobs, nodes, STRICT, cycle_s)),
        ("before", "before: head reserves at once, backfill",
         lambda: run_core(jobs, nodes, BEFORE, cycle_s)),
        ("now", "before EASY: + preemption + defragmentation",
         lambda: run_core(jobs, nodes, NOW, cycle_s)),
        ("starvation", "before EASY, head reserves after 30 min",
         lambda: run_core(jobs, nodes, STARVATION, cycle_s)),
        ("easy", "EASY, learned estimates (p90 of the team's last 50 runs of that size)",
         lambda: run_core(jobs, nodes, EASY, cycle_s)),
        ("easy-user", "EASY, users' estimates (true x U(1, 3))",
         lambda: run_core(told, nodes, EASY, cycle_s)),
        ("easy-noloans", "EASY, learned estimates, no loans",
         lambda: run_core(jobs, nodes, NO_LOANS, cycle_s)),
        ("easy-user-noloans", "EASY, users' estimates, no loans",
         lambda: run_core(told, nodes, NO_LOANS, cycle_s)),
        ("sjf", "EASY + shortest expected work first (3 h), learned estimates",
         lambda: run_core(jobs, nodes, SHORTEST, cycle_s)),
        ("sjf-user", "EASY + shortest expected work first (3 h), users' estimates",
         lambda: run_core(told, nodes, SHORTEST, cycle_s)),
        ("greedy", "pod-by-pod greedy", lambda: run_greedy(jobs, nodes, cycle_s)),
    ]  # fmt: skip
    wanted = set(only.split(",")) if only else {key for key, _, _ in placers}
    for key, label, run in placers:
        if key in wanted:
            print(row(label, jobs, run(), gpus), flush=True)


# -- decision time with a long queue -----------------------------------------------------


def decision_time(queued: int = 10_000, *, tuned: bool = True) -> tuple[float, float, float]:
    """One cycle placing a 1,024-pod gang (priority 10) on 7,500 nodes (40% busy) while
    ``queued`` gangs (1-8 pods, priority 0) wait that cannot fit now (the cluster has
    no room left once the big gang is placed: they are rejected on totals). The collector
    runs as in ``baton gang`` (``libs.runtime.tune_gc``), or with CPython's defaults."""
    before = gc.get_threshold()
    if tuned:
        tune_gc()
    try:
        return _decision_time(queued)
    finally:
        gc.set_threshold(*before)


def _decision_time(queued: int) -> tuple[float, float, float]:
    nodes = racks(zones=3, blocks=10, racks=25, nodes=10)
    state = core.initial()
    rng = random.Random(1)
    for n in nodes:
        core.step(state, NodeEvent(op="upsert", at=0.0, node=n), 0.0)
        if rng.random() < 0.4:
            p = pod(f"bg-{n.name}", gpus=8, node_name=n.name, scheduler="other")
            core.step(state, PodEvent(op="upsert", at=0.0, pod=p), 0.0)
    free_nodes = sum(1 for v in state.cluster.nodes.values() if v.free.get(GPU, 0) >= 8)
    filler, members = gang("filler", free_nodes - 1024, created_at=0.0)
    core.step(state, PodGroupEvent(op="upsert", at=0.0, pod_group=filler), 0.0)
    for p in members:
        core.step(state, PodEvent(op="upsert", at=0.0, pod=p), 0.0)
    _, outputs = core.step(state, core.Tick(at=0.5), 0.5)
    for bind in (o for o in outputs if isinstance(o, BindGang)):
        for b in bind.bindings:
            p = state.cluster.pods[f"default/{b.pod}"]
            running = msgspec.structs.replace(p, node_name=b.node, phase="Running")
            core.step(state, PodEvent(op="upsert", at=0.5, pod=running), 0.5)
    for i in range(queued):
        group, members = gang(f"q{i}", rng.choice((1, 1, 2, 4, 8)), created_at=1.0)
        core.step(state, PodGroupEvent(op="upsert", at=1.0, pod_group=group), 1.0)
        for p in members:
            core.step(state, PodEvent(op="upsert", at=1.0, pod=p), 1.0)
    big, members = gang("big", 1024, priority=10, created_at=1.0)
    core.step(state, PodGroupEvent(op="upsert", at=1.0, pod_group=big), 1.0)
    for p in members:
        core.step(state, PodEvent(op="upsert", at=1.0, pod=p), 1.0)
    core.step(state, core.Tick(at=1.5), 1.5)  # warm-up: verdicts for the queue
    times = []
    for _ in range(7):
        g = state.cluster.gangs["default/big"]
        core.forget(state, g, 0.0)
        g.retry_after = 0.0
        g.changed()  # as if its pods had just arrived: nothing kept from the cycle before
        started = time.perf_counter()
        _, outputs = core.step(state, core.Tick(at=2.0), 2.0)
        times.append(time.perf_counter() - started)
        assert [b.gang for b in outputs if isinstance(b, BindGang)] == ["default/big"]
    return statistics.median(times) * 1e3, min(times) * 1e3, max(times) * 1e3


def main() -> None:
    """``BATON_SCHEDULING_PARTS`` (decision,philly,llm; philly-full: the whole trace on
    ``BATON_PHILLY_FULL_NODES`` nodes, 60 unless set, not by default) and
    ``BATON_SCHEDULING_PLACERS`` (keys of ``compare``) pick a subset; decision, philly and
    llm by default."""
    parts = set(os.environ.get("BATON_SCHEDULING_PARTS", "decision,philly,llm").split(","))
    only = os.environ.get("BATON_SCHEDULING_PLACERS", "")
    if "decision" in parts:
        decisions()
    if "philly" in parts:
        jobs, note = philly()
        nodes = racks(zones=1, blocks=1, racks=5, nodes=8)
        print(f"### {note} ({len(jobs)} jobs), {len(nodes)} nodes / {len(nodes) * 8} GPUs\n")
        compare(jobs, nodes, only=only)
    if "llm" in parts:
        mix(only)
    if "philly-full" in parts:  # every job of the trace: minutes per placer
        jobs, _ = philly(0, 1 << 30)
        # 60 nodes: 78% offered load; 48 (97%): queues of weeks, hours for the gang core.
        # A cycle every 2 trace minutes (waits here are hours to weeks): every cycle passes
        # over the whole queue, thousands of gangs in the trace's busiest weeks.
        size = int(os.environ.get("BATON_PHILLY_FULL_NODES", "60"))
        cycle_s = float(os.environ.get("BATON_PHILLY_FULL_CYCLE_S", "120"))
        per = 8 if size % 10 else 10  # nodes a rack: 48 is the 6 racks of 8 of before
        nodes = racks(zones=1, blocks=1, racks=size // per, nodes=per)
        days = max(j.submit for j in jobs) / 86_400
        demand = sum(j.gpus * j.duration for j in jobs) / (len(nodes) * 8 * days * 86_400)
        print(f"\n### The whole Philly trace ({len(jobs):,} jobs, "
              f"{days:.0f} days), {len(nodes)} nodes / {len(nodes) * 8} GPUs, offered load "
              f"{demand:.0%}, a cycle every {cycle_s:.0f} trace seconds\n")  # fmt: skip
        compare(jobs, nodes, only=only, cycle_s=cycle_s)


def decisions() -> None:
    print("### Decision time: a 1,024-pod gang, 7,500 nodes (40% busy), gangs queued\n")
    print("| gangs queued | p50 ms | min ms | max ms | goal |\n|---:|---:|---:|---:|---|")
    for queued, tuned in ((0, True), (10_000, True), (10_000, False)):  # 0: the baseline
        p50, best, worst = decision_time(queued, tuned=tuned)
        what = f"{queued:,}" if tuned else f"{queued:,}, CPython's default collector"
        print(f"| {what} | {p50:.1f} | {best:.1f} | {worst:.1f} | < 50 ms |", flush=True)
    print()


def mix(only: str) -> None:
    jobs = llm_mix()
    nodes = racks(zones=1, blocks=4, racks=4, nodes=16)
    demand = sum(j.gpus * j.duration for j in jobs) / (len(nodes) * 8 * max(j.submit for j in jobs))
    big = sum(j.gpus * j.duration for j in jobs if j.gpus >= 256) / sum(
        j.gpus * j.duration for j in jobs
    )
    print(
        f"\n### LLM-style mix: {len(jobs)} jobs over 72 h, {len(nodes)} nodes / "
        f"{len(nodes) * 8} GPUs, offered load {demand:.0%}, {big:.0%} of GPU time in "
        "gangs of 256+ GPUs\n"
    )
    compare(jobs, nodes, only=only)


if __name__ == "__main__":
    main()
