"""``baton replay``: feed recorded events into a fresh core, offline, and print its decisions.

    baton replay --record run.jsonl                    # copy HISTORY from the bus into a file
    baton replay --from run.jsonl                      # every decision the gang core makes
    baton replay --from run.jsonl --gang team-a/job-s5 # one gang's story: why did it wait?
    baton replay --from run.jsonl --compare            # the verdict, then the first difference
                                                       # (exit 1); no listing of decisions

Cores are pure and time comes in with each event (``at``), so the same inputs give
the same decisions. Every input reached the live core through one consumer on
HISTORY (ticks and the policy included, ``proto.runner``), so a recording of HISTORY
holds exactly what it was fed, in that order; see ``docs/replay.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from baton.proto import keys
from baton.proto.actions import Action, ActionResult, BindGang, CreatePod, EvictGang, RecreatePod
from baton.proto.k8s import NodeEvent, PodEvent, PodGroupEvent
from baton.proto.placement import GangPlaced, GangRestarted, GangUnschedulable
from baton.proto.runner import Tick
from baton.services.cli import recording as rec
from baton.services.cli.recording import Record, RecordingError
from baton.services.cli.services import Segment, Service, replayable

_CONTEXT = 6  # inputs of the diverging gang shown before a divergence


@dataclass(frozen=True, slots=True)
class Output:
    event: Any
    cause: Record  # the input that produced it
    fed: int  # the cause's position in the feed


@dataclass(slots=True)
class Run:
    inputs: list[Record]
    order: str  # how the feed order was found
    decisions: list[Output] = field(default_factory=list)
    actions: list[Output] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # inputs the core raised on
    seconds: float = 0.0

    @property
    def span(self) -> float:
        times = [t for r in self.inputs if (t := getattr(r.event, "at", 0.0))]
        return max(times) - min(times) if times else 0.0


def replay(service: Service, segments: Sequence[Segment], *, policy: Any = None) -> Run:
    """Feed each run's inputs, in the order the live runner fed them, to a fresh core
    (under the run's recorded policy, or ``policy`` for a what-if)."""
    run = Run(inputs=[], order=_order(segments))
    spec = service.spec
    started = time.perf_counter()
    for segment in segments:
        state = spec.initial(policy if policy is not None else service.policy(segment.start))
        now = 0.0
        for record in segment.feed:
            fed = len(run.inputs)
            run.inputs.append(record)
            at = getattr(record.event, "at", None)
            now = float(at) if isinstance(at, int | float) else now
            try:
                state, outputs = spec.step(state, record.event, now)
            except Exception as exc:  # the live runner dead-letters and goes on; so do we
                run.errors.append(f"line {record.line}: core raised {type(exc).__name__}: {exc}")
                continue
            for output in outputs:
                if service.is_decision(output):
                    run.decisions.append(Output(output, record, fed))
                elif service.is_action(output):
                    run.actions.append(Output(output, record, fed))
    run.seconds = time.perf_counter() - started
    return run


def _order(segments: Sequence[Segment]) -> str:
    if not segments or not segments[0].as_fed:
        return "recorded order (no start record or HISTORY positions: inputs as in the file)"
    return f"as the live runner fed them ({len(segments)} run(s): snapshot, then HISTORY)"


@dataclass(frozen=True, slots=True)
class Divergence:
    what: str  # "decision" or "action"
    index: int  # 0-based position in that sequence
    recorded: Record | None
    replayed: Output | None


def first_divergence(
    what: str,
    recorded: Sequence[Record],
    replayed: Sequence[Output],
    *,
    stream_of: Callable[[Any], str] = lambda event: "",
) -> Divergence | None:
    """Recorded outputs against replayed ones, pairwise, stream by stream: a service's
    outputs to one stream are stored in the order it published them, but HISTORY copies
    two streams (EVENTS, LIMITS) in no order between them."""
    grouped = any(r.stream for r in recorded)
    old_by: dict[str, list[Record]] = {}
    for record in sorted(recorded, key=lambda r: r.position):
        old_by.setdefault(record.stream if grouped else "", []).append(record)
    new_by: dict[str, list[Output]] = {}
    for output in replayed:
        new_by.setdefault(stream_of(output.event) if grouped else "", []).append(output)
    found: list[Divergence] = []
    for stream in sorted(old_by.keys() | new_by.keys()):
        olds, news = old_by.get(stream, []), new_by.get(stream, [])
        for i in range(max(len(olds), len(news))):
            old = olds[i] if i < len(olds) else None
            new = news[i] if i < len(news) else None
            if old is None or new is None or _decided(old.event) != new.event:
                found.append(Divergence(what=what, index=i, recorded=old, replayed=new))
                break
    return min(found, key=_when, default=None)


def _decided(event: Any) -> Any:
    """A recorded output as its core decided it: the runner stamps each action with its
    lease's ``epoch`` when it routes it (the actuator's fence), which no core sets."""
    if isinstance(event, Action) and event.epoch:
        return msgspec.structs.replace(event, epoch=0)
    return event


def _when(found: Divergence) -> tuple[int, int]:
    """Earliest first: by the replayed output's input, else the recorded one's position."""
    if found.replayed is not None:
        return (found.replayed.fed, 0)
    assert found.recorded is not None
    return (1 << 62, found.recorded.position)


def compare(service: Service, segments: Sequence[Segment], run: Run) -> tuple[list[str], bool]:
    """Report lines and whether the replay matched the recording."""
    recorded = [r for segment in segments for r in segment.recorded]
    decisions = [r for r in recorded if service.is_decision(r.event)]
    actions = [r for r in recorded if service.is_action(r.event)]
    found = first_divergence("decision", decisions, run.decisions, stream_of=service.stream_of)
    lines = []
    if actions or not decisions:
        found = found or first_divergence(
            "action", actions, run.actions, stream_of=service.stream_of
        )
        checked = f"{len(decisions)} decisions and {len(actions)} actions"
    else:
        checked = f"{len(decisions)} decisions (no actions recorded: dry run?)"
        lines.append("note: the recording has no actions of this service; compared decisions only")
    if found is None:
        return [f"compare: identical ({checked})", *lines], True
    first, *rest = explain(service, found, run)
    return [first, *lines, *rest], False


def explain(service: Service, found: Divergence, run: Run) -> list[str]:
    old, new = found.recorded, found.replayed
    gang = gang_of(old.event if old is not None else new.event if new is not None else None)
    lines = [f"DIVERGED at {found.what} {found.index + 1}" + (f" (gang {gang})" if gang else "")]
    if old is None:
        lines.append("  recorded: nothing (the recording ends here)")
    else:
        lines.append(f"  recorded (line {old.line}): {_json(old.event)}")
    if new is None:
        lines.append("  replayed: nothing (the replay made no more)")
    else:
        lines.append(f"  replayed (from input line {new.cause.line}): {_json(new.event)}")
        lines.append(f"    caused by: {describe(new.cause.event)}")
    if gang:
        upto = new.fed + 1 if new is not None else len(run.inputs)
        mine = [r for r in run.inputs[:upto] if touches(r.event, gang)]
        if mine:
            lines.append(f"  last inputs about {gang} before it:")
            lines += [f"    {_line(r)}  {describe(r.event)}" for r in mine[-_CONTEXT:]]
    return lines


def print_run(service: Service, run: Run, *, gang: str, out: Callable[[str], None]) -> int:
    """One line per decision and action (and, for one gang, the inputs about it), in feed
    order; how many lines."""
    outputs = [o for o in run.decisions + run.actions if not gang or gang_of(o.event) == gang]
    lines = [(o.fed, 1, f"{_line(o.cause)}  {describe(o.event)}") for o in outputs]
    if gang:  # the inputs about it too, and the results of its actions
        ids = {o.event.id for o in outputs if isinstance(o.event, BindGang | EvictGang)}
        lines += [
            (fed, 0, f"{_line(r)}  <- {describe(r.event)}")
            for fed, r in enumerate(run.inputs)
            if touches(r.event, gang)
            or (isinstance(r.event, ActionResult) and r.event.action_id in ids)
        ]
    for _, _, line in sorted(lines, key=lambda x: (x[0], x[1])):
        out(line)
    return len(lines)


def absent(run: Run, gang: str) -> str:
    """Why ``--gang`` printed nothing: the recording says nothing of it; the gangs it does
    name, for a typo or the wrong team."""
    named = sorted({g for o in run.decisions + run.actions if (g := gang_of(o.event))})
    some = ", ".join(named[:5]) + (", ..." if len(named) > 5 else "")
    return (f"baton replay: nothing in this recording is about {gang} "
            f"({len(named)} gangs are" + (f": {some})" if named else ")"))  # fmt: skip


def summary(run: Run, *, read_s: float, lines: int) -> str:
    wall = max(run.seconds, 1e-9)
    ticks = sum(1 for r in run.inputs if isinstance(r.event, Tick))
    rate = len(run.inputs) / wall
    speed = f"{run.span / wall:,.0f}x" if run.span else "n/a"
    speed_all = f"{run.span / (wall + read_s):,.0f}x" if run.span else "n/a"
    return (
        f"replayed {len(run.inputs):,} inputs ({ticks:,} ticks; order: {run.order}) "
        f"-> {len(run.decisions):,} decisions, {len(run.actions):,} actions "
        f"in {run.seconds:.3f} s: {rate:,.0f} events/s, {speed} real time "
        f"(recorded span {run.span:,.1f} s; reading {lines:,} lines took {read_s:.3f} s, "
        f"{speed_all} with it)"
    )


def gang_of(event: Any) -> str:
    """The gang an event is about ('' if none)."""
    match event:
        case PodGroupEvent(pod_group=group):
            return group.key
        case PodEvent(pod=pod):
            return f"{pod.namespace}/{pod.gang or pod.name}"
        case CreatePod(pod=pod):
            return f"{pod.namespace}/{pod.labels.get(keys.POD_GROUP) or pod.name}"
    return str(getattr(event, "gang", ""))


def touches(event: Any, gang: str) -> bool:
    return isinstance(event, PodGroupEvent | PodEvent) and gang_of(event) == gang


def describe(event: Any) -> str:
    """One short line for a person."""
    match event:
        case NodeEvent(op=op, node=n):
            flags = [
                f for f, on in (("NotReady", not n.ready), ("cordoned", n.unschedulable)) if on
            ]
            taints = ",".join(f"{t.key}:{t.effect}" for t in n.taints)
            return f"node {op} {n.name} {' '.join(flags)}{' taints=' + taints if taints else ''}"
        case PodEvent(op=op, pod=pod):
            where = f" on {pod.node_name}" if pod.node_name else ""
            return f"pod {op} {pod.key} {pod.phase}{where}"
        case PodGroupEvent(op=op, pod_group=g):
            admitted = " admitted" if g.annotations.get(keys.ADMITTED) == "true" else ""
            return f"podgroup {op} {g.key} minMember={g.min_member}{admitted}"
        case ActionResult():
            error = f" {event.error}" if event.error else ""
            return f"result {event.action_type} {event.action_id} {event.outcome}{error}"
        case Tick():
            return "tick"
        case GangPlaced():
            where = f"{event.level}={event.domain}" if event.level else "spanning domains"
            return (
                f"placed {event.gang}: {len(event.bindings)} pods in {where}, "
                f"{event.domains} racks (min {event.min_domains}), attempt {event.attempt}"
            )
        case GangUnschedulable(need=need):
            within = f" in one {need.within}" if need.within else ""
            blocked = f", blocked by {event.blocked_by}" if event.blocked_by else ""
            return (
                f"unschedulable {event.gang}: {event.reason}; needs {need.nodes} more "
                f"nodes {_json(need.shape)}{within}{blocked}"
            )
        case GangRestarted():
            return (
                f"restarted {event.gang}: {event.reason} ({event.node}), "
                f"evicted {event.evicted}, recreated {event.recreated}"
            )
        case BindGang():
            return f"  -> bind-gang {event.gang} {event.id} ({len(event.bindings)} pods)"
        case EvictGang():
            return (
                f"  -> evict-gang {event.gang} {event.id} ({len(event.pods)} pods) {event.reason}"
            )
        case CreatePod(pod=pod):
            return f"  -> create-pod {pod.namespace}/{pod.name}"
        case RecreatePod():
            return f"  -> recreate-pod {event.namespace}/{event.pod} (uid {event.uid})"
    fields = msgspec.to_builtins(event)
    tag = fields.pop("type", type(event).__name__)
    fields.pop("at", None)
    return f"{tag} " + " ".join(
        f"{k}={v}" for k, v in fields.items() if not isinstance(v, list | dict)
    )


def _json(event: Any) -> str:
    return msgspec.json.encode(event).decode()


def _line(record: Record) -> str:
    at = float(getattr(record.event, "at", 0.0) or 0.0)
    stamp = dt.datetime.fromtimestamp(at, dt.UTC).strftime("%H:%M:%S.%f")[:-3] if at else "-"
    return f"{stamp} L{record.line}"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="baton replay", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--from", dest="source", metavar="FILE", help="recording to replay")
    what.add_argument("--record", metavar="FILE", help="write the bus's HISTORY to FILE")
    p.add_argument("--service", default="gang", help="which service's core (default gang)")
    p.add_argument("--compare", action="store_true", help="check against recorded decisions")
    p.add_argument("--gang", default="", metavar="NS/NAME", help="only this gang's story")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    p.add_argument(
        "--settings",
        help="what-if: decide under this settings file (env BATON_<SERVICE>_* too) "
        "instead of the policy the recording holds",
    )
    p.add_argument("--nats", default=os.environ.get("BATON_NATS_URL", "nats://127.0.0.1:4222"))
    p.add_argument("--cluster", default=os.environ.get("BATON_CLUSTER", "c1"))
    args = p.parse_args(argv)
    if args.gang and "/" not in args.gang:
        p.error(f"--gang {args.gang!r}: expected NAMESPACE/NAME")
    return args


def run(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        if args.record:
            return _record(args)
        return _replay(args)
    except (RecordingError, ValueError) as exc:
        print(f"baton replay: {exc}", file=sys.stderr)
        return 2


def what_if(service: Service, *, settings: str | None) -> tuple[Any, str]:
    """Settings (a file or the service's env) override the recorded policy: that is how
    a user asks "what if the policy had been ...?". None: decide as recorded."""
    overridden = service.overridden()
    if settings or overridden:
        given = settings or ", ".join(overridden)
        return service.policy_from(settings), f"from {given} (what-if: not as recorded)"
    return None, "as recorded by the live service (runner.started)"


def _record(args: argparse.Namespace) -> int:
    with open(args.record, "wb") as out:
        written = asyncio.run(rec.record(args.nats, cluster=args.cluster, out=out))
    print(f"recorded {written:,} events from {args.cluster} HISTORY into {args.record}")
    return 0


def _replay(args: argparse.Namespace) -> int:
    services = replayable(args.cluster)
    if args.service not in services:
        known = ", ".join(sorted(services))
        raise ValueError(f"--service {args.service!r}: not a replayable service (known: {known})")
    service = services[args.service]
    started = time.perf_counter()
    records = rec.read(args.source, types=service.types, tags=service.tags)
    read_s = time.perf_counter() - started
    segments = service.segments(records)
    policy, policy_from = what_if(service, settings=args.settings)
    if segments and segments[0].start is None and policy is None:  # nothing recorded
        policy, policy_from = service.policy_from(None), "defaults (the recording holds no start)"
    result = replay(service, segments, policy=policy)
    lines, same = compare(service, segments, result) if args.compare else ([], True)
    for line in lines:  # the verdict first, then what differs
        print(line)
    print(f"policy: {policy_from}")
    shown = -1
    if not args.quiet and not args.compare:  # --compare shows the differences only
        shown = print_run(service, result, gang=args.gang, out=print)
    if gap := rec.missing(records):
        print(gap)
    for error in result.errors:
        print(f"warning: {error}")
    print(summary(result, read_s=read_s, lines=records[-1].line if records else 0))
    if args.gang and shown == 0:
        print(absent(result, args.gang), file=sys.stderr)
        return 1
    return 0 if same else 1
