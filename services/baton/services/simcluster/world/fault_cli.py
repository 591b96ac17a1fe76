"""``baton sim fault`` and ``baton sim heal``: faults on a running simcluster, over HTTP.

    baton sim fault KIND [TARGET...] [--selector S] [--pool P] [--random N | --share F]
                    [--seed S] [--xid X] [--gpu G] [--detail "key=value ..."]
    baton sim heal  KIND [TARGET...] ...                 (the same, healing)
    baton sim fault --trace FILE [--speed X] [--seed S]  (replayed inside the simulator)

TARGET is a node, several nodes, or one of ``label:SEL``, ``random:N[@POOL]``,
``share:F[@POOL]``. The simulator is the one ``--kubeconfig`` names, else ``$KUBECONFIG``,
else ``~/.kube/config``; requests go to its ``/sim/v1/faults`` with the kubeconfig's
credentials. One line per node hit is printed; errors go to stderr with exit code 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from baton.services.simcluster.world import faults, targets

DEFAULT_KUBECONFIG = Path.home() / ".kube" / "config"


def kubeconfig_path(flag: str | None) -> str:
    """``--kubeconfig``, else the first file of ``$KUBECONFIG``, else ``~/.kube/config``."""
    if flag:
        return flag
    env = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return env[0] if env else str(DEFAULT_KUBECONFIG)


def parse(argv: list[str], *, heal: bool = False) -> tuple[str, str, dict[str, Any]]:
    """(kubeconfig, URL path, JSON body) of the request ``argv`` asks for."""
    verb = "heal" if heal else "fault"
    kinds = sorted([*faults.KINDS, *faults.ALIASES])
    p = argparse.ArgumentParser(prog=f"baton sim {verb}", description=__doc__.split("\n")[0])
    p.add_argument("--kubeconfig", help="the simcluster's kubeconfig (default: $KUBECONFIG)")
    p.add_argument("kind", nargs="?", choices=kinds, metavar="KIND", help=", ".join(kinds))
    p.add_argument("targets", nargs="*", metavar="TARGET")
    p.add_argument("--selector", default="", help="nodes matching this label selector")
    p.add_argument("--pool", default="", help="nodes of this pool")
    p.add_argument("--random", type=int, help="this many of them, at random")
    p.add_argument("--share", type=float, help="this fraction of them, at random")
    p.add_argument("--seed", type=int, default=0, help="seed of the random choice")
    p.add_argument("--xid", type=int, help="xid, gpu-fault: the Xid (default 79)")
    p.add_argument("--gpu", type=int, help="the GPU index (default 0; heal: every GPU)")
    p.add_argument("--detail", default="", help='other details: "mount=/raid ratio=0.97"')
    p.add_argument("--trace", type=Path, help="replay this fault trace CSV in the simulator")
    p.add_argument("--speed", type=float, default=1.0, help="--trace: time compression")
    args = p.parse_args(argv)
    config = kubeconfig_path(args.kubeconfig)
    if args.trace is not None:
        if args.kind or heal:
            p.error("--trace: give the trace alone, without KIND or heal")
        try:
            text = args.trace.read_text()
        except OSError as exc:
            p.error(f"--trace: {exc}")
        return config, "/sim/v1/faults/trace", {"csv": text, "speed": args.speed, "seed": args.seed}
    if args.kind is None:
        p.error("KIND: required (or --trace FILE)")
    kind, heal = faults.ALIASES.get(args.kind, (args.kind, heal))
    try:
        target = _target(args)
        detail: dict[str, Any] = faults.pairs(args.detail)
        detail.update({k: v for k, v in (("xid", args.xid), ("gpu", args.gpu)) if v is not None})
        faults.fault(kind, **detail)  # check here, so a typo fails before any request
    except (targets.TargetError, faults.FaultError) as exc:
        p.error(str(exc))
    body = {"kind": kind, "heal": heal, "detail": detail, "target": _wire(target)}
    return config, "/sim/v1/faults", body


def _target(args: argparse.Namespace) -> targets.Target:
    picked = {"count": args.random, "share": args.share, "seed": args.seed}
    if len(args.targets) == 1 and ":" in args.targets[0]:
        if args.selector or args.pool or args.random is not None or args.share is not None:
            raise targets.TargetError("give a target text or --selector/--pool/--random/--share")
        return targets.parse(args.targets[0], seed=args.seed)
    if args.targets:
        return targets.Target(nodes=tuple(args.targets), **picked)
    if not (args.selector or args.pool or args.random is not None or args.share is not None):
        raise targets.TargetError("TARGET: name nodes, or give --selector/--pool/--random/--share")
    return targets.Target(selector=args.selector, pool=args.pool, **picked)


def _wire(target: targets.Target) -> dict[str, Any]:
    out: dict[str, Any] = {
        "nodes": list(target.nodes),
        "selector": target.selector,
        "pool": target.pool,
        "seed": target.seed,
    }
    out.update(
        {k: v for k, v in (("count", target.count), ("share", target.share)) if v is not None}
    )
    return out


async def send(config: str, path: str, body: dict[str, Any], *, verb: str = "fault") -> int:
    import aiohttp
    from kubernetes_asyncio import config as kubeconfig
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        api_client = await kubeconfig.new_client_from_config(
            config_file=config, persist_config=False
        )
    except (OSError, kubeconfig.ConfigException) as exc:
        print(f"baton sim {verb}: kubeconfig {config}: {exc}", file=sys.stderr)
        return 1
    async with api_client:
        try:
            response = await api_client.call_api(
                path,
                "POST",
                header_params={"Content-Type": "application/json", "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
            )
            status, raw = response.status, await response.read()
        except ApiException as exc:
            status, raw = exc.status, exc.body
        except (aiohttp.ClientError, OSError) as exc:
            host = api_client.configuration.host
            print(f"baton sim {verb}: cannot reach {host}: {exc}", file=sys.stderr)
            return 1
        if status >= 300:
            print(f"baton sim {verb}: {status} {_message(raw)}", file=sys.stderr)
            return 1
    answer = json.loads(raw)
    if "rows" in answer:
        print(f"fault trace: {answer['rows']} rows replaying")
        return 0
    action = f"heal {answer['kind']}" if answer["heal"] else answer["kind"]
    for node in answer["nodes"]:
        print(f"{node}: {action}")
    return 0


def _message(body: Any) -> str:
    try:
        return str(json.loads(body)["message"])
    except (ValueError, KeyError, TypeError):
        return str(body)
