"""GPUs allocated over a whole run, read from its recording: every change, not samples.

``bench_whole`` samples ``baton up``'s status line every 10 s. On the LLM mix the GPUs
allocated swing by a thousand within a second (a 1,024-GPU gang ends; the next is bound
a second later), so the mean of 25 such samples moves by a point or more from run to
run on sampling alone. A recording holds every pod event, so the share can be taken
over time instead: a pod's GPUs count from the event that first shows it bound and live
until the event that shows it ended, terminating or gone, the rule of ``baton up``'s
status line (``cli.view.gpu_usage``); each level counts for as long as it held.

``idle`` says where the rest went, over the same span: for each gang admission counts,
the GPUs it holds in admission's count and has not allocated, by where the gang is
(waiting for its placement, placed with members not all bound, a member ended and
admission has not released it yet), and the GPUs free that no admitted gang holds
(every gang waiting is larger than what is free, or nothing waits).

    python -m tests.bench.allocation run.jsonl 8192    # a kept recording, 8,192 GPUs
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass

from baton.proto.admission import GangAdmitted, GangReleased
from baton.proto.k8s import GPU, PodEvent
from baton.proto.placement import GangPlaced
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
        if change := _change(held, event):
            total += change
            out.append((event.at, total))
    return out


def _change(held: dict[str, int], event: PodEvent) -> int:
    """Keep in ``held`` the GPUs the pod has allocated after the event (bound and live,
    as ``baton up`` counts) and return how that changed."""
    pod = event.pod
    now = pod.requests.get(GPU, 0) if event.op != "delete" and pod.node_name and live(pod) else 0
    before = held.pop(pod.key, 0)
    if now:
        held[pod.key] = now
    return now - before


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


WAITING, BINDING, ENDING, UNHELD = (
    "an admitted gang waits for its placement",
    "a placed gang's members are not all bound yet",
    "a gang's member ended, admission has not released it yet",
    "free, and no admitted gang holds them",
)
Event = PodEvent | GangAdmitted | GangPlaced | GangReleased
TAGS = frozenset({"k8s.pod.v1", "admission.admitted.v1", "placement.placed.v1",
                  "admission.released.v1"})  # fmt: skip


@dataclass(slots=True)
class _Gang:
    gpus: int  # what admission counts for it
    placed: bool = False
    ended: bool = False  # one of its bound members ended or went
    allocated: int = 0

    @property
    def phase(self) -> str:
        return ENDING if self.ended else BINDING if self.placed else WAITING


def idle(events: Iterable[Event], gpus: int, *, first: float = 0.9) -> dict[str, float] | None:
    """Shares of ``gpus`` not allocated, by why (the module doc), time-weighted from the
    first moment ``first`` of them were allocated; None when that never happens."""
    gangs: dict[str, _Gang] = {}
    member: dict[str, str] = {}  # pod key -> its gang's key, from the placements
    held: dict[str, int] = {}  # pod key -> GPUs it has allocated now
    gaps = dict.fromkeys((WAITING, BINDING, ENDING), 0)  # admitted GPUs not allocated
    area = dict.fromkeys((WAITING, BINDING, ENDING, UNHELD), 0.0)
    allocated, start, last = 0, None, 0.0

    def account(gang: _Gang | None, sign: int) -> None:
        if gang is not None:
            gaps[gang.phase] += sign * max(gang.gpus - gang.allocated, 0)

    for event in events:
        if start is not None:
            dt = event.at - last
            for phase, gap in gaps.items():
                area[phase] += gap * dt
            area[UNHELD] += max(gpus - allocated - sum(gaps.values()), 0) * dt
        last = event.at
        match event:
            case GangAdmitted(gang=key, gpus=count):
                account(gangs.get(key), -1)
                gangs[key] = _Gang(count)
                account(gangs[key], +1)
            case GangReleased(gang=key):
                account(gangs.pop(key, None), -1)
            case GangPlaced(gang=key, bindings=bindings):
                member.update({f"{b.namespace}/{b.pod}": key for b in bindings})
                if (gang := gangs.get(key)) is not None:
                    account(gang, -1)
                    gang.placed = True
                    account(gang, +1)
            case PodEvent(pod=pod):
                change = _change(held, event)
                allocated += change
                gang = gangs.get(member.get(pod.key, ""))
                account(gang, -1)
                if gang is not None:
                    gang.allocated += change
                    gang.ended = gang.ended or (change < 0 and pod.key not in held)
                account(gang, +1)
        if start is None and allocated >= first * gpus:
            start = event.at
    span = last - start if start is not None else 0.0
    return {why: total / span / gpus for why, total in area.items()} if span > 0 else None


def events_of(path: str) -> list[Event]:
    """The recording's pod, admission and placement events, in HISTORY's order."""
    records = read(path, types=Event, tags=TAGS)
    return [r.event for r in sorted(records, key=lambda r: r.position)]


def from_recording(path: str, gpus: int) -> Share | None:
    return share(steps(e for e in events_of(path) if isinstance(e, PodEvent)), gpus)


def describe(found: Share | None) -> str:
    if found is None:
        return "90% of GPUs never allocated"
    return (f"from {found.full_at:.0f} s (90% first reached) to the end, {found.seconds:.0f} s: "
            f"time-weighted mean {found.mean:.1%}, lowest {found.lowest:.1%}")  # fmt: skip


def summary(path: str, gpus: int) -> str:
    """The share over time, then where the rest went: one line each."""
    events = events_of(path)
    over_time = share(steps(e for e in events if isinstance(e, PodEvent)), gpus)
    parts = [f"idle: {why}: {part:.2%}" for why, part in (idle(events, gpus) or {}).items()]
    return "\n".join([describe(over_time), *parts])


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m tests.bench.allocation RECORDING.jsonl GPUS", file=sys.stderr)
        return 2
    print(summary(argv[0], int(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
