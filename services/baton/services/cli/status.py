"""``baton status``: the status ``baton up`` shows, printed once, for scripts.

Everything comes from the bus (``--nats`` or ``BATON_NATS_URL``): the objects' current
state, admission's teams and its last word on each waiting gang, each service's last
start and the last decisions. Services are listed as they last started (where and
when); whether one is up now is its ``/readyz``'s to say. Exit status 1 when the bus
holds no Baton streams for the cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import sys
import time

from baton.libs.bus.operator import NoBus, connect
from baton.services.cli.following import NoBaton, load
from baton.services.cli.view import ServiceHealth, View, summarize, teams_now, text


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="baton status", description=__doc__)
    p.add_argument("--nats", default=os.environ.get("BATON_NATS_URL", "nats://127.0.0.1:4222"))
    p.add_argument("--cluster", default=os.environ.get("BATON_CLUSTER", "c1"))
    return p.parse_args(argv)


def services(view: View) -> list[ServiceHealth]:
    """Each service as the bus knows it: its last start (services fed by the bus), or
    what its streams say (the bridge's newest object event, the actuator's consumer)."""
    details = dict(view.seen)
    for name, start in view.started.items():
        when = dt.datetime.fromtimestamp(start.at).strftime("%Y-%m-%d %H:%M:%S")
        details[name] = f"started {when}" + (f" on {start.instance}" if start.instance else "")
    return [ServiceHealth(name, alive=True, ready=True, detail=detail, probed=False)
            for name, detail in sorted(details.items())]  # fmt: skip


async def status(args: argparse.Namespace) -> str:
    try:
        nc = await connect(args.nats, name="baton-status")
    except NoBus as exc:
        raise NoBaton(str(exc)) from None
    try:
        view = View()
        await load(nc, view, cluster=args.cluster)
    finally:
        await nc.close()
    summary = summarize(
        view,
        services(view),
        title=f"baton status  {time.strftime('%Y-%m-%d %H:%M:%S')}",
        teams=teams_now(view, now=time.time()),
        endpoints=(("NATS", args.nats), ("cluster", args.cluster)),
    )
    return text(summary)


def run(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        print(asyncio.run(status(args)))
    except NoBaton as exc:
        print(f"baton status: {exc}", file=sys.stderr)
        return 1
    return 0
