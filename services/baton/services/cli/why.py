"""``baton why NS/NAME``: why a gang (or a pod's gang) is where it is, from the bus.

It reads the object's current state (the K8S stream, as every service does at start)
and its story from HISTORY (as ``baton replay --record`` does): created, queued and
admitted, placed or not and why, bound, preempted, restarted. Then what it waits for
now and what would unblock it, in the words the reporter writes on its PodGroup
(``services.reporter.telling``)::

    gang ml/job (scheduler-plugins PodGroup): Pending, 0 of 9 members bound
      10:01:02  PodGroup created: minMember 9
      10:01:02  9 member pods created
      10:01:03  not placed: 4 of 9 members fit; need 5 more nodes with 8 nvidia.com/gpu
    waits for: 4 of 9 members fit; need 5 more nodes with 8 nvidia.com/gpu
    unblocks it: 5 more nodes with 8 nvidia.com/gpu
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import nats
from nats.js.api import DeliverPolicy

from baton.libs.bus.operator import NoBus, connect
from baton.libs.bus.streams import HISTORY, K8S
from baton.libs.view import GangView, gang_key, quorum
from baton.proto import subjects
from baton.proto.actions import ActionResult
from baton.proto.admission import GangAdmitted, GangPreempted, GangQueued, GangReleased
from baton.proto.autoscaler import ScaledUp, ScaleRefused, ScaleReverted
from baton.proto.k8s import Pod, PodEvent, PodGroup, PodGroupEvent
from baton.proto.placement import GangPlaced, GangRestarted, GangUnschedulable
from baton.services.reporter.core import telling

Story = (
    PodEvent | PodGroupEvent | GangPlaced | GangUnschedulable | GangRestarted | GangQueued
    | GangAdmitted | GangPreempted | GangReleased | ActionResult
    | ScaledUp | ScaleRefused | ScaleReverted
)  # fmt: skip
_story = msgspec.json.Decoder(Story)
SOURCES = {
    "scheduler-plugins": "scheduler-plugins PodGroup",
    "kubernetes": "upstream PodGroup",
    "volcano": "Volcano group",
    "volcano-podgroup": "Volcano PodGroup",
    "kueue": "Kueue pod group",
    "jobset": "JobSet",
}
SHOWN = 12  # story lines shown (the latest)
READ_S = 30.0  # how long reading one stream may take before why says it could not


class WhyError(Exception):
    """Nothing to explain: bad target, no bus, no such object."""


@dataclass(slots=True)
class Facts:
    key: str  # the gang: "<ns>/<group>" or "<ns>/<pod>"
    group: PodGroup | None
    pods: list[Pod]
    history: list[Any] = field(default_factory=list)  # decoded, in HISTORY order
    asked: str = ""  # the pod asked about, when a pod was


# -- what to say (pure) -------------------------------------------------------------------


def explain(facts: Facts) -> list[str]:
    gang = GangView(key=facts.key, group=facts.group, lone=_lone(facts))
    pods = {p.key: p for p in facts.pods}
    gang.pending = {p.key for p in facts.pods if not p.node_name}
    gang.bound = {p.key for p in facts.pods if p.node_name}
    need = quorum(gang, pods)
    counts = telling.counts(facts.pods)
    queued, verdict = _latest(facts.history, facts.key)
    message = telling.waiting(key=facts.key, group=facts.group, pods=facts.pods, need=need,
                              queued=queued, verdict=verdict)  # fmt: skip
    lines = []
    if facts.asked:
        lines.append(f"pod {facts.asked}: a member of gang {facts.key}")
    gone = facts.group is None and not facts.pods
    phase = telling.phase(counts, need) if need else "Pending"
    lines.append(
        f"gang {facts.key}: gone from the cluster (no PodGroup, no pods); its story:"
        if gone
        else f"gang {facts.key} ({_format(facts)}): {phase}, {counts.scheduled} of "
        f"{need or '?'} members bound, {counts.running} running"
    )
    story = list(_story_lines(facts))
    if len(story) > SHOWN:
        lines.append(f"  ... {len(story) - SHOWN} earlier")
    lines += [f"  {line}" for line in story[-SHOWN:]]
    if gone:
        return lines
    if message:
        lines.append(f"waits for: {message}")
        lines.append(f"unblocks it: {unblock(message, need=need, pods=counts, verdict=verdict)}")
    elif counts.scheduled >= max(need, 1):
        lines.append("waits for nothing: " + ("it runs" if counts.running else "it is placed"))
    elif not facts.pods:
        lines.append("waits for: its member pods (none is on the bus)")
    else:
        lines.append(
            f"waits for: placement ({counts.scheduled} of {need or '?'} members bound; no "
            "verdict on the bus yet)"
        )
    return lines


def unblock(message: str, *, need: int, pods: telling.Counts, verdict: Any) -> str:
    if message.startswith("waiting for PodGroup"):
        return "create that PodGroup (or give the pods a member count, see docs/gang.md)"
    if message.startswith("waiting for all"):
        return f"create the other {max(need - pods.pending, 0)} members (or lower minMember)"
    if message.startswith("waiting for admission"):
        return (
            "GPUs for the team: its running gangs finishing, other teams lending, or a larger "
            "quota or borrow limit in the team config"
        )
    if isinstance(verdict, GangUnschedulable):
        hints = []
        if verdict.blocked_by:
            hints.append(f"the gang ahead of it, {verdict.blocked_by}, being placed first")
        if verdict.need.nodes:
            hints.append(telling.need_text(verdict.need).removeprefix("need "))
        if verdict.fits_when_free:
            hints.append("running work finishing")
        if not hints:
            hints.append("nodes that match the pods' requests, selector, affinity and topology")
        return ", or ".join(hints)
    return "its next placement cycle"


def _latest(history: Iterable[Any], key: str) -> tuple[str, GangUnschedulable | None]:
    """The admission reason still standing and the last verdict (placement clears it)."""
    queued, verdict = "", None
    for event in history:
        if getattr(event, "gang", None) != key:
            continue
        match event:
            case GangQueued():
                queued = event.reason
            case GangAdmitted() | GangReleased():
                queued = ""
            case GangUnschedulable():
                verdict = event
            case GangPlaced() | GangRestarted():
                verdict = None
    return queued, verdict


def _story_lines(facts: Facts) -> Iterable[str]:
    members = {p.name for p in facts.pods}
    binds: set[str] = set()
    seen: set[str] = set()
    bound: set[str] = set()
    last = ""
    for event in facts.history:
        text = _line(event, facts, members, binds, seen, bound)
        if text and text != last:
            yield f"{_clock(event.at)}  {text}"
            last = text


def _line(
    event: Any, facts: Facts, members: set[str], binds: set[str], seen: set[str], bound: set[str]
) -> str:
    key = facts.key
    match event:
        case PodGroupEvent(pod_group=group) if group.key == key:
            if event.op == "delete":
                return "PodGroup deleted"
            if group.uid in seen:
                return ""
            seen.add(group.uid)
            return f"PodGroup created: minMember {group.min_member}"
        case PodEvent(pod=pod) if gang_key(pod) == key or pod.name in members:
            if event.op == "delete":
                bound.discard(pod.uid)
                return f"pod {pod.name} deleted"
            if pod.uid not in seen:
                seen.add(pod.uid)
                return "member pods created"
            if pod.node_name and pod.uid not in bound:
                bound.add(pod.uid)
                return "members bound to their nodes"
            return ""
        case GangQueued(gang=gang) if gang == key:
            return f"waiting for admission: {event.reason}"
        case GangAdmitted(gang=gang) if gang == key:
            lent = f", {event.borrowed} borrowed" if event.borrowed else ""
            return f"admitted: {event.gpus} GPUs of team {event.team!r}{lent}"
        case GangPreempted(gang=gang) if gang == key:
            return f"preempted whole for {event.for_gang} (team {event.for_team!r})"
        case GangUnschedulable(gang=gang) if gang == key:
            return f"not placed: {telling.explain(event)}"
        case GangPlaced(gang=gang) if gang == key:
            binds.add(event.action_id)
            return f"placed: {len(event.bindings)} members (attempt {event.attempt})"
        case GangRestarted(gang=gang) if gang == key and not event.node:
            return f"preempted: {event.reason}"  # taken off for room, no node failed
        case GangRestarted(gang=gang) if gang == key:
            return f"restarted: node {event.node} failed ({event.reason})"
        case ScaledUp(gang=gang) if gang == key:
            return f"pool {event.pool} asked for {event.nodes} more nodes ({event.replicas} in all)"
        case ScaleRefused(gang=gang) if gang == key:
            return f"no nodes added for it: {event.reason}"
        case ScaleReverted(gang=gang) if gang == key:
            return f"the {event.nodes} nodes asked for were taken back: {event.reason}"
        case ActionResult() if event.action_id in binds:
            error = f": {event.error}" if event.error else ""
            return f"bind {event.outcome}{error}"
    return ""


def _format(facts: Facts) -> str:
    if facts.group is not None:
        group = facts.group
        named = "volcano-podgroup" if group.volcano else "kubernetes" if group.upstream else ""
        return SOURCES[named or "scheduler-plugins"]
    refs = [p.group for p in facts.pods if p.group is not None]
    if not refs:
        return "a pod of its own"
    if refs[0].source in ("kueue", "volcano", "jobset"):
        return SOURCES[refs[0].source] + ", no PodGroup object"
    return SOURCES[refs[0].source] + " not found"


def _lone(facts: Facts) -> bool:
    return facts.group is None and all(p.group is None for p in facts.pods)


def _clock(at: float) -> str:
    return dt.datetime.fromtimestamp(at).strftime("%H:%M:%S")


# -- reading the bus ------------------------------------------------------------------------


async def gather(url: str, *, cluster: str, namespace: str, name: str) -> Facts:
    """The object's gang now (K8S) and every message about its namespace in HISTORY."""
    try:
        nc = await connect(url, name="baton-why")
    except NoBus as exc:
        raise WhyError(str(exc)) from None
    try:
        js = nc.jetstream()
        current = await _read(js, subjects.stream_name(cluster, K8S),
                              subjects.wildcard(cluster, subjects.K8S, "*", namespace, ">"),
                              last=True)  # fmt: skip
        pods = {e.pod.name: e.pod for e in current if isinstance(e, PodEvent) and e.op == "upsert"}
        groups = [e.pod_group for e in current
                  if isinstance(e, PodGroupEvent) and e.op == "upsert"]  # fmt: skip
        history = await _read(js, subjects.stream_name(cluster, HISTORY),
                              f"{subjects.PREFIX}.{cluster}.*.*.{namespace}.>")  # fmt: skip
        asked = pods.get(name) or _remembered(history, name)
        key = gang_key(asked) if asked is not None else f"{namespace}/{name}"
        group = next((g for g in groups if g.key == key), None)
        members = [p for p in pods.values() if gang_key(p) == key and p.scheduler_name == "baton"]
        if group is None and not members and not any(_about(e, key) for e in history):
            raise WhyError(f"no pod or gang {namespace}/{name} on the bus (cluster {cluster!r})")
        return Facts(key=key, group=group, pods=sorted(members, key=lambda p: p.name),
                     history=history, asked=f"{namespace}/{name}" if asked else "")  # fmt: skip
    finally:
        await nc.close()


