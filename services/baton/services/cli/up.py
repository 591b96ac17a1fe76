"""``baton up``: the embedded default, or Baton against a real cluster and NATS.

Starts nats-server (JetStream, temporary store unless --store), simcluster (unless
--kubeconfig), every Baton service and, with --prometheus, Prometheus, as separate
processes; shows a live status (full screen on a terminal, plain lines every few
seconds otherwise) and stops everything in reverse order on Ctrl-C (or after
--duration seconds). Its run directory (store, seeds, logs) is removed then, unless
--store was given or the run failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import nats

from baton.libs.bus.connection import auth_options
from baton.services.cli.following import NoBaton, count_streams, follow, wait_for_streams
from baton.services.cli.installing import install_webhook
from baton.services.cli.monitoring import NoPrometheus
from baton.services.cli.processes import Child
from baton.services.cli.screen import Screen
from baton.services.cli.stack import SERVICES, Stack, start_all, write_endpoints
from baton.services.cli.store import Disabled
from baton.services.cli.teams import TeamRow
from baton.services.cli.view import ServiceHealth, Summary, View, summarize, teams_now, text

PLAIN_EVERY = 5.0  # seconds between status blocks when the output is not a terminal
TEAMS_EVERY = 2.0  # the team rows cost a pass over every object: at most this often


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="baton up", description=__doc__)
    p.add_argument("--nodes", type=int, default=64, help="simulated GPU nodes (default 64)")
    p.add_argument(
        "--devices", choices=("plugin", "dra"), default="plugin",
        help="simulated nodes show GPUs and NICs as device-plugin counts (default), or also "
        "as DRA ResourceSlices (pods may then claim devices; docs/gang.md)",
    )  # fmt: skip
    p.add_argument(
        "--workload",
        default="synthetic",
        help="none | synthetic | llm | philly-sample | a Philly-format trace CSV "
        "(default synthetic)",
    )
    p.add_argument(
        "--submit", choices=("pods", "controllers"),
        help="the workload's jobs as PodGroups and bare pods, or as Jobs, JobSets and "
        "MPIJobs through simcluster's controllers (default: controllers for llm, else pods)",
    )  # fmt: skip
    p.add_argument("--speed", type=float, default=60.0, help="trace time compression (default 60)")
    p.add_argument(
        "--load", type=float,
        help="synthetic: the share of the GPUs the jobs offered keep busy (simcluster's 0.9); "
        "above 1, a queue that keeps the cluster full",
    )  # fmt: skip
    p.add_argument("--cluster", default="c1", help="cluster token in subjects (default c1)")
    p.add_argument("--endpoints-file", type=Path, help="write BATON_NATS_URL and KUBECONFIG here")
    p.add_argument("--kubeconfig", type=Path, help="use this cluster instead of simcluster")
    p.add_argument("--nats", help="use this NATS server instead of starting one")
    p.add_argument("--store", type=Path, help="JetStream store directory (default: temporary)")
    p.add_argument("--teams", type=Path, help="team config for admission (default: one team)")
    p.add_argument("--services", default=",".join(SERVICES), help="which services to run")
    p.add_argument(
        "--autoscale", action="store_true",
        help="also run the autoscaler and balloons (simcluster pools grow to 2x, shrink to 1/2)",
    )  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="services decide; the actuator only logs")
    p.add_argument("--duration", type=float, help="stop by itself after this many seconds")
    p.add_argument(
        "--replicas", type=int, default=1,
        help="replicas of each service (default 1): one leads, the others stand by",
    )  # fmt: skip
    p.add_argument(
        "--prometheus", action="store_true", help="also run Prometheus scraping every service"
    )
    p.add_argument(
        "--no-auth", action="store_true",
        help="run NATS without authentication (default: one user per service, least privilege)",
    )  # fmt: skip
    args = p.parse_args(argv)
    if args.nodes < 1:
        p.error("--nodes must be at least 1")
    if args.replicas < 1:
        p.error("--replicas must be at least 1")
    if args.load is not None and args.load <= 0:
        p.error(f"--load: expected > 0, got {args.load}")
    named = {"none", "synthetic", "llm", "philly-sample"}
    if args.workload not in named and not Path(args.workload).is_file():
        p.error(f"--workload {args.workload!r}: not {', '.join(sorted(named))} or a trace file")
    return args


def run(argv: list[str]) -> int:
    args = parse_args(argv)
    stack = Stack(run_dir=Path(tempfile.mkdtemp(prefix="baton-up-")))
    code = 1
    try:
        start_all(args, stack)
        if args.endpoints_file:
            write_endpoints(args.endpoints_file, stack, cluster=args.cluster)
        print(f"baton up: NATS {stack.nats_url}  KUBECONFIG={stack.kubeconfig}  "
              f"logs in {stack.logs}", flush=True)  # fmt: skip
        if stack.prometheus:
            print(f"baton up: Prometheus {stack.prometheus}", flush=True)
        code = asyncio.run(watch(args, stack))
        return code
    except NoPrometheus as exc:
        print(f"baton up: {exc}", file=sys.stderr)
        code = 2
        return code
    except KeyboardInterrupt:
        code = 0
        return code
    finally:
        for child in reversed(stack.children):
            child.stop()
        print(f"baton up: stopped; {tidy(stack.run_dir, store=args.store, code=code)}",
              flush=True)  # fmt: skip


def tidy(run_dir: Path, *, store: Path | None, code: int) -> str:
    """Remove the run directory (JetStream store, seeds, logs) after a clean run; keep
    it with --store (a store worth keeping) or after a failure (its logs say why)."""
    if store is not None or code != 0:
        why = "--store" if store is not None else f"exit status {code}"
        return f"kept {run_dir} (logs, seeds; {why})"
    shutil.rmtree(run_dir, ignore_errors=True)
    return f"removed {run_dir}"


async def watch(args: argparse.Namespace, stack: Stack) -> int:
    """Follow the bus and redraw the status until Ctrl-C, SIGTERM or --duration."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tty = sys.stdout.isatty()
    view = View(said=None if tty else [])  # plain output: every decision, as it comes
    say = view.note if tty else (lambda line: print(f"baton up: {line}", flush=True))
    nc = await nats.connect(
        stack.nats_url,
        name="baton-up",
        max_reconnect_attempts=-1,
        **auth_options(seed_file=stack.nats_seed_file),
    )
    shown = Shown()
    disabled = Disabled(stack.store) if stack.store is not None else None  # ours to restart
    try:
        await wait_for_streams(nc, cluster=args.cluster, until=loop.time() + 120)
        await follow(nc, view, cluster=args.cluster)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as http:
            installing = start_installing(stack, http, say=say)
            with Screen() if tty else contextlib.nullcontext() as screen:
                while True:  # one status at least, however short --duration is
                    await count_streams(nc, view, cluster=args.cluster)
                    await shown.refresh(view, stack, http, screen=screen)
                    if disabled is not None and await disabled.check(
                        http, monitor=stack.nats_monitor, now=time.monotonic()
                    ):
                        restart_nats(stack, view)
                    if not supervise(stack, view):
                        shown.summary = None
                        break
                    if stop.is_set() or shown.over(args.duration):
                        break
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), timeout=1.0)
            if installing is not None:
                installing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await installing
    except NoBaton as exc:
        print(f"baton up: {exc} (did every service fail to start? see {stack.logs})",
              file=sys.stderr)  # fmt: skip
        return 1
    finally:
        await nc.close()
    if shown.summary is None:  # simcluster died: say so where the scrollback keeps it
        dead = next(c for c in stack.children if c.name == "simcluster")
        print(f"baton up: simcluster exited:\n{dead.tail()}", file=sys.stderr)
        return 1
    print(text(shown.summary), flush=True)  # the last status stays in the scrollback
    return 0


