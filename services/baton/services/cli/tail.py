"""``baton tail SUBJECT``: pretty-print bus events as they arrive (``nats sub``, decoded).

A subject without the ``baton.`` prefix is taken inside the cluster, so
``baton tail 'k8s.pod.>'`` means ``baton.c1.k8s.pod.>``. ``--since`` reads history
from JetStream first: a duration (``10m``, ``2h``), ``all``, or ``last`` (the latest
message of every subject, i.e. current state). A subject that no one stream holds
(``'>'``, ``'*.*.team-a.>'``) is read from HISTORY, which copies them all.

Each line starts with the event's own time (its ``at``; for a message without one,
the time JetStream stored it, or when it arrived). ``--count N`` stops after N
events, history included. A closed pipe (``| head``) ends the tail quietly. A bus it
cannot read (no credentials, a lost connection) ends it with one line on stderr and
exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import re
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

import msgspec
import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import NotJSMessageError
from nats.js.api import ConsumerConfig, DeliverPolicy

from baton.libs.bus import streams
from baton.libs.bus.operator import NoBus, connect, refusal
from baton.proto import subjects

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DAY = 86400.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="baton tail", description=__doc__)
    p.add_argument("subject", nargs="?", default=">", help="subject filter (default: everything)")
    p.add_argument("--since", help="read history first: 10m | 2h | all | last")
    p.add_argument("--nats", default=os.environ.get("BATON_NATS_URL", "nats://127.0.0.1:4222"))
    p.add_argument("--cluster", default=os.environ.get("BATON_CLUSTER", "c1"))
    p.add_argument("--json", action="store_true", help="print each payload as one JSON line")
    p.add_argument("--count", type=int, help="exit after this many events")
    args = p.parse_args(argv)
    if args.since and args.since not in {"all", "last"} and not _DURATION.match(args.since):
        p.error(
            f"--since {args.since!r}: expected a duration like 30s, 10m, 2h, or 'all' or 'last'"
        )
    if args.count is not None and args.count < 1:
        p.error(f"--count {args.count}: expected a positive number of events")
    return args


def full_subject(subject: str, cluster: str) -> str:
    return subject if subject.startswith("baton.") else f"baton.{cluster}.{subject}"


def since_start(since: str, now: dt.datetime) -> dt.datetime:
    match = _DURATION.match(since)
    if not match:
        raise ValueError(f"not a duration: {since!r}")
    value, unit = match.groups()
    return now - dt.timedelta(seconds=float(value) * _UNITS[unit])


def format_event(subject: str, data: bytes, *, as_json: bool) -> str:
    """``subject  type  key=value ...`` for people; the raw JSON line with --json."""
    if as_json:
        return data.decode(errors="replace")
    try:
        payload: Any = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return f"{subject}  (not JSON, {len(data)} bytes)"
    if not isinstance(payload, dict):
        return f"{subject}  {payload!r}"
    kind = payload.pop("type", "?")
    return f"{subject}  {kind}  {_fields(payload)}"


def _fields(payload: dict[str, Any], depth: int = 0) -> str:
    parts = []
    for key, value in payload.items():
        if isinstance(value, dict) and depth == 0:
            parts.append(f"{key}{{{_fields(value, depth + 1)}}}")
        else:
            text = msgspec.json.encode(value).decode() if not isinstance(value, str) else value
            parts.append(f"{key}={text if len(text) <= 80 else text[:77] + '...'}")
    return " ".join(parts)


def event_time(data: bytes, *, stored: float | None, received: float) -> float:
    """The event's own ``at``; else when JetStream stored it; else when it arrived."""
    with contextlib.suppress(msgspec.DecodeError):
        at = msgspec.json.decode(data, type=_At).at
        if at > 0:
            return at
    return stored if stored is not None else received


class _At(msgspec.Struct):
    at: float = 0.0


class _Names(msgspec.Struct):
    streams: list[str] | None = None


def stamp(at: float, *, now: float) -> str:
    """``HH:MM:SS.mmm`` local time; older than a day: ``YYYY-MM-DD HH:MM:SS``."""
    when = dt.datetime.fromtimestamp(at)
    if now - at >= DAY:
        return when.strftime("%Y-%m-%d %H:%M:%S")
    return when.strftime("%H:%M:%S.%f")[:-3]


class Printer:
    """Writes lines until ``count`` is reached or the reader goes away; then ``done``."""

    def __init__(self, out: TextIO, *, count: int | None) -> None:
        self.out = out
        self.count = count
        self.printed = 0
        self.closed = False  # the reader went away (a closed pipe)
        self.done = asyncio.Event()

    def write(self, line: str) -> None:
        if self.done.is_set():
            return  # more arrived before the tail stopped: not asked for
        try:
            self.out.write(line + "\n")
            self.out.flush()
        except BrokenPipeError:
            self.closed = True
            self.done.set()
            return
        self.printed += 1
        if self.count is not None and self.printed >= self.count:
            self.done.set()


