"""``baton tail SUBJECT``: pretty-print bus events as they arrive (``nats sub``, decoded).

A subject without the ``baton.`` prefix is taken inside the cluster, so
``baton tail 'k8s.pod.>'`` means ``baton.c1.k8s.pod.>``. ``--since`` reads history
from JetStream first: a duration (``10m``, ``2h``), ``all``, or ``last`` (the latest
message of every subject, i.e. current state).
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
from typing import Any

import msgspec
import nats
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


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


def run(argv: list[str]) -> int:
    args = parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(tail(args))
    return 0


async def tail(args: argparse.Namespace) -> int:
    subject = full_subject(args.subject, args.cluster)
    done = asyncio.Event()
    seen = 0

    async def on_message(msg: Msg) -> None:
        nonlocal seen
        line = format_event(msg.subject, msg.data, as_json=args.json)
        if not args.json:  # --json stays pure JSON lines, for jq and baton replay --from
            line = f"{dt.datetime.now().strftime('%H:%M:%S.%f')[:-3]} {line}"
        print(line, flush=True)
        seen += 1
        if args.count and seen >= args.count:
            done.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, done.set)
    nc = await nats.connect(args.nats, name="baton-tail")
    try:
        if args.since:
            await nc.jetstream().subscribe(
                subject, cb=on_message, ordered_consumer=True, **_policy(args.since)
            )
        else:
            await nc.subscribe(subject, cb=on_message)
        await done.wait()
    except nats.js.errors.NotFoundError:
        print(f"baton tail: no stream holds {subject!r} (is Baton running?)", file=sys.stderr)
        return 1
    finally:
        await nc.close()
    return 0


def _policy(since: str) -> dict[str, Any]:
    if since == "all":
        return {"deliver_policy": DeliverPolicy.ALL}
    if since == "last":
        return {"deliver_policy": DeliverPolicy.LAST_PER_SUBJECT}
    start = since_start(since, dt.datetime.now(dt.UTC))
    return {"deliver_policy": DeliverPolicy.BY_START_TIME, "opt_start_time": start.isoformat()}
