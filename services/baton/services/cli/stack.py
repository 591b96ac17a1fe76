"""What ``baton up`` starts, in order: nats-server, simcluster, the services, Prometheus.

Each is a child process logging to its own file in the run directory. ``Stack``
remembers them as they start, so a failed start still stops the ones running.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from baton.libs.runner import access
from baton.proto import keys
from baton.services.cli.installing import (
    BATON_NAMESPACES,
    PREFLIGHT_NAMESPACE,
    ensure_namespace,
)
from baton.services.cli.monitoring import start_prometheus
from baton.services.cli.natsconfig import specs, write_config, write_seed
from baton.services.cli.processes import (
    Child,
    baton,
    free_port,
    nats_server_binary,
    port_open,
    wait_until,
)
from baton.services.cli.store import store_problem

SERVICES = ("bridge", "actuator", "admission", "gang", "reporter", "bandwidth", "health", "agent")
# --autoscale: the two capacity services, and on simcluster pools that may grow to twice
# their size and shrink to half, idle nodes going after 2 minutes (docs/autoscaler.md).
AUTOSCALE = ("autoscaler", "balloon")
SIM_AUTOSCALE = {"BATON_AUTOSCALER_UNNEEDED_S": "120", "BATON_AUTOSCALER_MARK_MACHINES": "0",
                 "BATON_BALLOON_PRIORITY_CLASS": ""}  # fmt: skip
# On simcluster, health runs with demo timings (docs/health.md has the defaults and why).
SIM_HEALTH = {"BATON_HEALTH_DRAIN_GRACE_S": "60", "BATON_HEALTH_REMEDIATION_RECHECK_S": "30"}


def available(service: str) -> bool:
    return importlib.util.find_spec(f"baton.services.{service}.main") is not None


@dataclass
class Stack:
    """What ``baton up`` started; children are appended as they start."""

    run_dir: Path
    children: list[Child] = field(default_factory=list)
    nats_url: str = ""
    kubeconfig: Path = Path()
    sim: str | None = None  # simcluster's host:port, when we run it
    ops: dict[str, int] = field(default_factory=dict)  # service -> ops port
    webhook: tuple[int, Path] | None = None  # admission's port and TLS dir, when we register it
    prometheus: str = ""  # its URL, with --prometheus
    users: dict[str, str] = field(default_factory=dict)  # NATS user -> its nkey seed file
    store: Path | None = None  # the JetStream store of the nats-server we started
    nats_monitor: int = 0  # its monitoring port (/healthz)

    @property
    def nats_seed_file(self) -> str:
        """The admin's nkey seed (the tools'), "" when NATS runs without auth."""
        return self.users.get(access.ADMIN, "")

    def start(self, child: Child) -> Child:
        child.start()
        self.children.append(child)
        return child

    @property
    def logs(self) -> Path:
        return self.run_dir / "logs"

    def endpoints(self) -> tuple[tuple[str, str], ...]:
        """What a user connects to, for the status screen (it stays on screen)."""
        found = [("NATS", self.nats_url), ("KUBECONFIG", str(self.kubeconfig))]
        if self.nats_seed_file:
            found.append(("NATS nkey (admin)", self.nats_seed_file))
        if inspect := self.users.get(access.INSPECT, ""):
            found.append(("NATS nkey (read-only)", inspect))
        if self.sim:
            found.append(("simcluster", f"http://{self.sim} (/metrics: API server metrics)"))
        if self.prometheus:
            found.append(("prometheus", self.prometheus))
        if self.ops:  # each service's port is on its line under "services"
            found.append(("service ops", "http://127.0.0.1:<port>/metrics, /healthz, /readyz"))
        found.append(("logs", str(self.logs)))
        return tuple(found)


def start_all(args: argparse.Namespace, stack: Stack) -> None:
    stack.logs.mkdir(parents=True, exist_ok=True)
    stack.nats_url = args.nats or start_nats(args, stack)
    stack.kubeconfig = args.kubeconfig or start_sim(args, stack)
    env = {
        **({"BATON_CLUSTER_NODES": str(cluster_nodes(args))} if stack.sim else {}),
        "BATON_NATS_URL": stack.nats_url,
        **({"BATON_NATS_NKEY_SEED_FILE": stack.nats_seed_file} if stack.nats_seed_file else {}),
        "BATON_CLUSTER": args.cluster,
        "KUBECONFIG": str(stack.kubeconfig),
    }
    if args.dry_run:
        env["BATON_DRY_RUN"] = "1"
    if args.teams:
        env["BATON_ADMISSION_TEAMS_FILE"] = str(args.teams)
        env["BATON_BANDWIDTH_TEAMS_FILE"] = str(args.teams)
    wanted = [s for s in args.services.split(",") if s]
    for namespace in BATON_NAMESPACES if stack.sim else ():
        asyncio.run(ensure_namespace(stack.kubeconfig, namespace))
    if getattr(args, "autoscale", False):
        wanted += [s for s in AUTOSCALE if s not in wanted]
        if stack.sim:
            env.update(SIM_AUTOSCALE)
            asyncio.run(ensure_namespace(stack.kubeconfig, PREFLIGHT_NAMESPACE))
    for name in [s for s in wanted if not available(s)]:
        print(f"baton up: service {name!r} is not part of this build; skipping", file=sys.stderr)
    wanted = [s for s in wanted if available(s)]
    if "agent" in wanted and not stack.sim:  # a real cluster runs the agent DaemonSet
        wanted.remove("agent")
    if "admission" in wanted:
        env["BATON_GANG_REQUIRE_ADMISSION"] = "1"  # gang places only gangs admission let in
    if stack.sim and "health" in wanted:  # preflight pods run in Baton's namespace
        env.update(SIM_HEALTH)
        asyncio.run(ensure_namespace(stack.kubeconfig, PREFLIGHT_NAMESPACE))
    for name in wanted:
        for replica in range(1, args.replicas + 1):
            child_name = name if replica == 1 else f"{name}-{replica}"
            stack.ops[child_name] = free_port()
            child_env = {**env, "BATON_OPS_PORT": str(stack.ops[child_name])}
            user = access.AGENT_FLEET if name == "agent" else name
            if user in stack.users:  # its own NATS user (else: admin's, or no auth)
                child_env["BATON_NATS_NKEY_SEED_FILE"] = stack.users[user]
            if name == "admission" and args.kubeconfig is None:  # simcluster calls a webhook
                tls = stack.run_dir / "admission-tls"
                port = free_port()
                child_env["BATON_ADMISSION_WEBHOOK_PORT"] = str(port)
                child_env["BATON_ADMISSION_TLS_SELF_SIGNED_DIR"] = str(tls)
                stack.webhook = stack.webhook or (port, tls)  # the first replica's is registered
            argv = baton(name)
            if name == "agent":  # one process for every simulated node; simulated egress
                if replica > 1:
                    break
                argv, child_env["BATON_AGENT_SIM_URL"] = (
                    baton(name, "--fleet"),
                    f"http://{stack.sim}",
                )
            log = stack.logs / f"{child_name}.log"
            stack.start(Child(child_name, argv, log, child_env))
    if args.prometheus:
        child, stack.prometheus = start_prometheus(
            ops=stack.ops, sim=stack.sim, cluster=args.cluster, run_dir=stack.run_dir,
            logs=stack.logs,
        )  # fmt: skip
        stack.children.append(child)


def cluster_nodes(args: argparse.Namespace) -> int:
    """The simulated cluster's most nodes (its pools grow to 2x with --autoscale)."""
    return int(args.nodes) * (2 if getattr(args, "autoscale", False) else 1)


