"""Recordings: JSON lines of bus events, read for ``baton replay`` and written by ``--record``.

A line is either an envelope, as ``baton replay --record`` writes it::

    {"subject": "baton.c1.k8s.pod.team-a.job7-w-0", "stream": "BATON_C1_K8S", "seq": 42,
     "hseq": 977, "data": {"type": "k8s.pod.v1", ...}}

(``stream``/``seq``: where the message was first stored, from HISTORY's
``Nats-Stream-Source`` header; ``hseq``: its HISTORY sequence, the order every service
read it in), or a bare payload, as ``baton tail --since all --json``
prints it (``{"type": "k8s.pod.v1", ...}``). Blank lines are skipped. Payload types
the replayed service does not read are skipped too, as are Kubernetes object events
out of bounds (``proto.bounds``: the live runner dead-lettered them, so its snapshot
fed the object's last good revision, as replay's does); anything else that does not
decode is an error naming the line.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgspec
import nats
from nats.aio.client import Client
from nats.js.api import DeliverPolicy

from baton.libs.bus.operator import NoBus, connect
from baton.libs.bus.streams import HISTORY
from baton.libs.runner.ordering import origin
from baton.proto import subjects
from baton.proto.bounds import impossible
from baton.proto.k8s import ObjectEvent


class RecordingError(ValueError):
    """A recording that cannot be read: names the file and line."""


@dataclass(frozen=True, slots=True)
class Record:
    line: int  # 1-based line number in the file
    subject: str  # '' for a bare payload
    stream: str  # origin stream ('' unknown)
    seq: int  # origin stream sequence (0 unknown)
    event: Any  # a decoded msgspec Struct
    hseq: int = 0  # HISTORY sequence (0 unknown: then the line number orders)

    @property
    def position(self) -> int:
        return self.hseq or self.line


class _Envelope(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    data: msgspec.Raw
    subject: str = ""
    stream: str = ""
    seq: int = 0
    hseq: int = 0


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
            hseq = env.hseq
        except msgspec.ValidationError:
            data, subject, stream, seq, hseq = line, "", "", 0, 0
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
        if isinstance(event, ObjectEvent) and impossible(event):  # type: ignore[arg-type]
            continue  # never fed live either
        yield Record(line=number, subject=subject, stream=stream, seq=seq, event=event, hseq=hseq)


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
            hseq = int(msg.metadata.sequence.stream)
            line = _Line(
                subject=msg.subject, stream=source, seq=seq, hseq=hseq, data=msgspec.Raw(msg.data)
            )
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
    try:
        return await connect(url, name="baton-replay-record")
    except NoBus as exc:
        raise RecordingError(str(exc)) from None


class _Line(msgspec.Struct, kw_only=True, omit_defaults=True):
    subject: str
    stream: str = ""
    seq: int = 0
    hseq: int = 0
    data: msgspec.Raw
