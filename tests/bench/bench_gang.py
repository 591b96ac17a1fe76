"""Gang placement benchmarks (``python -m tests.bench gang``).

1. Decision time of one cycle placing a 64/256/1,024-pod gang (8 GPUs a pod) on
   7,500 nodes (3 zones x 10 blocks x 25 racks x 10 nodes), 40% of nodes busy; then
   the same with DRA: every node publishes simcluster's slices and each pod claims its
   GPUs and NICs as 8 pairs under one PCIe root, allocated in the same decision.
2. Racks spanned per placement vs the fewest that could have held the gang, over
   a stream of mixed-size gangs filling that cluster.
3. The Philly trace (jobs 48,000-51,000: 52 h, 31% of GPU-time in multi-node jobs)
   in a pure discrete-event harness of 40 8-GPU nodes (offered load ~117%): Baton's
   core vs a pod-by-pod greedy placer (kube-scheduler-like: each pod alone, on the
   least allocated node).
   Trace time is simulated, so any speed-up gives the same numbers.
"""

from __future__ import annotations

import csv
import heapq
import math
import os
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from baton.libs.kube import dra as kube_dra
from baton.proto.actions import MAX_ACTION_BYTES, BindGang
from baton.proto.dra import DeviceClass, DeviceConstraint, DeviceRequest, PodClaim, ResourceClaim
from baton.proto.k8s import (
    GPU,
    DeviceClassEvent,
    Node,
    NodeEvent,
    PodEvent,
    PodGroupEvent,
    ResourceClaimEvent,
    ResourceSliceEvent,
)
from baton.proto.placement import GangPlaced
from baton.services.gang import core
from baton.services.simcluster.world import dra
from baton.services.simcluster.world.trace import sample_path
from tests.support.builders import gang, pod, racks

TRACE = Path(
    os.environ.get("BATON_PHILLY", Path(__file__).resolve().parents[3] / "shared/traces/philly.csv")
)
CYCLE_S = 30.0  # the harness runs a placement cycle at most every 30 trace seconds


def cluster_7500() -> list[Node]:
    return racks(zones=3, blocks=10, racks=25, nodes=10)


def loaded_state(nodes: list[Node], *, busy: float, seed: int = 1) -> core.State:
    state = core.initial()
    rng = random.Random(seed)
    for n in nodes:
        core.step(state, NodeEvent(op="upsert", at=0.0, node=n), 0.0)
        if rng.random() < busy:
            p = pod(f"bg-{n.name}", gpus=8, node_name=n.name, scheduler="other")
            core.step(state, PodEvent(op="upsert", at=0.0, pod=p), 0.0)
    return state


def submit(state: core.State, name: str, size: int, *, gpus: int = 8, at: float = 0.0) -> None:
    group, members = gang(name, size, gpus=gpus, created_at=at)
    core.step(state, PodGroupEvent(op="upsert", at=at, pod_group=group), at)
    for p in members:
        core.step(state, PodEvent(op="upsert", at=at, pod=p), at)


def decision_times(*, claims: bool = False) -> list[tuple[int, float, float, float]]:
    """One cycle placing a gang of 64, 256 and 1,024 pods. ``claims``: every node also
    publishes DRA slices (8 GPUs, 8 NICs) and each pod asks its 8 GPUs through a claim
    of 8 GPU+NIC pairs under one PCIe root each, allocated in the same decision."""
    nodes = cluster_7500()
    rows = []
    for size in (64, 256, 1024):
        state = loaded_state(nodes, busy=0.4)
        if claims:
            publish_devices(state, nodes)
            submit_claiming(state, "job", size)
        else:
            submit(state, "job", size)
        times = []
        for _ in range(15):
            started = time.perf_counter()
            _, outputs = core.step(state, core.Tick(at=1.0), 1.0)
            times.append(time.perf_counter() - started)
            (bind,) = [o for o in outputs if isinstance(o, BindGang)]
            assert all(b.claims for b in bind.bindings) == claims
            assert len(msgspec.json.encode(bind)) <= MAX_ACTION_BYTES  # one NATS message
            g = state.cluster.gangs["default/job"]
            core.forget(state, g, 0.0)
            g.retry_after = 0.0
        times = times[2:]  # warm-up
        rows.append(
            (size, statistics.median(times) * 1e3, statistics.mean(times) * 1e3, max(times) * 1e3)
        )
    return rows


