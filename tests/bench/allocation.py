"""GPUs allocated over a whole run, read from its recording: every change, not samples.

``bench_whole`` samples ``baton up``'s status line every 10 s. On the LLM mix the GPUs
allocated swing by a thousand within a second (a 1,024-GPU gang ends; the next is bound
a second later), so the mean of 25 such samples moves by a point or more from run to
run on sampling alone. A recording holds every pod event, so the share can be taken
over time instead: a pod's GPUs count from the event that first shows it bound and live
until the event that shows it ended, terminating or gone, the rule of ``baton up``'s
status line (``cli.view.gpu_usage``); each level counts for as long as it held.

    python -m tests.bench.allocation run.jsonl 8192    # a kept recording, 8,192 GPUs
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass

from baton.proto.k8s import GPU, PodEvent
from baton.services.cli.recording import read
from baton.services.cli.view import live


@dataclass(frozen=True, slots=True)
class Share:
    full_at: float  # seconds from the first pod event to the first moment at ``first``
    mean: float  # time-weighted share of GPUs allocated from then to the last event
    lowest: float  # the lowest share held from then on
    seconds: float  # how long "from then" lasted


def steps(events: Iterable[PodEvent]) -> list[tuple[float, int]]:
    """(time, GPUs allocated from then on), one step per event that changes the count."""
    held: dict[str, int] = {}
    total, out = 0, []
    for event in events:
        pod = event.pod
        gpus = pod.requests.get(GPU, 0)
        now = gpus if event.op != "delete" and pod.node_name and live(pod) else 0
        before = held.pop(pod.key, 0)
        if now:
            held[pod.key] = now
        if now != before:
            total += now - before
            out.append((event.at, total))
    return out


def share(levels: list[tuple[float, int]], gpus: int, *, first: float = 0.9) -> Share | None:
    """From the first moment ``first`` of ``gpus`` are allocated to the last step: the
    time-weighted mean and the lowest level; None when ``first`` is never reached."""
    if gpus <= 0 or not levels:
        return None
    start = next((i for i, (_, n) in enumerate(levels) if n >= first * gpus), None)
    if start is None:
        return None
    held = list(zip(levels[start:], levels[start + 1 :], strict=False))  # (level, next)
    area = sum(n * (after - at) for (at, n), (after, _) in held)
    span = levels[-1][0] - levels[start][0]
    lowest = min((n for (_, n), _ in held), default=levels[start][1])  # the last held 0 s
    mean = area / span / gpus if span > 0 else levels[start][1] / gpus
    return Share(levels[start][0] - levels[0][0], mean, lowest / gpus, span)


def from_recording(path: str, gpus: int) -> Share | None:
    records = read(path, types=PodEvent, tags=frozenset({"k8s.pod.v1"}))
    return share(steps(r.event for r in sorted(records, key=lambda r: r.position)), gpus)


def describe(found: Share | None) -> str:
    if found is None:
        return "90% of GPUs never allocated"
    return (f"from {found.full_at:.0f} s (90% first reached) to the end, {found.seconds:.0f} s: "
            f"time-weighted mean {found.mean:.1%}, lowest {found.lowest:.1%}")  # fmt: skip


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m tests.bench.allocation RECORDING.jsonl GPUS", file=sys.stderr)
        return 2
    print(describe(from_recording(argv[0], int(argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
