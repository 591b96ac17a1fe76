"""``baton replay``: feed recorded events into a fresh core, offline, and print its decisions.

    baton replay --record run.jsonl                    # copy HISTORY from the bus into a file
    baton replay --from run.jsonl                      # every decision the gang core makes
    baton replay --from run.jsonl --gang team-a/job7   # one gang's story: why did it wait?
    baton replay --from run.jsonl --compare            # exit 1 at the first decision that differs

Cores are pure and time comes in with each event (``at``), so the same inputs give
the same decisions. The gang core's inputs are object events, ``bind-gang`` results
and the ticks the gang shell records (``placement.tick``); see ``docs/replay.md``.
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

from proto.actions import ActionResult, BindGang, CreatePod, EvictGang
from proto.k8s import POD_GROUP_LABEL, NodeEvent, PodEvent, PodGroupEvent
from proto.placement import GangPlaced, GangRestarted, GangUnschedulable
from proto.ticks import RecordedTick
from services.cli import recording as rec
from services.cli.recording import Record, RecordingError
from services.cli.services import SERVICES, Service

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
    seconds: float = 0.0

    @property
    def span(self) -> float:
        times = [t for r in self.inputs if (t := getattr(r.event, "at", 0.0))]
        return max(times) - min(times) if times else 0.0


def replay(service: Service, records: Sequence[Record], *, state: Any) -> Run:
    """Feed the service's inputs, in the order its shell applied them, to ``state``."""
    inputs, order = service.inputs(records)
    run = Run(inputs=inputs, order=order)
    step, to_core = service.step, service.to_core
    is_decision, is_action = service.is_decision, service.is_action
    started = time.perf_counter()
    for fed, record in enumerate(inputs):
        event = to_core(record.event)
        state, outputs = step(state, event, float(getattr(event, "at", 0.0) or 0.0))
        for output in outputs:
            if is_decision(output):
                run.decisions.append(Output(output, record, fed))
            elif is_action(output):
                run.actions.append(Output(output, record, fed))
    run.seconds = time.perf_counter() - started
    return run


@dataclass(frozen=True, slots=True)
class Divergence:
    what: str  # "decision" or "action"
    index: int  # 0-based position in that sequence
    recorded: Record | None
    replayed: Output | None


def first_divergence(
    what: str, recorded: Sequence[Record], replayed: Sequence[Output]
) -> Divergence | None:
    """Recorded outputs (in their stream's order) against replayed ones, pairwise."""
    ordered = sorted(recorded, key=lambda r: (r.seq, r.line) if r.seq else (0, r.line))
    for i in range(max(len(ordered), len(replayed))):
        old = ordered[i] if i < len(ordered) else None
        new = replayed[i] if i < len(replayed) else None
        if old is None or new is None or old.event != new.event:
            return Divergence(what=what, index=i, recorded=old, replayed=new)
    return None


def compare(service: Service, records: Sequence[Record], run: Run) -> tuple[list[str], bool]:
    """Report lines and whether the replay matched the recording."""
    decisions = [r for r in records if service.is_decision(r.event)]
    actions = [r for r in records if service.is_action(r.event)]
    found = first_divergence("decision", decisions, run.decisions)
    lines = []
    if actions or not decisions:
        found = found or first_divergence("action", actions, run.actions)
        checked = f"{len(decisions)} decisions and {len(actions)} actions"
    else:
        checked = f"{len(decisions)} decisions (no actions recorded: dry run?)"
        lines.append("note: the recording has no actions of this service; compared decisions only")
    if found is None:
        return [*lines, f"compare: identical ({checked})"], True
    return [*lines, *explain(service, found, run)], False


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


def print_run(service: Service, run: Run, *, gang: str, out: Callable[[str], None]) -> None:
    """One line per decision and action (and, for one gang, the inputs about it), in feed
    order."""
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


def summary(run: Run, *, read_s: float, lines: int) -> str:
    wall = max(run.seconds, 1e-9)
    ticks = sum(1 for r in run.inputs if type(r.event).__name__ == "RecordedTick")
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
            return f"{pod.namespace}/{pod.labels.get(POD_GROUP_LABEL) or pod.name}"
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
            admitted = " admitted" if g.annotations.get("baton.io/admitted") == "true" else ""
            return f"podgroup {op} {g.key} minMember={g.min_member}{admitted}"
        case ActionResult():
            error = f" {event.error}" if event.error else ""
            return f"result {event.action_type} {event.action_id} {event.outcome}{error}"
        case RecordedTick():
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
    p.add_argument("--service", choices=sorted(SERVICES), default="gang")
    p.add_argument("--compare", action="store_true", help="check against recorded decisions")
    p.add_argument("--gang", default="", metavar="NS/NAME", help="only this gang's story")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    p.add_argument("--settings", help="the service's settings file (env BATON_GANG_* wins)")
    p.add_argument("--teams", default="", help="admission: the team config the service ran with")
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


def initial_state(
    service: Service, records: Sequence[Record], *, settings: str | None, teams: str
) -> tuple[Any, str]:
    """The recorded policy, unless settings (a file or the service's env) say otherwise:
    that is how a user asks "what if the policy had been ...?"."""
    prefix = service.settings_prefix
    overridden = sorted(k for k in os.environ if prefix and k.startswith(prefix))
    if settings or overridden:
        given = settings or ", ".join(overridden)
        return service.initial(settings or "", teams), f"from {given} (what-if: not as recorded)"
    recorded = service.recorded_initial(records)
    if recorded is not None:
        return recorded, "as recorded by the live service"
    teams_note = f" and the teams in {teams}" if teams else ""
    return service.initial("", teams), f"defaults{teams_note} (the recording holds none)"


def _record(args: argparse.Namespace) -> int:
    with open(args.record, "wb") as out:
        written = asyncio.run(rec.record(args.nats, cluster=args.cluster, out=out))
    print(f"recorded {written:,} events from {args.cluster} HISTORY into {args.record}")
    return 0


def _replay(args: argparse.Namespace) -> int:
    service = SERVICES[args.service]
    started = time.perf_counter()
    records = rec.read(args.source, types=service.types, tags=service.tags)
    read_s = time.perf_counter() - started
    state, policy_from = initial_state(service, records, settings=args.settings, teams=args.teams)
    print(f"policy: {policy_from}")
    result = replay(service, records, state=state)
    if not args.quiet:
        print_run(service, result, gang=args.gang, out=print)
    lines, same = compare(service, records, result) if args.compare else ([], True)
    if gap := rec.missing(records):
        lines.insert(0, gap)
    for line in lines:
        print(line)
    print(summary(result, read_s=read_s, lines=records[-1].line if records else 0))
    return 0 if same else 1
