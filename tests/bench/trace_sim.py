"""Node-hours against queueing delay: a discrete-event model of an elastic GPU cluster.

Nodes have 8 GPUs. A job of 8 GPUs or more is a gang of ``ceil(gpus / 8)`` whole nodes;
a smaller job takes GPUs on one node (best fit). Jobs are placed in arrival order with
backfill (a later job that fits starts). The policies:

- ``off``: whole-gang scale-up only: each waiting job's missing nodes (after what is
  idle or already joining for earlier jobs) are asked for at once and join after
  ``provisioning_s``; a node idle for ``unneeded_s`` is removed;
- ``static``: the same, and balloons keep ``static`` idle nodes (asked for like a
  deficit, never removed);
- ``demand``: the same, with headroom = the p90 of the node counts of the multi-node
  gangs that arrived in the last hour, capped at ``cap`` nodes;
- ``piecewise``: cluster-autoscaler's way, for contrast: the shortfall is asked for
  in rounds of at most ``step`` nodes every ``round_s`` (a scale-up loop with a cap on
  nodes per loop), with a fixed overprovisioning of ``static`` nodes (its placeholder
  pods); a waiting gang whose request a round's cap cut counts as a partial scale-up;
- ``fixed N``: a fixed cluster of N nodes, no autoscaling (the overprovisioned
  baseline: sized at the elastic run's peak, and at 75% of it).

Node-hours count every node from the scale-up that asked for it (provisioning is
paid) until it is removed, up to the last arrival (the long jobs' tails after it are
left out, the same for every policy); waits are those of every job. Partial
scale-ups are counted: a scale-up asks for a whole job's missing nodes or none, so the
count is 0 by construction. The model ignores topology, failures and quotas.
"""

from __future__ import annotations

import csv
import heapq
import math
import random
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

GPUS = 8


@dataclass(frozen=True, slots=True)
class Job:
    arrive: float
    gpus: int
    duration: float

    @property
    def nodes(self) -> int:
        return math.ceil(self.gpus / GPUS) if self.gpus >= GPUS else 0  # 0: a part of one


@dataclass
class Result:
    policy: str
    node_hours: float
    waits: list[float]
    peak_nodes: int
    partial: int = 0

    def row(self) -> str:
        w = sorted(self.waits)
        p = lambda q: w[min(len(w) - 1, int(q * len(w)))] / 60  # noqa: E731
        mean = sum(w) / len(w) / 60
        return (f"| {self.policy} | {self.node_hours:,.0f} | {mean:.1f} | {p(0.5):.1f} | "
                f"{p(0.95):.1f} | {self.peak_nodes} | {self.partial} |")  # fmt: skip


