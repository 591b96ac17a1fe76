"""``baton sim``: serve a simulated GPU cluster's Kubernetes API until SIGTERM.

    baton sim --nodes N --listen HOST:PORT --kubeconfig PATH [--spec FILE]
              [--trace FILE|philly-sample|synthetic --speed X] [--time-scale F]
    baton sim fault --kubeconfig PATH node-notready|node-ready|gpu-fault|gpu-heal NODE...

The kubeconfig is written (atomically) once the API serves and the nodes exist, and
one line ``simcluster ready ...`` is printed. ``fault`` patches nodes through the API
like a node problem detector would, so it works on any running simcluster.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
from collections.abc import Iterable
from pathlib import Path

import msgspec
import structlog

from libs.runtime import configure_logging, run_until_signalled
from services.simcluster import faults, spec, trace, workload
from services.simcluster.calls import Settings
from services.simcluster.kubeconfig import write_kubeconfig
from services.simcluster.server import ApiServer
from services.simcluster.simulation import build
from services.simcluster.store import Store

log = structlog.get_logger("simcluster")


class Options(msgspec.Struct, frozen=True, kw_only=True):
    host: str
    port: int
    kubeconfig: Path | None
    advertise: str  # server URL written into the kubeconfig; "" = the listening URL
    spec: spec.ClusterSpec
    trace: str  # "" | "synthetic" | "philly-sample" | a path
    speed: float
    time_scale: float
    seed: int
    history: int


def parse_args(argv: list[str]) -> Options:
    p = argparse.ArgumentParser(prog="baton sim", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=64, help="HGX-like 8-GPU nodes (default 64)")
    p.add_argument("--spec", type=Path, help="cluster spec YAML (pools, topology, delays)")
    p.add_argument("--listen", default="127.0.0.1:6443", help="HOST:PORT (port 0: any free)")
    p.add_argument("--kubeconfig", type=Path, help="write a kubeconfig here once ready")
    p.add_argument(
        "--advertise", default="", help="server URL for the kubeconfig (e.g. http://sim:6443)"
    )
    p.add_argument("--trace", default="", help="synthetic | philly-sample | a Philly CSV")
    p.add_argument("--speed", type=float, default=1.0, help="trace time compression")
    p.add_argument("--time-scale", type=float, default=1.0, help="speed of simulated delays")
    p.add_argument("--seed", type=int, default=1, help="seed of the synthetic workload")
    p.add_argument("--history", type=int, default=100_000, help="changes kept for watches")
    args = p.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        p.error(f"--listen: expected HOST:PORT, got {args.listen!r}")
    if args.nodes < 0:
        p.error("--nodes: expected >= 0")
    if args.speed <= 0 or args.time_scale <= 0:
        p.error("--speed and --time-scale must be > 0")
    if args.trace not in ("", "synthetic", "philly-sample") and not Path(args.trace).is_file():
        p.error(f"--trace: not synthetic, philly-sample or a readable file: {args.trace!r}")
    try:
        cluster = spec.load(args.spec) if args.spec else spec.default_spec(args.nodes)
    except spec.SpecError as exc:
        p.error(f"--spec: {exc}" if args.spec else f"--nodes: {exc}")
    return Options(
        host=host,
        port=int(port),
        kubeconfig=args.kubeconfig,
        advertise=args.advertise,
        spec=cluster,
        trace=args.trace,
        speed=args.speed,
        time_scale=args.time_scale,
        seed=args.seed,
        history=args.history,
    )


def jobs(opts: Options) -> Iterable[workload.Job]:
    if opts.trace == "synthetic":
        return workload.synthetic_jobs(seed=opts.seed)
    path = trace.sample_path() if opts.trace == "philly-sample" else Path(opts.trace)
    return trace.read(path)


def tune_gc() -> None:
    """Collect the young generation less often: the store holds millions of long-lived
    dicts, and default thresholds make allocation-heavy bursts (100k pods) ~40% slower."""
    gc.set_threshold(50_000, 20, 100)


async def serve(opts: Options) -> None:
    tune_gc()
    store = Store(history=opts.history)
    server = ApiServer(store, Settings())
    cluster = build(store, spec=opts.spec, speed=opts.time_scale)
    cluster.admission = server.admission
    try:
        await cluster.start()
        gc.freeze()  # the nodes live as long as the process: keep them out of collections
        url = await server.start(opts.host, opts.port)
        if opts.kubeconfig is not None:
            write_kubeconfig(opts.kubeconfig, opts.advertise or url)
        if opts.trace:
            cluster.replay(jobs(opts), speed=opts.speed)
        nodes = len(cluster.node_names())
        print(
            f"simcluster ready url={url} nodes={nodes} kubeconfig={opts.kubeconfig or '-'}",
            flush=True,
        )
        await asyncio.Event().wait()  # until run_until_signalled cancels us
    finally:
        await cluster.stop()
        await server.stop()


# baton sim fault

FAULTS = {
    "node-notready": lambda a: faults.not_ready(),
    "node-ready": lambda a: faults.ready(),
    "gpu-fault": lambda a: faults.gpu_fault(xid=a.xid, gpu=a.gpu),
    "gpu-heal": lambda a: faults.gpu_heal(),
}


def parse_fault(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="baton sim fault", description="inject or heal a node fault")
    p.add_argument("--kubeconfig", required=True, help="the simcluster's kubeconfig")
    p.add_argument("fault", choices=sorted(FAULTS))
    p.add_argument("nodes", nargs="+", metavar="NODE")
    p.add_argument("--xid", type=int, default=79, help="gpu-fault: the Xid (default 79)")
    p.add_argument("--gpu", type=int, default=0, help="gpu-fault: the GPU index (default 0)")
    args = p.parse_args(argv)
    try:
        args.change = FAULTS[args.fault](args)
    except ValueError as exc:
        p.error(str(exc))
    return args


async def inject(args: argparse.Namespace) -> int:
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.client.exceptions import ApiException

    api_client = await config.new_client_from_config(
        config_file=args.kubeconfig, persist_config=False
    )
    failed = 0
    async with api_client:
        core = client.CoreV1Api(api_client)
        for name in args.nodes:
            try:
                node = api_client.sanitize_for_serialization(await core.read_node(name))
                metadata, status = faults.patches(args.change, node)
                if metadata:
                    await core.patch_node(name, metadata)
                await core.patch_node_status(name, status)
            except ApiException as exc:
                print(f"baton sim fault: {name}: {exc.status} {exc.reason}", file=sys.stderr)
                failed += 1
                continue
            print(f"{name}: {args.fault}")
    return 1 if failed else 0


def run(argv: list[str]) -> int:
    if argv[:1] == ["fault"]:
        return asyncio.run(inject(parse_fault(argv[1:])))
    opts = parse_args(argv)
    configure_logging(service="simcluster")
    asyncio.run(run_until_signalled(lambda: serve(opts)))
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
