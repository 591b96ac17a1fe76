"""Recordings: JSON lines of bus events, read for ``baton replay`` and written by ``--record``.

A line is either an envelope, as ``baton replay --record`` writes it::

    {"subject": "baton.c1.k8s.pod.team-a.job7-w-0", "stream": "BATON_C1_K8S", "seq": 42,
     "data": {"type": "k8s.pod.v1", ...}}

(``stream``/``seq``: where the message was first stored, from HISTORY's
``Nats-Stream-Source`` header), or a bare payload, as ``baton tail --since all --json``
prints it (``{"type": "k8s.pod.v1", ...}``). Blank lines are skipped. Payload types
the replayed service does not read are skipped too; anything else that does not
decode is an error naming the line.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, get_args

import msgspec
import nats
from nats.aio.client import Client
from nats.js.api import DeliverPolicy

from libs.bus.streams import HISTORY
from libs.runtime import load_settings
from proto import subjects
from proto.actions import (
    ActionResult,
    Annotate,
    BindGang,
    CreatePod,
    EvictGang,
    SetLabels,
    SetTaint,
)
from proto.admission import GangAdmitted, GangPreempted, GangQueued, GangReleased, NodeTeamChanged
from proto.k8s import EndpointSliceEvent, NodeEvent, PodEvent, PodGroupEvent
from proto.placement import GangPlaced, GangRestarted, GangUnschedulable
from proto.ticks import RecordedPolicy, RecordedTick
from services.admission import core as admission_core
from services.admission.shell import load_teams
from services.gang import core as gang_core
from services.gang.main import PREFIX, Settings


class RecordingError(ValueError):
    """A recording that cannot be read: names the file and line."""


@dataclass(frozen=True, slots=True)
class Record:
    line: int  # 1-based line number in the file
    subject: str  # '' for a bare payload
    stream: str  # origin stream ('' unknown)
    seq: int  # origin stream sequence (0 unknown)
    event: Any  # a decoded msgspec Struct


class _Envelope(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    data: msgspec.Raw
    subject: str = ""
    stream: str = ""
    seq: int = 0


class _Tagged(msgspec.Struct):
    type: str = ""


_envelope = msgspec.json.Decoder(_Envelope)
_tagged = msgspec.json.Decoder(_Tagged)


def read(path: str | Path, *, types: Any, tags: frozenset[str]) -> list[Record]:
    """Every line whose payload is one of ``types`` (a tagged union; ``tags`` its tags)."""
    try:
        with open(path, "rb") as file:
            return list(parse(file, types=types, tags=tags, name=str(path)))
    except OSError as exc:
        raise RecordingError(f"{path}: {exc.strerror or exc}") from exc


def parse(
    lines: Iterable[bytes], *, types: Any, tags: frozenset[str], name: str = "<input>"
) -> Iterator[Record]:
    payload = msgspec.json.Decoder(types)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            env = _envelope.decode(line)
            data, subject, stream, seq = bytes(env.data), env.subject, env.stream, env.seq
        except msgspec.ValidationError:
            data, subject, stream, seq = line, "", "", 0
        except msgspec.DecodeError as exc:
            raise RecordingError(f"{name}:{number}: not a JSON line ({exc})") from exc
        try:
            event = payload.decode(data)
        except msgspec.DecodeError as exc:
            tag = _tag_of(data)
            if tag is None:
                raise RecordingError(
                    f"{name}:{number}: neither an envelope {{subject, data}} nor an event "
                    "with a 'type' field"
                ) from exc
            if tag not in tags:
                continue  # another service's event
            raise RecordingError(f"{name}:{number}: bad {tag} event: {exc}") from exc
        yield Record(line=number, subject=subject, stream=stream, seq=seq, event=event)


def _tag_of(data: bytes) -> str | None:
    with contextlib.suppress(msgspec.DecodeError):
        tag = _tagged.decode(data).type
        return tag or None
    return None


def missing(records: Sequence[Record], stream_suffix: str = "_K8S") -> str:
    """A warning when the recording lacks messages of the K8S stream (''): an object
    updated again before HISTORY copied it leaves a gap, since K8S keeps one per object."""
    seqs = sorted(r.seq for r in records if r.seq and r.stream.endswith(stream_suffix))
    holes = [(a + 1, b - 1) for a, b in itertools.pairwise(seqs) if b > a + 1]
    if not holes:
        return ""
    lost = sum(b - a + 1 for a, b in holes)
    shown = ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in holes[:5])
    more = ", ..." if len(holes) > 5 else ""
    return (
        f"warning: the recording lacks {lost:,} K8S messages (seq {shown}{more}): objects "
        "updated again before HISTORY copied them; decisions may differ from the service's"
    )


def origin(headers: dict[str, str] | None) -> tuple[str, int]:
    """(stream, sequence) a HISTORY message was copied from (``Nats-Stream-Source``)."""
    source = (headers or {}).get("Nats-Stream-Source", "")
    parts = source.split(" ")
    if len(parts) >= 2 and parts[1].isdigit():
        return parts[0].split(":")[0], int(parts[1])
    return "", 0


async def record(url: str, *, cluster: str, out: IO[bytes], idle: float = 2.0) -> int:
    """Copy the cluster's HISTORY stream, in stream order, into ``out``; returns lines written.

    Stops at the message that was last when it started reading (or after ``idle``
    seconds without one).
    """
    stream = subjects.stream_name(cluster, HISTORY)
    nc = await _connect(url)
    written = 0
    try:
        js = nc.jetstream()
        last = (await js.stream_info(stream)).state.last_seq
        if last == 0:
            return 0
        sub = await js.subscribe(
            subjects.wildcard(cluster),
            stream=stream,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
        )
        while True:
            msg = await sub.next_msg(timeout=idle)
            done = msg.metadata.sequence.stream >= last
            if not msg.data.lstrip().startswith(b"{"):
                if done:
                    break
                continue  # not a JSON event; nothing Baton publishes
            source, seq = origin(msg.headers)
            line = _Line(subject=msg.subject, stream=source, seq=seq, data=msgspec.Raw(msg.data))
            out.write(msgspec.json.encode(line) + b"\n")
            written += 1
            if done:
                break
        await sub.unsubscribe()
    except nats.errors.TimeoutError:
        pass  # messages expired while reading: what was there is written
    except nats.js.errors.NotFoundError as exc:
        raise RecordingError(
            f"no stream {stream} (is Baton running for cluster {cluster}?)"
        ) from exc
    finally:
        await nc.close()
    return written


async def _connect(url: str) -> Client:
    async def quiet(exc: Exception) -> None:
        pass

    try:
        return await asyncio.wait_for(
            nats.connect(
                url,
                name="baton-replay-record",
                error_cb=quiet,
                max_reconnect_attempts=0,
                connect_timeout=2,
            ),
            timeout=5,
        )
    except (TimeoutError, OSError, nats.errors.Error) as exc:
        raise RecordingError(
            f"cannot reach NATS at {url} ({str(exc) or type(exc).__name__})"
        ) from exc


class _Line(msgspec.Struct, kw_only=True, omit_defaults=True):
    subject: str
    stream: str = ""
    seq: int = 0
    data: msgspec.Raw


# --- what each service's core reads and decides ----------------------------------------


@dataclass(frozen=True, slots=True)
class Service:
    name: str
    types: Any  # tagged union of every payload this replay reads
    initial: Callable[[str, str], Any]  # (settings file, teams file) -> fresh core state
    step: Callable[[Any, Any, float], tuple[Any, tuple[Any, ...]]]
    to_core: Callable[[Any], Any]  # recorded input -> the core's input type
    inputs: Callable[[Sequence[Record]], tuple[list[Record], str]]  # feed order, how found
    is_decision: Callable[[Any], bool]
    is_action: Callable[[Any], bool]
    # A fresh state under the policy the recording says the service ran with, if it says.
    recorded_initial: Callable[[Sequence[Record]], Any | None] = lambda records: None
    settings_prefix: str = ""  # env variables that override the recorded policy

    @property
    def tags(self) -> frozenset[str]:
        return frozenset(str(t.__struct_config__.tag) for t in get_args(self.types))


K8S_TYPES = (NodeEvent, PodEvent, PodGroupEvent, EndpointSliceEvent)
BIND_GANG = "action.bind-gang.v1"


def gang_inputs(records: Sequence[Record]) -> tuple[list[Record], str]:
    """Object events, bind-gang results and recorded ticks, in the order the shell applied
    them: each tick after exactly the inputs it had seen (its ``k8s_seq``/``result_seq``),
    the inputs between two ticks in file order."""
    k8s = [r for r in records if isinstance(r.event, K8S_TYPES)]
    results = [
        r for r in records if isinstance(r.event, ActionResult) and r.event.action_type == BIND_GANG
    ]
    ticks = [r for r in records if isinstance(r.event, RecordedTick)]
    everything = sorted(k8s + results + ticks, key=lambda r: r.line)
    if not ticks or not all(r.seq for r in everything):
        return everything, "file order (no stream sequences)"
    k8s.sort(key=lambda r: r.seq)
    results.sort(key=lambda r: r.seq)
    ticks.sort(key=lambda r: r.seq)
    feed: list[Record] = []
    i = j = 0
    for tick in ticks:
        before: list[Record] = []
        while i < len(k8s) and k8s[i].seq <= tick.event.k8s_seq:
            before.append(k8s[i])
            i += 1
        while j < len(results) and results[j].seq <= tick.event.result_seq:
            before.append(results[j])
            j += 1
        feed += sorted(before, key=lambda r: r.line)
        feed.append(tick)
    feed += sorted(k8s[i:] + results[j:], key=lambda r: r.line)
    return feed, "ticks placed by stream sequence"


def _gang_initial(settings: str, teams: str) -> Any:
    return gang_core.initial(load_settings(Settings, PREFIX, file=settings or None).policy())


def _gang_recorded_initial(records: Sequence[Record]) -> Any | None:
    policies = [r.event.policy for r in records if isinstance(r.event, RecordedPolicy)]
    return gang_core.initial(policies[0]) if policies else None


def _gang_step(state: Any, event: Any, now: float) -> tuple[Any, tuple[Any, ...]]:
    return gang_core.step(state, event, now)


def _gang_tick(event: Any) -> Any:
    return gang_core.Tick(at=event.at) if isinstance(event, RecordedTick) else event


def _admission_initial(settings: str, teams: str) -> Any:
    return admission_core.initial(load_teams(teams))


def _admission_step(state: Any, event: Any, now: float) -> tuple[Any, tuple[Any, ...]]:
    return admission_core.step(state, event, now)


def _admission_inputs(records: Sequence[Record]) -> tuple[list[Record], str]:
    k8s = [r for r in records if isinstance(r.event, NodeEvent | PodEvent | PodGroupEvent)]
    if all(r.seq for r in k8s):
        return sorted(k8s, key=lambda r: r.seq), "K8S stream order"
    return k8s, "file order (no stream sequences)"


SERVICES: dict[str, Service] = {
    "gang": Service(
        name="gang",
        types=NodeEvent
        | PodEvent
        | PodGroupEvent
        | EndpointSliceEvent
        | ActionResult
        | RecordedTick
        | RecordedPolicy
        | GangPlaced
        | GangUnschedulable
        | GangRestarted
        | BindGang
        | EvictGang
        | CreatePod,
        initial=_gang_initial,
        step=_gang_step,
        to_core=_gang_tick,
        inputs=gang_inputs,
        is_decision=lambda e: isinstance(e, GangPlaced | GangUnschedulable | GangRestarted),
        is_action=lambda e: isinstance(e, BindGang | EvictGang | CreatePod) and e.by == "gang",
        recorded_initial=_gang_recorded_initial,
        settings_prefix=PREFIX,
    ),
    "admission": Service(
        name="admission",
        types=NodeEvent
        | PodEvent
        | PodGroupEvent
        | EndpointSliceEvent
        | GangAdmitted
        | GangQueued
        | GangPreempted
        | GangReleased
        | NodeTeamChanged
        | SetTaint
        | SetLabels
        | Annotate
        | EvictGang,
        initial=_admission_initial,
        step=_admission_step,
        to_core=lambda e: e,
        inputs=_admission_inputs,
        is_decision=lambda e: isinstance(
            e, GangAdmitted | GangQueued | GangPreempted | GangReleased | NodeTeamChanged
        ),
        is_action=lambda e: (
            isinstance(e, SetTaint | SetLabels | Annotate | EvictGang) and e.by == "admission"
        ),
    ),
}
