"""Replay benchmark (``python -m tests.bench replay``): how fast ``baton replay`` feeds a
recorded session into a fresh gang core, against the session's own span of event time.

The session is synthesized the way the live pipeline records it: 7,500 nodes
(3 zones x 10 blocks x 25 racks x 10 nodes), the Philly trace (jobs 48,000-51,000,
or the bundled sample), a gang core deciding as the shell would (a tick at the next
0.5 s boundary after any input, every tick recorded), the actuator's
result and the bridge's pod updates (bound, Running, Succeeded, deleted) fed back.
Written as the envelope lines ``baton replay --record`` writes, then read and
replayed with ``--compare``'s check. Run at the trace's pace and compressed 100x and
1,000x (a busier cluster: the same work in 1/100, 1/1,000 of the time).

Replay recomputes every decision, so its speed-up is bounded by how busy the live
core was: a placement on 7,500 nodes costs the core ~1 ms (per-shape counts kept
incrementally; ~10 ms before), whether live or replayed.
The last column replays the same inputs without the ticks (no cycles): the cost of
reading, ordering and applying events alone.
"""

from __future__ import annotations

import heapq
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from baton.proto import subjects
from baton.proto.actions import ActionResult, BindGang
from baton.proto.k8s import NodeEvent, Pod, PodEvent, PodGroupEvent
from baton.proto.runner import Tick
from baton.services.cli import recording, replay
from baton.services.cli.services import replayable
from baton.services.gang import core
from tests.bench.bench_gang import TraceJob, cluster_7500, philly
from tests.support.builders import gang

INTERVAL = 0.5  # the gang shell's default cycle interval


class Line(msgspec.Struct, kw_only=True, omit_defaults=True):
    subject: str
    stream: str
    seq: int
    data: Any


@dataclass
class Session:
    """The live side: a gang core fed as its shell would be, and everything it records."""

    state: core.State = field(default_factory=core.initial)
    lines: list[Line] = field(default_factory=list)
    seqs: dict[str, int] = field(default_factory=lambda: {"K8S": 0, "EVENTS": 0, "ACTIONS": 0})
    last_result: int = 0
    timers: list[tuple[float, int, Any]] = field(default_factory=list)
    order: int = 0
    ticks: set[float] = field(default_factory=set)  # scheduled tick times

    def put(self, stream: str, subject: str, event: Any) -> int:
        self.seqs[stream] += 1
        seq = self.seqs[stream]
        self.lines.append(Line(subject=subject, stream=f"BATON_C1_{stream}", seq=seq, data=event))
        return seq

    def later(self, at: float, what: Any) -> None:
        self.order += 1
        heapq.heappush(self.timers, (at, self.order, what))

    def feed(self, event: Any) -> None:
        """An input reaches the core and the recording (K8S or a result on EVENTS)."""
        if isinstance(event, ActionResult):
            self.last_result = self.put("EVENTS", "baton.c1.result.bind-gang.x", event)
        else:
            self.put("K8S", _k8s_subject(event), event)
        core.step(self.state, event, event.at)
        at = math.ceil(event.at / INTERVAL + 1e-9) * INTERVAL
        if at not in self.ticks:
            self.ticks.add(at)
            self.later(at, "tick")

    def tick(self, at: float, durations: dict[str, float]) -> None:
        tick = Tick(at=at, service="gang")
        self.put("EVENTS", subjects.runner("c1", "tick", "gang"), tick)
        _, outputs = core.step(self.state, tick, at)
        for out in outputs:
            stream = "ACTIONS" if isinstance(out, BindGang) else "EVENTS"
            self.put(stream, "baton.c1.x", out)
            if isinstance(out, BindGang):
                self.bound(out, at, durations[out.gang.split("/")[1]])

    def bound(self, bind: BindGang, at: float, duration: float) -> None:
        result = ActionResult(action_id=bind.id, action_type="action.bind-gang.v1", by="gang",
                              at=at + 0.01, outcome="applied")  # fmt: skip
        self.later(at + 0.01, result)
        for b in bind.bindings:
            pod = self.state.cluster.pods[f"{b.namespace}/{b.pod}"]
            for dt, phase in ((0.01, "Pending"), (1.0, "Running"), (1.0 + duration, "Succeeded")):
                changed = msgspec.structs.replace(pod, node_name=b.node, phase=phase)
                self.later(at + dt, PodEvent(op="upsert", at=at + dt, pod=changed))
            self.later(at + 1.5 + duration, ("delete", pod, b.node))