@dataclass
class Sim:
    jobs: list[Job]
    policy: str = "off"
    static: int = 4
    cap: int = 8
    fixed: int = 0
    provisioning_s: float = 600.0
    unneeded_s: float = 600.0
    window_s: float = 3600.0
    step: int = 16  # piecewise: nodes asked per round at most
    round_s: float = 60.0  # piecewise: one scale-up loop
    round_at: float = -1e18
    round_asked: int = 0
    split: set[int] = field(default_factory=set)  # piecewise: jobs asked for over rounds
    free: dict[int, int] = field(default_factory=dict)  # node -> free GPUs
    idle_since: dict[int, float] = field(default_factory=dict)
    joining: list[float] = field(default_factory=list)  # heap of join times
    queue: deque[tuple[int, Job]] = field(default_factory=deque)
    recent: deque[tuple[float, int]] = field(default_factory=deque)  # (arrive, nodes) gangs
    events: list[tuple[float, int, int, object]] = field(default_factory=list)
    next_node: int = 0
    seq: int = 0
    partial: int = 0

    def push(self, at: float, kind: int, what: object) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, kind, self.seq, what))

    def add_node(self, now: float) -> None:
        self.free[self.next_node] = GPUS
        self.idle_since[self.next_node] = now
        self.push(now + self.unneeded_s, 3, None)
        self.next_node += 1

    def headroom(self, now: float) -> int:
        if self.policy in ("static", "piecewise"):
            return self.static
        if self.policy == "demand":
            while self.recent and self.recent[0][0] < now - self.window_s:
                self.recent.popleft()
            sizes = sorted(n for _, n in self.recent)
            if not sizes:
                return 0
            return min(self.cap, sizes[min(len(sizes) - 1, math.ceil(0.9 * len(sizes)) - 1)])
        return 0

    def run(self) -> Result:
        elastic = not self.policy.startswith("fixed")
        for _ in range(self.fixed):
            self.add_node(0.0)
        for i, job in enumerate(self.jobs):
            self.push(job.arrive, 1, (i, job))
        waits: list[float] = []
        node_seconds, last, peak = 0.0, 0.0, 0
        horizon = max(j.arrive for j in self.jobs)  # nodes are paid for until the last arrival
        while self.events:
            now, kind, _, what = heapq.heappop(self.events)
            total = len(self.free) + len(self.joining)
            node_seconds += total * (min(now, horizon) - min(last, horizon))
            last = now
            if kind == 1:  # arrival
                i, job = what  # type: ignore[misc]
                self.queue.append((i, job))
                if job.nodes >= 2:
                    self.recent.append((now, job.nodes))
            elif kind == 2:  # finish: give back its GPUs
                for node, gpus in what:  # type: ignore[attr-defined]
                    if node in self.free:
                        self.free[node] += gpus
                        if self.free[node] == GPUS:
                            self.idle_since[node] = now
                            self.push(now + self.unneeded_s, 3, None)
            elif kind == 4:  # a node joins
                heapq.heappop(self.joining)
                self.add_node(now)
            # kind 5: the next piecewise round; nothing to do but look again
            self.place(now, waits)
            if elastic:
                self.scale(now)
            peak = max(peak, len(self.free) + len(self.joining))
            if not self.events and self.queue:
                raise RuntimeError(f"{self.policy}: {len(self.queue)} jobs never start")
        return Result(self.policy, node_seconds / 3600, waits, peak, self.partial + len(self.split))

    def place(self, now: float, waits: list[float]) -> None:
        left: deque[tuple[int, Job]] = deque()
        idle = [n for n, f in self.free.items() if f == GPUS]
        while self.queue:
            i, job = self.queue.popleft()
            taken: list[tuple[int, int]] = []
            if job.nodes:
                if len(idle) >= job.nodes:
                    taken = [(idle.pop(), GPUS) for _ in range(job.nodes)]
            else:
                fits = [(f, n) for n, f in self.free.items() if f >= job.gpus]
                if fits:
                    _, n = min(fits)
                    taken = [(n, job.gpus)]
                    if n in idle:
                        idle.remove(n)
            if not taken:
                left.append((i, job))
                continue
            for n, g in taken:
                self.free[n] -= g
                self.idle_since.pop(n, None)
            waits.append(now - job.arrive)
            self.push(now + job.duration, 2, taken)
        self.queue = left

    def scale(self, now: float) -> None:
        idle = sum(1 for f in self.free.values() if f == GPUS)
        supply = idle + len(self.joining)
        ask = 0
        short: list[int] = []  # jobs (index) asked for, in order
        for i, job in self.queue:
            need = job.nodes or 1
            if supply >= need:
                supply -= need
            else:  # the whole gang's missing nodes, in one request
                ask += need - supply
                supply = 0
                short.append(i)
        ask += max(0, self.headroom(now) - supply)
        if self.policy == "piecewise" and ask:
            if now - self.round_at >= self.round_s:
                self.round_at, self.round_asked = now, 0
            room = self.step - self.round_asked
            if ask > room:  # the rest next round: the gangs asked for are split
                self.split.update(short)
                self.push(self.round_at + self.round_s, 5, None)
            ask = max(0, min(ask, room))
            self.round_asked += ask
        for _ in range(ask):
            at = now + self.provisioning_s
            heapq.heappush(self.joining, at)
            self.push(at, 4, None)
        keep = self.headroom(now) + sum((j.nodes or 1) for _, j in self.queue)
        removable = sorted(
            (since, n) for n, since in self.idle_since.items()
            if self.free.get(n) == GPUS and now - since >= self.unneeded_s
        )  # fmt: skip
        for _, n in removable[: max(0, idle - keep)]:
            del self.free[n]
            del self.idle_since[n]


def philly(path: Path, *, days: float, start_day: float) -> list[Job]:
    jobs = []
    with path.open() as f:
        for row in csv.DictReader(f):
            at = float(row["submit_s"]) - start_day * 86400
            if 0 <= at < days * 86400 and float(row["duration_s"] or 0) > 0:
                jobs.append(Job(at, int(row["num_gpus"]), float(row["duration_s"])))
    return jobs


def llm_mix(*, days: float, seed: int = 7) -> list[Job]:
    """Large gangs: 1..64-node jobs (mostly 8-32), a few an hour, minutes to hours."""
    rng, jobs, t = random.Random(seed), [], 0.0
    sizes, weights = (1, 2, 4, 8, 16, 32, 64), (10, 8, 10, 25, 25, 15, 7)
    while t < days * 86400:
        t += rng.expovariate(1 / 900)
        nodes = rng.choices(sizes, weights)[0]
        jobs.append(Job(t, nodes * GPUS, min(rng.lognormvariate(8.5, 1.0), 86400)))
    return jobs


def compare(name: str, jobs: list[Job], *, static: int, cap: int) -> None:
    started = time.perf_counter()
    runs = [
        Sim(jobs, "off").run(),
        Sim(jobs, "static", static=static).run(),
        Sim(jobs, "demand", cap=cap).run(),
        Sim(jobs, "piecewise", static=static).run(),
    ]
    peak = runs[0].peak_nodes
    for share in (1.0, 0.75):
        n = max(1, round(peak * share))
        result = Sim(jobs, f"fixed {n}", fixed=n).run()
        result.policy = f"fixed {n} nodes ({share:.0%} of off's peak)"
        runs.append(result)
    print(f"{name}: {len(jobs):,} jobs ({time.perf_counter() - started:.1f}s)\n")
    print("| policy | node-hours | wait mean (min) | p50 | p95 | peak nodes | partial scale-ups |")
    print("|---|---|---|---|---|---|---|")
    for r in runs:
        print(r.row())
    print()


def report(trace: Path) -> None:
    print("Provisioning 600 s, unneeded 600 s; static headroom 4 nodes; demand p90 of the "
          "last hour's multi-node gangs, cap 8 nodes.\n")  # fmt: skip
    compare("Philly, days 30-44", philly(trace, days=14, start_day=30), static=4, cap=8)
    compare("LLM-style mix, 14 days", llm_mix(days=14), static=4, cap=16)