def line_for(msg: Msg, *, as_json: bool, now: float) -> str:
    line = format_event(msg.subject, msg.data, as_json=as_json)
    if as_json:  # --json stays pure JSON lines, for jq and baton replay --from
        return line
    stored = None
    with contextlib.suppress(NotJSMessageError):
        stored = msg.metadata.timestamp.timestamp()
    return f"{stamp(event_time(msg.data, stored=stored, received=now), now=now)} {line}"


def run(argv: list[str]) -> int:
    args = parse_args(argv)
    printer = Printer(sys.stdout, count=args.count)
    code = 0
    with contextlib.suppress(KeyboardInterrupt):
        code = asyncio.run(tail(args, printer))
    if printer.closed:
        # Python flushes stdout again at exit; point it at /dev/null so a reader that
        # went away (| head) costs no "Exception ignored" message.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code


async def tail(args: argparse.Namespace, printer: Printer) -> int:
    subject = full_subject(args.subject, args.cluster)

    async def on_message(msg: Msg) -> None:
        now = dt.datetime.now(dt.UTC).timestamp()
        printer.write(line_for(msg, as_json=args.json, now=now))

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, printer.done.set)
    problems: list[str] = []

    def stop(problem: str) -> None:
        problems.append(problem)
        printer.done.set()

    def lost() -> None:
        if not printer.done.is_set():  # not our own close
            stop(f"lost NATS at {args.nats}")

    try:
        nc = await connect(args.nats, name="baton-tail", on_error=stop, on_closed=lost)
    except NoBus as exc:
        print(f"baton tail: {exc}", file=sys.stderr)
        return 1
    try:
        if args.since:
            js = nc.jetstream()
            stream = await _stream_for(nc, subject, cluster=args.cluster)
            config = consumer_config(args.since, now=dt.datetime.now(dt.UTC))
            await js.subscribe(subject, cb=on_message, ordered_consumer=True, stream=stream,
                               config=config)  # fmt: skip
        else:
            await follow_live(nc, subject, on_message, cluster=args.cluster)
        await printer.done.wait()
    except nats.js.errors.NotFoundError:
        print(f"baton tail: no stream holds {subject!r} (is Baton running?)", file=sys.stderr)
        return 1
    except (nats.errors.Error, TimeoutError) as exc:  # e.g. JetStream refused to this user
        problems.append(refusal(args.nats, exc))
    finally:
        await nc.close()
    if problems and not printer.closed:
        print(f"baton tail: {problems[0]}", file=sys.stderr)
        return 1
    return 0


async def follow_live(
    nc: NATS, subject: str, on_message: Callable[[Msg], Awaitable[None]], *, cluster: str
) -> None:
    """Messages on ``subject`` from now on. Actions come from their stream (an ordered
    consumer delivering to this client's inbox): nobody may subscribe to action subjects
    themselves, or a push consumer could deliver anything there and the actions stream
    would keep it (docs/security.md)."""
    actions = subjects.overlap(subject, subjects.wildcard(cluster, subjects.ACTION, ">"))
    if actions is None:
        await nc.subscribe(subject, cb=on_message)
        return

    async def not_an_action(msg: Msg) -> None:  # (without auth the server sends them too)
        if not subjects.matches(actions, msg.subject):
            await on_message(msg)

    if actions != subject:
        await nc.subscribe(subject, cb=not_an_action)
    new = ConsumerConfig(deliver_policy=DeliverPolicy.NEW)
    stream = subjects.stream_name(cluster, streams.ACTIONS)
    await nc.jetstream().subscribe(
        actions, cb=on_message, ordered_consumer=True, config=new, stream=stream
    )


async def _stream_for(nc: NATS, subject: str, *, cluster: str) -> str:
    """The one stream holding ``subject``, or HISTORY when several hold parts of it.

    The JetStream API lists every stream whose subjects overlap the filter (nats-py's
    ``find_stream_name_by_subject`` keeps only the first)."""
    request = msgspec.json.encode({"subject": subject})
    reply = await nc.request("$JS.API.STREAM.NAMES", request, timeout=5.0)
    found: list[str] = msgspec.json.decode(reply.data, type=_Names).streams or []
    if len(found) == 1:
        return found[0]
    if not found:
        raise nats.js.errors.NotFoundError
    history = subjects.stream_name(cluster, "history")
    await nc.jetstream().stream_info(history)  # NotFoundError: no Baton streams here
    return history


def consumer_config(since: str, *, now: dt.datetime) -> ConsumerConfig:
    """Where the history starts. nats-py takes a start time only in the consumer config."""
    if since == "all":
        return ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    if since == "last":
        return ConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT)
    return ConsumerConfig(
        deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=since_start(since, now)
    )