def _k8s_subject(event: Any) -> str:
    if isinstance(event, NodeEvent):
        return subjects.subject("c1", subjects.K8S, "node", event.node.name)
    obj = event.pod if isinstance(event, PodEvent) else event.pod_group
    kind = "pod" if isinstance(event, PodEvent) else "podgroup"
    return subjects.subject("c1", subjects.K8S, kind, obj.namespace, obj.name)


def synthesize(jobs: list[TraceJob], *, speed: float) -> Session:
    s = Session()
    for n in cluster_7500():
        s.feed(NodeEvent(op="upsert", at=1.0, node=n))
    durations = {j.name: max(j.duration / speed, 0.1) for j in jobs}
    for j in jobs:
        s.later(2.0 + j.submit / speed, j)
    while s.timers:
        at, _, what = heapq.heappop(s.timers)
        if what == "tick":
            s.ticks.discard(at)
            s.tick(at, durations)
        elif isinstance(what, TraceJob):
            sizes = what.pods()
            group, members = gang(what.name, len(sizes), gpus=sizes[0], created_at=at)
            s.feed(PodGroupEvent(op="upsert", at=at, pod_group=group))
            for p in members:
                s.feed(PodEvent(op="upsert", at=at, pod=p))
        elif isinstance(what, tuple):
            _, pod, node_name = what
            gone: Pod = msgspec.structs.replace(pod, node_name=node_name, phase="Succeeded")
            s.feed(PodEvent(op="delete", at=at, pod=gone))
        else:
            s.feed(what)
    return s


def measure(jobs: list[TraceJob], *, speed: float) -> tuple[Any, ...]:
    session = synthesize(jobs, speed=speed)
    service = replayable()["gang"]
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "session.jsonl"
        path.write_bytes(b"".join(msgspec.json.encode(x) + b"\n" for x in session.lines))
        started = time.perf_counter()
        records = recording.read(path, types=service.types, tags=service.tags)
        read_s = time.perf_counter() - started
    segments = service.segments(records)
    run = replay.replay(service, segments, policy=core.Policy())
    lines, same = replay.compare(service, segments, run)
    assert same, "\n".join(lines)
    ticks = sum(1 for r in run.inputs if isinstance(r.event, Tick))
    plain = [r for r in records if not isinstance(r.event, Tick)]
    no_cycles = replay.replay(service, service.segments(plain), policy=core.Policy())
    placed = sum(1 for d in run.decisions if type(d.event).__name__ == "GangPlaced")
    return (
        speed, len(records), len(run.inputs), ticks, placed, run.span, run.seconds,
        len(run.inputs) / run.seconds, run.span / run.seconds, run.span / (run.seconds + read_s),
        len(no_cycles.inputs) / no_cycles.seconds, placed / max(run.span, 1e-9),
    )  # fmt: skip


def main() -> None:
    jobs = philly()
    print(f"Philly jobs: {len(jobs):,} gangs, {sum(len(j.pods()) for j in jobs):,} pods; "
          "7,500 nodes\n")  # fmt: skip
    print(
        "| pace | lines | inputs fed | recorded ticks | gangs placed (per s) "
        "| recorded span (s) | replay (s) | inputs/s | x real time | x incl. reading "
        "| decisions identical | inputs/s without cycles |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    for speed in (1.0, 100.0, 1000.0):
        row = measure(jobs, speed=speed)
        pace = "trace pace" if speed == 1 else f"{speed:,.0f}x compressed"
        print(
            f"| {pace} | {row[1]:,} | {row[2]:,} | {row[3]:,} | {row[4]:,} ({row[11]:.2f}) "
            f"| {row[5]:,.0f} | {row[6]:.2f} | {row[7]:,.0f} | {row[8]:,.0f}x | {row[9]:,.0f}x "
            f"| yes | {row[10]:,.0f} |"
        )


if __name__ == "__main__":
    main()