def publish_devices(state: core.State, nodes: list[Node], *, mig: bool = False) -> None:
    """simcluster's DRA drivers on every node, as the bridge slims them (``mig``: its
    GPUs partitionable, seven 1g.10gb MIG devices each)."""
    for cls in dra.device_classes():
        selectors = tuple(s["cel"]["expression"] for s in cls["spec"]["selectors"])
        found = DeviceClass(name=cls["metadata"]["name"], uid=cls["metadata"]["name"],
                            selectors=selectors)  # fmt: skip
        core.step(state, DeviceClassEvent(op="upsert", at=0.0, device_class=found), 0.0)
    for n in nodes:
        for raw in dra.node_slices(n.name, gpus=8, nics=8, product="H100", memory="80Gi",
                                   mig=mig):  # fmt: skip
            piece = kube_dra.resource_slice(msgspec.convert(raw, kube_dra.WireResourceSlice))
            core.step(state, ResourceSliceEvent(op="upsert", at=0.0, resource_slice=piece), 0.0)


def submit_claiming(state: core.State, name: str, size: int) -> None:
    """A gang whose pods ask for no counted GPU: each claims 8 GPU+NIC pairs."""
    group, members = gang(name, size, gpus=0)
    core.step(state, PodGroupEvent(op="upsert", at=0.0, pod_group=group), 0.0)
    requests = tuple(
        DeviceRequest(name=f"{kind}{i}", device_class=driver)
        for i in range(8)
        for kind, driver in (("gpu", dra.GPU_DRIVER), ("nic", dra.NIC_DRIVER))
    )
    pairs = tuple(
        DeviceConstraint(requests=(f"gpu{i}", f"nic{i}"), match_attribute=dra.PCIE_ROOT)
        for i in range(8)
    )
    for p in members:
        claim = ResourceClaim(namespace=p.namespace, name=f"{p.name}-devices",
                              uid=f"uid-{p.name}-devices", requests=requests,
                              constraints=pairs)  # fmt: skip
        core.step(state, ResourceClaimEvent(op="upsert", at=0.0, resource_claim=claim), 0.0)
        claiming = _replace(p, claims=(PodClaim(name="devices", claim=claim.name),))
        core.step(state, PodEvent(op="upsert", at=0.0, pod=claiming), 0.0)


def mig_stream(jobs: int = 210) -> dict[str, float]:
    """A stream of 1g.10gb jobs (lone pods, one cycle each) on 7,500 MIG-capable nodes,
    40% busy; beside it, in the same run, the same stream of 1-GPU counted jobs on the
    same cluster without DRA. Then a 64-pod gang claiming 8 whole GPUs a pod."""
    nodes = cluster_7500()
    out: dict[str, float] = {}
    for kind in ("counted", "mig"):
        state = loaded_state(nodes, busy=0.4)
        if kind == "mig":
            publish_devices(state, nodes, mig=True)
        times, given = [], []
        for i in range(jobs):
            name = f"eval-{i}"
            if kind == "mig":
                mig = DeviceRequest(name="mig", device_class=dra.MIG_CLASS)
                claim = ResourceClaim(namespace="default", name=f"{name}-mig", uid=f"u-{name}",
                                      requests=(mig,))  # fmt: skip
                core.step(state, ResourceClaimEvent(op="upsert", at=0.0, resource_claim=claim), 0.0)
                lone = _replace(pod(name, gpus=0), claims=(PodClaim(name="mig", claim=claim.name),))
            else:
                lone = pod(name, gpus=1)
            core.step(state, PodEvent(op="upsert", at=0.0, pod=lone), 0.0)
            started = time.perf_counter()
            _, outputs = core.step(state, core.Tick(at=1.0), 1.0)
            times.append(time.perf_counter() - started)
            (bind,) = [o for o in outputs if isinstance(o, BindGang)]
            (binding,) = bind.bindings
            parts = [r.device for c in binding.claims for r in c.results]
            given += [(binding.node, d.split("-mig-")[0]) for d in parts] or [(binding.node, "")]
        out[f"{kind} p50 ms"] = statistics.median(times) * 1e3
        out[f"{kind} max ms"] = max(times) * 1e3
        out[f"{kind} nodes"] = len({n for n, _ in given})
        if kind == "mig":
            out["mig gpus"] = len(set(given))
            submit_claiming(state, "train", 64)
            started = time.perf_counter()
            _, outputs = core.step(state, core.Tick(at=2.0), 2.0)
            out["gang ms"] = (time.perf_counter() - started) * 1e3
            (bind,) = [o for o in outputs if isinstance(o, BindGang)]
            out["gang on mig nodes"] = len({b.node for b in bind.bindings} & {n for n, _ in given})
    return out