@dataclass
class Shown:
    """What the status shows, and when it last computed what is costly."""

    started: float = field(default_factory=time.monotonic)
    summary: Summary | None = None
    teams: tuple[TeamRow, ...] | None = None
    teams_at: float = -1e9
    printed_at: float = -1e9

    def over(self, duration: float | None) -> bool:
        return duration is not None and time.monotonic() - self.started >= duration

    async def refresh(
        self, view: View, stack: Stack, http: aiohttp.ClientSession, *, screen: object
    ) -> None:
        elapsed = time.monotonic() - self.started
        update_rates(view, interval=1.0)
        if view.changed and elapsed - self.teams_at >= TEAMS_EVERY:
            self.teams, self.teams_at = teams_now(view, now=time.time(), replay=False), elapsed
        health = [await probe(http, c, stack.ops.get(c.name)) for c in stack.children]
        self.summary = summarize(view, health, title=f"baton up  {elapsed:6.0f}s",
                                 teams=self.teams, endpoints=stack.endpoints())  # fmt: skip
        if isinstance(screen, Screen):
            screen.show(self.summary)
            return
        if view.said:
            print("\n".join(f"baton up: {line}" for line in view.said), flush=True)
            view.said.clear()
        if elapsed - self.printed_at >= PLAIN_EVERY:
            self.printed_at = elapsed
            print(text(self.summary) + "\n", flush=True)