def _remembered(history: list[Any], name: str) -> Pod | None:
    """A pod that is gone, as HISTORY last saw it."""
    seen = [e.pod for e in history if isinstance(e, PodEvent) and e.pod.name == name]
    return seen[-1] if seen else None


def _about(event: Any, key: str) -> bool:
    if isinstance(event, PodGroupEvent):
        return event.pod_group.key == key
    if isinstance(event, PodEvent):
        return gang_key(event.pod) == key
    return getattr(event, "gang", None) == key


async def _read(
    js: Any, stream: str, subject: str, *, last: bool = False, within: float = READ_S
) -> list[Any]:
    """Every message (or the last per subject) on ``subject`` in ``stream``, decoded; what
    is not part of a gang's story is skipped. All of them or :class:`WhyError`: an
    explanation of part of the state would be a guess."""
    try:
        info = await js.stream_info(stream)
    except nats.js.errors.NotFoundError as exc:
        raise WhyError(f"no stream {stream}: is Baton running for this cluster?") from exc
    if info.state.messages == 0:
        return []
    policy = DeliverPolicy.LAST_PER_SUBJECT if last else DeliverPolicy.ALL
    sub = await js.subscribe(subject, stream=stream, ordered_consumer=True, deliver_policy=policy)
    found: list[Any] = []
    read = 0
    try:
        consumer = await sub.consumer_info()
        if consumer.num_pending + consumer.delivered.consumer_seq == 0:
            return []  # nothing on the subject
        deadline = asyncio.get_running_loop().time() + within
        while True:
            left = deadline - asyncio.get_running_loop().time()
            try:
                msg = await sub.next_msg(timeout=max(left, 0.001))
            except nats.errors.TimeoutError:
                raise WhyError(
                    f"could not read the gang's state: {read} messages of {subject} read "
                    f"from {stream} in {within:g} s, more were pending; try again"
                ) from None
            read += 1
            with contextlib.suppress(msgspec.DecodeError):  # another kind of message
                found.append(_story.decode(msg.data))
            if msg.metadata.num_pending == 0:
                return found
    finally:
        await sub.unsubscribe()


def run(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="baton why", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("target", help="NAMESPACE/NAME of a pod or a gang (its PodGroup's name)")
    p.add_argument("--nats", default=os.environ.get("BATON_NATS_URL", "nats://127.0.0.1:4222"))
    p.add_argument("--cluster", default=os.environ.get("BATON_CLUSTER", "c1"))
    args = p.parse_args(argv)
    namespace, slash, name = args.target.partition("/")
    if not slash or not namespace or not name:
        p.error(f"{args.target!r}: expected NAMESPACE/NAME, e.g. team-a/job7")
    try:
        facts = asyncio.run(gather(args.nats, cluster=args.cluster, namespace=namespace,
                                   name=name))  # fmt: skip
    except WhyError as exc:
        print(f"baton why: {exc}", file=sys.stderr)
        return 1
    except (OSError, nats.errors.Error) as exc:
        print(f"baton why: cannot read the bus at {args.nats}: {exc!r}", file=sys.stderr)
        return 1
    print("\n".join(explain(facts)))
    return 0