def spans() -> tuple[int, float, float, float]:
    """Mixed gangs (1-64 pods) arriving one per cycle until the cluster is ~90% full."""
    nodes = cluster_7500()
    state = loaded_state(nodes, busy=0.3, seed=2)
    rng = random.Random(3)
    placed: list[GangPlaced] = []
    free = sum(1 for n in state.cluster.nodes.values() if n.free.get(GPU, 0) >= 8)
    i = 0
    while free > len(nodes) * 0.1:
        size = rng.choice((1, 2, 4, 8, 16, 32, 64))
        submit(state, f"g{i}", size, at=float(i))
        _, outputs = core.step(state, core.Tick(at=float(i) + 0.5), float(i) + 0.5)
        placed += [o for o in outputs if isinstance(o, GangPlaced)]
        for o in outputs:
            if isinstance(o, GangPlaced):
                free -= len(o.bindings)
        i += 1
    spanned = statistics.mean(p.domains for p in placed)
    minimum = statistics.mean(p.min_domains for p in placed)
    at_min = sum(p.domains == p.min_domains for p in placed) / len(placed)
    return len(placed), spanned, minimum, at_min


@dataclass(frozen=True)
class TraceJob:
    name: str
    submit: float
    gpus: int
    duration: float

    def pods(self, per_node: int = 8) -> list[int]:
        if self.gpus <= per_node:
            return [self.gpus]
        return [per_node] * math.ceil(self.gpus / per_node)


def philly(first: int = 48_000, count: int = 3_000) -> list[TraceJob]:
    """Jobs first..first+count of the full trace (BATON_PHILLY, or ../shared beside the
    clone); without it, the bundled 2,000-job sample from its start, said so aloud."""
    path = TRACE
    if not path.exists():
        path, first, count = sample_path(), 0, min(count, 2_000)
        print(f"(full trace not at {TRACE}: using the bundled sample, jobs 0-{count})")
    with path.open() as f:
        rows = list(csv.DictReader(f))[first : first + count]
    t0 = float(rows[0]["submit_s"])
    return [
        TraceJob(
            f"j{r['job_id']}", float(r["submit_s"]) - t0, int(r["num_gpus"]), float(r["duration_s"])
        )
        for r in rows
    ]


@dataclass
class Outcome:
    started: dict[str, float] = field(default_factory=dict)  # job -> start time
    held: list[tuple[float, float, int]] = field(
        default_factory=list
    )  # idle holds (from, to, gpus)


def run_baton(
    jobs: list[TraceJob], nodes: list[Node], policy: core.Policy | None = None
) -> Outcome:
    state = core.initial(policy)
    for n in nodes:
        core.step(state, NodeEvent(op="upsert", at=0.0, node=n), 0.0)
    by_name = {j.name: j for j in jobs}
    out = Outcome()

    def place(t: float, events: list[tuple[float, int, str, str]]) -> None:
        _, outputs = core.step(state, core.Tick(at=t), t)
        for bind in (o for o in outputs if isinstance(o, BindGang)):
            job = by_name[bind.gang.split("/")[1]]
            out.started[job.name] = t
            for b in bind.bindings:
                p = state.cluster.pods[f"{b.namespace}/{b.pod}"]
                bound = PodEvent(
                    op="upsert", at=t, pod=_replace(p, node_name=b.node, phase="Running")
                )
                core.step(state, bound, t)
            heapq.heappush(events, (t + job.duration, 0, "finish", job.name))

    def arrive(t: float, job: TraceJob) -> None:
        sizes = job.pods()
        group, members = gang(job.name, len(sizes), gpus=sizes[0], created_at=t)
        core.step(state, PodGroupEvent(op="upsert", at=t, pod_group=group), t)
        for p in members:
            core.step(state, PodEvent(op="upsert", at=t, pod=p), t)

    def finish(t: float, job: TraceJob) -> None:
        for i in range(len(job.pods())):
            p = state.cluster.pods[f"default/{job.name}-{i}"]
            core.step(state, PodEvent(op="delete", at=t, pod=p), t)

    _simulate(jobs, arrive=arrive, finish=finish, place=place)
    return out