def start_nats(args: argparse.Namespace, stack: Stack) -> str:
    port = free_port()
    store = args.store or stack.run_dir / "jetstream"
    nodes = cluster_nodes(args) if args.kubeconfig is None else 0
    if problem := store_problem(store, nodes=nodes):
        raise SystemExit(f"baton up: {problem}")
    stack.store, stack.nats_monitor = store, free_port()
    argv = [nats_server_binary(), "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(store)]
    argv += ["-m", str(stack.nats_monitor)]  # /healthz: is every stream writable
    url = f"nats://127.0.0.1:{port}"
    if not getattr(args, "no_auth", False):
        config, stack.users = write_nats_auth(args.cluster, stack.run_dir)
        argv += ["-c", str(config)]
    child = stack.start(Child("nats", argv, stack.logs / "nats.log", env=nats_env(os.environ)))
    wait_until(lambda: port_open(port), child=child, timeout=20)
    return url


# nats-server's Go heap, a soft limit: it collects harder near it instead of growing
# past it (deploy/base/nats.yaml sets the same beside the container's memory limit).
NATS_MEMORY_LIMIT = "900MiB"


def nats_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``GOMEMLIMIT`` for nats-server, unless the user set one (``off``: no limit)."""
    return {} if "GOMEMLIMIT" in environ else {"GOMEMLIMIT": NATS_MEMORY_LIMIT}


def write_nats_auth(cluster: str, run_dir: Path) -> tuple[Path, dict[str, str]]:
    """One NATS user (an nkey) per service, the fleet agent's and admin's, as ``baton
    nats-config`` writes them: the seeds in ``run_dir/nkeys/<user>`` (0600), the config
    in ``run_dir/nats.conf`` (the command line's address, port and store win over it).
    Returns the config's path and each user's seed file."""
    found = access.users(specs(), cluster, fleet=True)
    folder = run_dir / "nkeys"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    for user in found:
        write_seed(folder / user.name, user.seed)
    path = run_dir / "nats.conf"
    write_config(path, access.server_config(found, host="127.0.0.1", store_dir=None), found)
    return path, {user.name: str(folder / user.name) for user in found}


def start_sim(args: argparse.Namespace, stack: Stack) -> Path:
    kubeconfig = stack.run_dir / "kubeconfig"
    stack.sim = f"127.0.0.1:{free_port()}"
    argv = baton("sim", "--nodes", str(args.nodes), "--listen", stack.sim)
    if getattr(args, "devices", "plugin") != "plugin":
        argv += ["--devices", args.devices]
    # nodes join as kubelet's --register-with-taints would have them: under preflight, so
    # no work lands before health has validated them (docs/health.md)
    argv += [
        "--kubeconfig",
        str(kubeconfig),
        "--register-with-taints",
        f"{keys.PREFLIGHT}=:NoSchedule",
    ]
    if args.workload != "none":
        argv += ["--trace", args.workload, "--speed", str(args.speed)]
        if getattr(args, "submit", None):
            argv += ["--submit", args.submit]
        if getattr(args, "load", None):
            argv += ["--load", str(args.load)]
        if "admission" in getattr(args, "services", "").split(","):  # baton up registers it
            argv.append("--trace-after-webhook")
    if getattr(args, "autoscale", False):
        argv += ["--min-size", str(max(1, args.nodes // 2)), "--max-size", str(2 * args.nodes)]
    child = stack.start(Child("simcluster", argv, stack.logs / "simcluster.log"))
    wait_until(kubeconfig.exists, child=child, timeout=120)
    return kubeconfig


def _inspect_lines(stack: Stack) -> list[str]:
    """The read-only user's seed, beside the admin's: it reads what status, tail and why
    read and publishes nothing of Baton's."""
    seed = stack.users.get(access.INSPECT, "")
    if not seed:
        return []
    return [
        "# read only (status, tail, why, the nats CLI): "
        "BATON_NATS_NKEY_SEED_FILE=$BATON_NATS_INSPECT_SEED_FILE",
        f"BATON_NATS_INSPECT_SEED_FILE={seed}",
    ]


def write_endpoints(path: Path, stack: Stack, *, cluster: str) -> None:
    """``KEY=VALUE`` lines a shell can source (``set -a; . PATH; set +a``)."""
    lines = [
        f"BATON_NATS_URL={stack.nats_url}",
        *([f"BATON_NATS_NKEY_SEED_FILE={stack.nats_seed_file}"] if stack.nats_seed_file else []),
        *_inspect_lines(stack),
        f"KUBECONFIG={stack.kubeconfig}",
        f"BATON_CLUSTER={cluster}",
        "BATON_UP_OPS_PORTS=" + ",".join(f"{n}:{p}" for n, p in stack.ops.items()),
    ]
    if stack.prometheus:
        lines.append(f"BATON_PROMETHEUS_URL={stack.prometheus}")
    path.write_text("\n".join(lines) + "\n")