def supervise(stack: Stack, view: View) -> bool:
    """Restart dead services and NATS (its store keeps the streams) with a back-off, as
    Kubernetes restarts a container; False when simcluster died (its cluster is gone)."""
    now = time.monotonic()
    for child in stack.children:
        if child.alive:
            continue
        if child.name == "simcluster":
            return False
        if child.next_start == 0.0:
            view.note(f"{time.strftime('%H:%M:%S')} {child.name} exited "
                      f"({child.exit_code()}); restarting")  # fmt: skip
        if child.revive(now):
            view.note(f"{time.strftime('%H:%M:%S')} {child.name} restarted ({child.restarts})")
    return True


def restart_nats(stack: Stack, view: View) -> None:
    """Stop nats-server, whose streams stopped writing while its store has room again:
    the supervisor starts it on the same store."""
    nats_child = next(c for c in stack.children if c.name == "nats")
    view.note(f"{time.strftime('%H:%M:%S')} nats: /healthz failing (its store was full?) "
              "and the store has room again; restarting it")  # fmt: skip
    nats_child.stop()


def start_installing(
    stack: Stack, http: aiohttp.ClientSession, *, say: Callable[[str], None]
) -> asyncio.Task[None] | None:
    """Register admission's webhook with our simcluster once it serves (in the background)."""
    if stack.webhook is None:
        return None
    port, tls_dir = stack.webhook
    admission = next(c for c in stack.children if c.name == "admission")

    async def ready() -> bool:
        return (await probe(http, admission, stack.ops["admission"])).ready

    async def install() -> None:
        try:
            url = await install_webhook(kubeconfig=stack.kubeconfig, url=f"https://127.0.0.1:{port}",
                                        cert=tls_dir / "tls.crt", ready=ready)  # fmt: skip
            line = f"admission webhook registered at {url}"
        except Exception as exc:  # the demo runs on without the webhook; say why
            line = f"admission webhook NOT registered (the workload waits for it): {exc!r}"
        say(f"{time.strftime('%H:%M:%S')} {line}")

    return asyncio.create_task(install(), name="install-webhook")


def update_rates(view: View, *, interval: float) -> None:
    for domain, count in view.counts.items():
        view.rates[domain] = (count - view.counted.get(domain, 0)) / interval
    view.counted = Counter(view.counts)


async def probe(http: aiohttp.ClientSession, child: Child, port: int | None) -> ServiceHealth:
    detail = f"ops :{port}" if port else ""
    if port is None or not child.alive:
        return ServiceHealth(child.name, alive=child.alive, ready=child.alive, detail=detail)
    try:
        async with http.get(f"http://127.0.0.1:{port}/readyz") as response:
            ready = response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        ready = False
    return ServiceHealth(child.name, alive=True, ready=ready, detail=detail)