def run_greedy(jobs: list[TraceJob], nodes: list[Node]) -> Outcome:
    free = {n.name: n.allocatable[GPU] for n in nodes}
    by_name = {j.name: j for j in jobs}
    pending: list[tuple[str, int, int]] = []  # (job, pod index, gpus), FIFO
    bound: dict[str, dict[int, tuple[str, float]]] = {}
    out = Outcome()

    def arrive(t: float, job: TraceJob) -> None:
        pending.extend((job.name, i, g) for i, g in enumerate(job.pods()))
        bound[job.name] = {}

    def place(t: float, events: list[tuple[float, int, str, str]]) -> None:
        nonlocal pending
        left = []
        for name, i, g in pending:
            target = max(free, key=lambda n: (free[n], n))  # least allocated
            if free[target] < g:
                left.append((name, i, g))
                continue
            free[target] -= g
            bound[name][i] = (target, t)
            job = by_name[name]
            if len(bound[name]) == len(job.pods()):
                out.started[name] = t
                out.held += [(since, t, job.pods()[k]) for k, (_, since) in bound[name].items()]
                heapq.heappush(events, (t + job.duration, 0, "finish", name))
        pending = left

    def finish(t: float, job: TraceJob) -> None:
        for k, (node_name, _) in bound.pop(job.name).items():
            free[node_name] += job.pods()[k]

    _simulate(jobs, arrive=arrive, finish=finish, place=place)
    for name, pods in bound.items():  # partial jobs that never started hold GPUs for good
        out.held += [(since, math.inf, by_name[name].pods()[k]) for k, (_, since) in pods.items()]
    return out


def _simulate(jobs: list[TraceJob], *, arrive: object, finish: object, place: object) -> None:
    events: list[tuple[float, int, str, str]] = [(j.submit, 1, "submit", j.name) for j in jobs]
    heapq.heapify(events)
    by_name = {j.name: j for j in jobs}
    while events:
        t = math.ceil(events[0][0] / CYCLE_S) * CYCLE_S  # the next cycle boundary
        while events and events[0][0] <= t:
            _, _, kind, name = heapq.heappop(events)
            (finish if kind == "finish" else arrive)(t, by_name[name])  # type: ignore[operator]
        place(t, events)  # type: ignore[operator]


def _replace(p: object, **changes: object) -> object:
    import msgspec

    return msgspec.structs.replace(p, **changes)  # type: ignore[type-var]


def summarise(jobs: list[TraceJob], out: Outcome, gpus: int) -> tuple[float, ...]:
    window = max(j.submit for j in jobs)
    useful = sum(
        j.gpus * max(0.0, min(out.started[j.name] + j.duration, window) - out.started[j.name])
        for j in jobs
        if j.name in out.started and out.started[j.name] < window
    )
    idle = sum(g * max(0.0, min(to, window) - since) for since, to, g in out.held)
    delays = sorted(out.started[j.name] - j.submit for j in jobs if j.name in out.started)
    p95 = delays[int(len(delays) * 0.95)] if delays else math.nan
    never = len(jobs) - len(out.started)
    big = [out.started[j.name] - j.submit for j in jobs if j.gpus > 8 and j.name in out.started]
    one = sorted(
        out.started[j.name] - j.submit for j in jobs if j.gpus == 1 and j.name in out.started
    )
    return (
        useful / (gpus * window),
        idle / (gpus * window),
        statistics.mean(delays) / 60,
        statistics.median(delays) / 60,
        p95 / 60,
        statistics.mean(big) / 60 if big else math.nan,
        never,
        statistics.mean(one) / 60 if one else math.nan,
        one[int(len(one) * 0.95)] / 60 if one else math.nan,
    )


