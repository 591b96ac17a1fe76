"""``baton sim``: serve a simulated GPU cluster's Kubernetes API until SIGTERM.

    baton sim --nodes N --listen HOST:PORT --kubeconfig PATH [--spec FILE]
              [--trace FILE|philly-sample|synthetic|llm --speed X]
              [--submit pods|controllers] [--submitters N] [--time-scale F]
              [--fault-trace FILE]
    baton sim fault KIND TARGET... [--xid X --gpu G --detail ...]   (see fault_cli)
    baton sim heal KIND TARGET...

The kubeconfig is written (atomically) once the API serves and the nodes exist, and
one line ``simcluster ready ...`` is printed. ``fault`` and ``heal`` talk to a running
simcluster's ``/sim/v1/faults``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import msgspec
import structlog

from baton.libs.runtime import configure_logging, run_until_signalled, tune_gc
from baton.services.simcluster.api.calls import Settings
from baton.services.simcluster.api.kubeconfig import write_kubeconfig
from baton.services.simcluster.api.metrics import WorkloadMetrics
from baton.services.simcluster.api.server import ApiServer
from baton.services.simcluster.api.store import Store
from baton.services.simcluster.world import fault_cli, fault_trace, mixes, spec, trace, workload
from baton.services.simcluster.world.simapi import SimApi
from baton.services.simcluster.world.simulation import SUBMITS, Simulation, build

log = structlog.get_logger("simcluster")
NAMED_TRACES = ("", "synthetic", "llm", "philly-sample")


class Options(msgspec.Struct, frozen=True, kw_only=True):
    host: str
    port: int
    kubeconfig: Path | None
    advertise: str  # server URL written into the kubeconfig; "" = the listening URL
    spec: spec.ClusterSpec
    trace: str  # "" | "synthetic" | "llm" | "philly-sample" | a path
    speed: float
    time_scale: float
    seed: int
    history: int
    load: float = 0.9
    submit: str = "pods"  # "pods" (PodGroups and bare pods) | "controllers"
    after_webhook: bool = False  # the trace starts once a webhook is registered
    submitters: int = 8  # jobs being created at once, as that many users would
    fault_trace: tuple[fault_trace.TraceRow, ...] = ()


def _taints(text: str) -> tuple[str, ...]:
    found = tuple(t.strip() for t in text.split(",") if t.strip())
    for taint in found:
        if not re.match(spec.TAINT, taint):
            raise argparse.ArgumentTypeError(
                f"{taint!r}: expected KEY[=VALUE]:EFFECT, EFFECT one of NoSchedule, "
                "PreferNoSchedule, NoExecute (kubelet's --register-with-taints)"
            )
    return found


CLOUD_FLAGS: tuple[tuple[str, Callable[[str], Any], str], ...] = (
    ("--provisioning-s", float, "seconds from scale-up to a node joining"),
    ("--provisioning-spread-s", float, "each machine joins up to this much sooner or later"),
    ("--join-failure-share", float, "share of new machines that never join (0..1)"),
    ("--not-ready-share", float, "share of new machines that join NotReady (0..1)"),
    ("--quota", int, "cloud quota: machines a pool may have; more wait, pending"),
    ("--min-size", int, "autoscaler min-size annotation of each MachineDeployment"),
    ("--max-size", int, "autoscaler max-size annotation of each MachineDeployment"),
    (
        "--register-with-taints",
        _taints,
        "taints every node joins with, as kubelet's: KEY[=VALUE]:EFFECT, comma-separated",
    ),
)


def parse_args(argv: list[str]) -> Options:
    p = argparse.ArgumentParser(prog="baton sim", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=64, help="HGX-like 8-GPU nodes (default 64)")
    p.add_argument("--spec", type=Path, help="cluster spec YAML (pools, topology, delays)")
    p.add_argument(
        "--devices", choices=("plugin", "dra"),
        help="how nodes show their GPUs and NICs: device-plugin counts, or those and DRA "
        "drivers' ResourceSlices (overrides --spec's devices)",
    )  # fmt: skip
    p.add_argument("--listen", default="127.0.0.1:6443", help="HOST:PORT (port 0: any free)")
    p.add_argument("--kubeconfig", type=Path, help="write a kubeconfig here once ready")
    p.add_argument(
        "--advertise", default="", help="server URL for the kubeconfig (e.g. http://sim:6443)"
    )
    p.add_argument("--trace", default="", help="synthetic | llm | philly-sample | a Philly CSV")
    p.add_argument(
        "--submit", choices=SUBMITS,
        help="jobs as PodGroups and bare pods, or as Jobs, JobSets and MPIJobs the "
        "controllers run (default: controllers for llm, pods otherwise)",
    )  # fmt: skip
    p.add_argument("--speed", type=float, default=1.0, help="trace time compression")
    p.add_argument(
        "--trace-after-webhook", action="store_true",
        help="start the trace once an admission webhook is registered (baton up: every job "
        "passes Baton's webhook, and reaches its queue as it was submitted)",
    )  # fmt: skip
    p.add_argument(
        "--submitters", type=int, default=8,
        help="trace: jobs created at once, as that many users would (8; 1: one after another)",
    )  # fmt: skip
    p.add_argument("--time-scale", type=float, default=1.0, help="speed of simulated delays")
    p.add_argument("--seed", type=int, default=1, help="seed of the synthetic workload")
    p.add_argument(
        "--load", type=float, default=0.9, help="synthetic: share of the GPUs kept busy (0.9)"
    )
    p.add_argument("--history", type=int, default=100_000, help="changes kept for watches")
    p.add_argument("--fault-trace", type=Path, help="replay this fault trace CSV (--speed)")
    cloud = p.add_argument_group("cloud (every pool; overrides --spec)")
    for flag, kind, text in CLOUD_FLAGS:
        cloud.add_argument(flag, type=kind, help=text)
    args = p.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        p.error(f"--listen: expected HOST:PORT, got {args.listen!r}")
    if args.nodes < 0:
        p.error("--nodes: expected >= 0")
    if args.speed <= 0 or args.time_scale <= 0:
        p.error("--speed and --time-scale must be > 0")
    if args.submitters < 1:
        p.error(f"--submitters: expected >= 1, got {args.submitters}")
    if args.load <= 0:
        p.error(f"--load: expected > 0, got {args.load}")
    if args.trace not in NAMED_TRACES and not Path(args.trace).is_file():
        p.error(f"--trace: not synthetic, llm, philly-sample or a readable file: {args.trace!r}")
    return Options(
        host=host,
        port=int(port),
        kubeconfig=args.kubeconfig,
        advertise=args.advertise,
        spec=_cluster(p, args),
        trace=args.trace,
        speed=args.speed,
        time_scale=args.time_scale,
        seed=args.seed,
        history=args.history,
        load=args.load,
        submit=args.submit or ("controllers" if args.trace == "llm" else "pods"),
        fault_trace=_fault_trace(p, args),
        after_webhook=args.trace_after_webhook,
        submitters=args.submitters,
    )


def _cluster(p: argparse.ArgumentParser, args: argparse.Namespace) -> spec.ClusterSpec:
    """The spec (``--spec`` or ``--nodes``) with the cloud flags set on every pool."""
    try:
        cluster = spec.load(args.spec) if args.spec else spec.default_spec(args.nodes)
    except spec.SpecError as exc:
        p.error(f"--spec: {exc}" if args.spec else f"--nodes: {exc}")
    if args.devices:
        cluster = msgspec.structs.replace(cluster, devices=args.devices)
    names = [flag[2:].replace("-", "_") for flag, _, _ in CLOUD_FLAGS]
    overrides = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    try:
        return spec.with_pools(cluster, **overrides) if overrides else cluster
    except spec.SpecError as exc:
        key = str(exc).split(":", 1)[0].rsplit(".", 1)[-1]
        p.error(f"--{key.replace('_', '-')}: {exc}")


def _fault_trace(
    p: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[fault_trace.TraceRow, ...]:
    if args.fault_trace is None:
        return ()
    try:
        with args.fault_trace.open(newline="") as f:
            rows = fault_trace.parse(f, seed=args.seed, source=str(args.fault_trace))
    except (OSError, fault_trace.TraceError) as exc:
        p.error(f"--fault-trace: {exc}")
    return tuple(rows)


def jobs(opts: Options) -> Iterable[workload.Job]:
    gpus = sum(p.count * p.gpus for p in opts.spec.pools)
    if opts.trace == "llm":
        return mixes.llm_jobs(seed=opts.seed, gpus=gpus or 8)
    if opts.trace == "synthetic":
        return workload.synthetic_jobs(seed=opts.seed, gpus=gpus or None, load=opts.load)
    path = trace.sample_path() if opts.trace == "philly-sample" else Path(opts.trace)
    return trace.from_busy_start(trace.read(path))


def workload_metrics(cluster: Simulation) -> WorkloadMetrics:
    """The replay's and the workload controllers' metrics, read from ``cluster``."""
    return WorkloadMetrics(
        behind=lambda: cluster.behind_s,
        submitted=lambda: cluster.submitted,
        depths=lambda: {c.name: c.depth for c in cluster.controllers},
    )


async def serve(opts: Options) -> None:
    tune_gc()
    store = Store(history=opts.history)
    server = ApiServer(store, Settings())
    cluster = build(store, spec=opts.spec, speed=opts.time_scale)
    cluster.admission = server.admission
    server.metrics.registry.register(workload_metrics(cluster))
    server.sim = SimApi(cluster)
    try:
        await cluster.start()
        gc.freeze()  # the nodes live as long as the process: keep them out of collections
        url = await server.start(opts.host, opts.port)
        if opts.kubeconfig is not None:
            write_kubeconfig(opts.kubeconfig, opts.advertise or url)
        if opts.trace:
            cluster.replay(
                jobs(opts),
                speed=opts.speed,
                submit=opts.submit,
                after_webhook=opts.after_webhook,
                submitters=opts.submitters,
            )
        if opts.fault_trace:
            cluster.replay_faults(opts.fault_trace, speed=opts.speed)
        nodes = len(cluster.node_names())
        print(
            f"simcluster ready url={url} nodes={nodes} kubeconfig={opts.kubeconfig or '-'}",
            flush=True,
        )
        await asyncio.Event().wait()  # until run_until_signalled cancels us
    finally:
        await cluster.stop()
        await server.stop()


def run(argv: list[str]) -> int:
    if argv[:1] in (["fault"], ["heal"]):
        verb = argv[0]
        config, path, body = fault_cli.parse(argv[1:], heal=verb == "heal")
        return asyncio.run(fault_cli.send(config, path, body, verb=verb))
    opts = parse_args(argv)
    configure_logging(service="simcluster")
    asyncio.run(run_until_signalled(lambda: serve(opts)))
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
