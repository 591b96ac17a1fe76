"""Why 1-GPU jobs wait on the Philly window of ``bench_scheduling``: the harness's run
of the gang core, with every cycle watched from outside (``core.step`` wrapped here; the
core is not changed). Per cycle that leaves a ready 1-GPU gang waiting: how many wait,
the GPUs still free after the cycle (a 1-GPU gang fits on any free GPU, so these are on
the head's reserved nodes), the GPUs running jobs hold by job size, and who got the
GPUs bound in that cycle.

    BATON_PHILLY=/work/shared/traces/philly.csv python -m tests.bench.small_waits [placer]

``placer``: a policy of ``bench_scheduling`` (``now``, default; ``sjf-user`` ...).
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

from baton.proto.actions import BindGang
from baton.proto.k8s import GPU
from baton.services.gang import core
from baton.services.gang.core import ordering
from tests.bench import bench_scheduling as bench


def _size(gpus: int) -> str:
    return "1" if gpus == 1 else "2-8" if gpus <= 8 else "9+"


def main(placer: str = "now") -> None:
    policies = {"now": bench.NOW, "easy": bench.EASY, "sjf": bench.SHORTEST,
                "easy-user": bench.EASY, "sjf-user": bench.SHORTEST}  # fmt: skip
    policy = policies[placer]
    step, seen = core.step, Counter[str]()
    hours = Counter[int]()

    def gpus(state: core.State, keys: set[str]) -> int:
        pods = state.cluster.pods
        return sum(pods[k].requests.get(GPU, 0) for k in keys if k in pods)

    def watched(state: core.State, event: Any, now: float) -> Any:
        if not isinstance(event, core.Tick):
            return step(state, event, now)
        cl = state.cluster
        ready = ordering.queue(cl, now=now, require_admission=False)
        ones = {g.key for g in ready if gpus(state, g.pending) == 1}
        state, outputs = step(state, event, now)
        bound = [o for o in outputs if isinstance(o, BindGang)]
        left = ones - {b.gang for b in bound}
        if not left:
            return state, outputs
        seen["cycles leaving a 1-GPU gang waiting"] += 1
        seen["1-GPU gang-cycles waiting"] += len(left)
        hours[int(now // 3600)] += len(left)
        seen["GPUs free after those cycles"] += sum(v.free.get(GPU, 0) for v in cl.nodes.values())
        for g in cl.gangs.values():
            if g.bound:
                seen[f"GPUs held by running {_size(gpus(state, g.bound))}-GPU jobs"] += gpus(
                    state, g.bound
                )
        for b in bound:
            took = gpus(state, {f"{x.namespace}/{x.pod}" for x in b.bindings})
            seen[f"GPUs bound to {_size(took)}-GPU jobs in those cycles"] += took
        return state, outputs

    core.step = watched
    try:
        jobs, note = bench.philly()
        if placer.endswith("-user"):
            jobs = bench.overestimated(jobs)
        nodes = bench.racks(zones=1, blocks=1, racks=5, nodes=8)
        out = bench.run_core(jobs, nodes, policy)
    finally:
        core.step = step
    print(note, placer)
    print(bench.header())
    print(bench.row(placer, jobs, out, sum(n.allocatable[GPU] for n in nodes)))
    cycles = seen["cycles leaving a 1-GPU gang waiting"] or 1
    for what, total in sorted(seen.items()):
        per = "" if what.startswith("cycles") else f" (per such cycle {total / cycles:.1f})"
        print(f"{what}: {total:,}{per}")
    print("1-GPU gang-cycles waiting by hour of the window:", sorted(hours.items()))


if __name__ == "__main__":
    main(*sys.argv[1:2])