def main() -> None:
    print("### Decision time, one cycle, 7,500 nodes (40% busy), 8 GPUs a pod\n")
    print("| gang pods | p50 ms | mean ms | max ms | target |")
    print("|---:|---:|---:|---:|---|")
    for size, p50, mean, worst in decision_times():
        print(f"| {size} | {p50:.1f} | {mean:.1f} | {worst:.1f} | < 50 ms |")
    print("\n### The same, each pod claiming its 8 GPUs and 8 NICs as 8 aligned pairs (DRA)\n")
    print("| gang pods | p50 ms | mean ms | max ms | target |")
    print("|---:|---:|---:|---:|---|")
    for size, p50, mean, worst in decision_times(claims=True):
        print(f"| {size} | {p50:.1f} | {mean:.1f} | {worst:.1f} | < 50 ms |")

    found = mig_stream()
    print("\n### A stream of 210 1g.10gb MIG jobs, one cycle each, same cluster (DRA, MIG)\n")
    print("| jobs | p50 ms | max ms | nodes used | GPUs broken (fewest: 30) |")
    print("|---|---:|---:|---:|---:|")
    print(f"| 1-GPU counted jobs (baseline) | {found['counted p50 ms']:.1f} | "
          f"{found['counted max ms']:.1f} | {found['counted nodes']:.0f} | - |")  # fmt: skip
    print(f"| 1g.10gb MIG jobs | {found['mig p50 ms']:.1f} | {found['mig max ms']:.1f} | "
          f"{found['mig nodes']:.0f} | {found['mig gpus']:.0f} |")  # fmt: skip
    print(f"\nThen a 64-pod gang claiming 8 whole GPUs + 8 NICs a pod: {found['gang ms']:.1f} ms, "
          f"{found['gang on mig nodes']:.0f} members on nodes with MIG jobs.")  # fmt: skip

    count, spanned, minimum, at_min = spans()
    print("\n### Racks spanned per placement (mixed 1-64-pod gangs filling 7,500 nodes)\n")
    print("| placements | mean racks spanned | mean fewest possible | placements at the minimum |")
    print("|---:|---:|---:|---:|")
    print(f"| {count} | {spanned:.2f} | {minimum:.2f} | {at_min:.0%} |")

    jobs = philly()
    nodes = racks(zones=1, blocks=1, racks=5, nodes=8)
    gpus = sum(n.allocatable[GPU] for n in nodes)
    print(
        f"\n### Philly trace, jobs 48,000-51,000 ({len(jobs)} jobs), "
        f"{len(nodes)} nodes / {gpus} GPUs\n"
    )
    print(
        "| placer | GPU utilisation | GPUs held idle by partial jobs | queueing mean min "
        "| p50 min | p95 min | multi-node jobs mean min | 1-GPU jobs mean / p95 min "
        "| jobs never started |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    placers = [
        ("baton gang core (head reserves at once)", lambda: run_baton(jobs, nodes)),
        ("baton, head reserves after 30 min", lambda: run_baton(jobs, nodes, AGED)),
        ("baton, no reservation", lambda: run_baton(jobs, nodes, NO_RESERVATION)),
        ("pod-by-pod greedy", lambda: run_greedy(jobs, nodes)),
    ]
    for label, run in placers:
        started = time.perf_counter()
        util, idle, mean, p50, p95, big, never, one, one95 = summarise(jobs, run(), gpus)
        took = time.perf_counter() - started
        print(
            f"| {label} ({took:.0f} s) | {util:.1%} | {idle:.1%} | {mean:.0f} | {p50:.1f} "
            f"| {p95:.0f} | {big:.0f} | {one:.0f} / {one95:.0f} | {never:.0f} |"
        )


AGED = core.Policy(reserve_after_s=1800.0)
NO_RESERVATION = core.Policy(reserve_after_s=math.inf)


if __name__ == "__main__":
    main()
