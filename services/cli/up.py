"""``baton up``: the embedded default, or Baton against a real cluster and NATS.

Starts nats-server (JetStream, temporary store unless --store), simcluster (unless
--kubeconfig) and every Baton service as separate processes, shows a live status,
and stops everything in reverse order on Ctrl-C (or after --duration seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import msgspec
import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from proto import subjects
from proto.codec import Undecodable, decode
from proto.k8s import K8sEvent
from services.cli.installing import install_webhook
from services.cli.processes import (
    Child,
    baton,
    free_port,
    nats_server_binary,
    port_open,
    wait_until,
)
from services.cli.view import ServiceHealth, View, render

SERVICES = ("bridge", "actuator", "admission", "gang")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="baton up", description=__doc__)
    p.add_argument("--nodes", type=int, default=64, help="simulated GPU nodes (default 64)")
    p.add_argument(
        "--workload",
        default="synthetic",
        help="none | synthetic | philly-sample | a Philly-format trace CSV (default synthetic)",
    )
    p.add_argument("--speed", type=float, default=60.0, help="trace time compression (default 60)")
    p.add_argument("--cluster", default="c1", help="cluster token in subjects (default c1)")
    p.add_argument("--endpoints-file", type=Path, help="write BATON_NATS_URL and KUBECONFIG here")
    p.add_argument("--kubeconfig", type=Path, help="use this cluster instead of simcluster")
    p.add_argument("--nats", help="use this NATS server instead of starting one")
    p.add_argument("--store", type=Path, help="JetStream store directory (default: temporary)")
    p.add_argument("--teams", type=Path, help="team config for admission (default: one team)")
    p.add_argument("--services", default=",".join(SERVICES), help="which services to run")
    p.add_argument("--dry-run", action="store_true", help="services decide; the actuator only logs")
    p.add_argument("--duration", type=float, help="stop by itself after this many seconds")
    args = p.parse_args(argv)
    if args.nodes < 1:
        p.error("--nodes must be at least 1")
    named = {"none", "synthetic", "philly-sample"}
    if args.workload not in named and not Path(args.workload).is_file():
        p.error(f"--workload {args.workload!r}: not {', '.join(sorted(named))} or a trace file")
    return args


def available(service: str) -> bool:
    return importlib.util.find_spec(f"services.{service}.main") is not None


@dataclass
class Stack:
    """What ``baton up`` started; children are appended as they start, so a failed
    start still stops the ones already running."""

    run_dir: Path
    children: list[Child] = field(default_factory=list)
    nats_url: str = ""
    kubeconfig: Path = Path()
    ops: dict[str, int] = field(default_factory=dict)  # service -> ops port
    webhook: tuple[int, Path] | None = None  # admission's port and TLS dir, when we register it

    def start(self, child: Child) -> Child:
        child.start()
        self.children.append(child)
        return child


def start_all(args: argparse.Namespace, stack: Stack) -> None:
    logs = stack.run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stack.nats_url = args.nats or start_nats(args, stack, logs)
    stack.kubeconfig = args.kubeconfig or start_sim(args, stack, logs)
    env = {
        "BATON_NATS_URL": stack.nats_url,
        "BATON_CLUSTER": args.cluster,
        "KUBECONFIG": str(stack.kubeconfig),
    }
    if args.dry_run:
        env["BATON_DRY_RUN"] = "1"
    if args.teams:
        env["BATON_ADMISSION_TEAMS_FILE"] = str(args.teams)
    wanted = [s for s in args.services.split(",") if s]
    for name in [s for s in wanted if not available(s)]:
        print(f"baton up: service {name!r} is not part of this build; skipping", file=sys.stderr)
    wanted = [s for s in wanted if available(s)]
    if "admission" in wanted:
        env["BATON_GANG_REQUIRE_ADMISSION"] = "1"  # gang places only gangs admission let in
    for name in wanted:
        stack.ops[name] = free_port()
        child_env = {**env, "BATON_OPS_PORT": str(stack.ops[name])}
        if name == "admission" and args.kubeconfig is None:  # our simcluster calls the webhook
            stack.webhook = (free_port(), stack.run_dir / "admission-tls")
            child_env["BATON_ADMISSION_WEBHOOK_PORT"] = str(stack.webhook[0])
            child_env["BATON_ADMISSION_TLS_SELF_SIGNED_DIR"] = str(stack.webhook[1])
        stack.start(Child(name, baton(name), logs / f"{name}.log", child_env))


def start_nats(args: argparse.Namespace, stack: Stack, logs: Path) -> str:
    port = free_port()
    store = args.store or stack.run_dir / "jetstream"
    argv = [nats_server_binary(), "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(store)]
    child = stack.start(Child("nats", argv, logs / "nats.log"))
    wait_until(lambda: port_open(port), child=child, timeout=20)
    return f"nats://127.0.0.1:{port}"


def start_sim(args: argparse.Namespace, stack: Stack, logs: Path) -> Path:
    kubeconfig = stack.run_dir / "kubeconfig"
    argv = baton("sim", "--nodes", str(args.nodes), "--listen", f"127.0.0.1:{free_port()}")
    argv += ["--kubeconfig", str(kubeconfig)]
    if args.workload != "none":
        argv += ["--trace", args.workload, "--speed", str(args.speed)]
    child = stack.start(Child("simcluster", argv, logs / "simcluster.log"))
    wait_until(kubeconfig.exists, child=child, timeout=120)
    return kubeconfig


def write_endpoints(path: Path, stack: Stack, *, cluster: str) -> None:
    path.write_text(
        f"BATON_NATS_URL={stack.nats_url}\nKUBECONFIG={stack.kubeconfig}\nBATON_CLUSTER={cluster}\n"
    )


def run(argv: list[str]) -> int:
    args = parse_args(argv)
    stack = Stack(run_dir=Path(tempfile.mkdtemp(prefix="baton-up-")))
    try:
        start_all(args, stack)
        if args.endpoints_file:
            write_endpoints(args.endpoints_file, stack, cluster=args.cluster)
        logs = stack.run_dir / "logs"
        print(f"baton up: NATS {stack.nats_url}  KUBECONFIG={stack.kubeconfig}  logs in {logs}")
        return asyncio.run(watch(args, stack))
    except KeyboardInterrupt:
        return 0
    finally:
        for child in reversed(stack.children):
            child.stop()
        print("baton up: stopped", flush=True)


async def watch(args: argparse.Namespace, stack: Stack) -> int:
    """Follow the bus and redraw the status until Ctrl-C, SIGTERM or --duration."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    view = View()
    nc = await nats.connect(stack.nats_url, name="baton-up", max_reconnect_attempts=-1)
    tty = sys.stdout.isatty()
    started = time.monotonic()
    try:
        await follow(nc, view, cluster=args.cluster)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as http:
            installing = start_installing(stack, view, http)
            last_print = 0.0
            while not stop.is_set():
                elapsed = time.monotonic() - started
                update_rates(view, interval=1.0)
                health = [await probe(http, c, stack.ops.get(c.name)) for c in stack.children]
                if tty:
                    print("\x1b[H\x1b[2J" + render(view, health, elapsed=elapsed), flush=True)
                elif elapsed - last_print >= 5:
                    last_print = elapsed
                    print(render(view, health, elapsed=elapsed) + "\n", flush=True)
                if args.duration and elapsed >= args.duration:
                    break
                if dead := [c for c in stack.children if not c.alive]:
                    print(f"baton up: {dead[0].name} exited:\n{dead[0].tail()}", file=sys.stderr)
                    return 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=1.0)
            if installing is not None:
                installing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await installing
    finally:
        await nc.close()
    return 0


def start_installing(
    stack: Stack, view: View, http: aiohttp.ClientSession
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
            url = await install_webhook(
                kubeconfig=stack.kubeconfig, port=port, tls_dir=tls_dir, ready=ready
            )
            line = f"admission webhook registered at {url}"
        except Exception as exc:  # the demo runs on without the webhook; say why
            line = f"admission webhook NOT registered: {exc!r}"[:160]
        view.note(f"{time.strftime('%H:%M:%S')} {line}")
        print(f"baton up: {line}", flush=True)

    return asyncio.create_task(install(), name="install-webhook")


async def follow(nc: NATS, view: View, *, cluster: str) -> None:
    """Current state of every object from the K8S stream, then live; every message counted."""
    js = nc.jetstream()

    async def on_object(msg: Msg) -> None:
        with contextlib.suppress(Undecodable):
            view.apply(decode(msg.data, K8sEvent))

    async def on_any(msg: Msg) -> None:
        domain = msg.subject.split(".")[2]
        view.counts[domain] += 1
        kind = msg.subject.split(".")[3] if msg.subject.count(".") >= 3 else ""
        if domain not in {subjects.K8S, subjects.TELEMETRY} and kind != "tick":  # ticks: replay
            view.note(describe(msg.subject, msg.data))

    for attempt in range(100):  # the bridge creates the stream; wait for it
        try:
            await js.subscribe(
                subjects.wildcard(cluster, subjects.K8S, ">"),
                cb=on_object,
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            )
            break
        except nats.js.errors.NotFoundError:
            await asyncio.sleep(min(0.1 * (attempt + 1), 1.0))
    await nc.subscribe(subjects.wildcard(cluster), cb=on_any)


def update_rates(view: View, *, interval: float) -> None:
    for domain, count in view.counts.items():
        view.rates[domain] = (count - view.counted.get(domain, 0)) / interval
    view.counted = Counter(view.counts)


def describe(subject: str, data: bytes) -> str:
    """One line for a decision, action or result: its type and what it is about."""
    try:
        payload = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return f"{subject} (not JSON)"
    kind = payload.get("type", "?") if isinstance(payload, dict) else "?"
    about = ".".join(subject.split(".")[4:]).replace(".", "/")
    extra = ""
    if isinstance(payload, dict):
        for key in ("outcome", "reason", "error"):
            if payload.get(key):
                extra += f" {key}={str(payload[key])[:60]}"
    return f"{time.strftime('%H:%M:%S')} {kind:<28} {about}{extra}"


async def probe(http: aiohttp.ClientSession, child: Child, port: int | None) -> ServiceHealth:
    if port is None or not child.alive:
        return ServiceHealth(child.name, alive=child.alive, ready=child.alive)
    try:
        async with http.get(f"http://127.0.0.1:{port}/readyz") as response:
            return ServiceHealth(child.name, alive=True, ready=response.status == 200)
    except (aiohttp.ClientError, TimeoutError):
        return ServiceHealth(child.name, alive=True, ready=False)
