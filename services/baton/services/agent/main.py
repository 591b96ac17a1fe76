"""``baton agent``: the node agent (one per node, a DaemonSet). Settings, wiring, ``--once``.

    baton agent --node gpu-0001                 # NVML, kernel log, disks, NICs -> NATS
    baton agent --node gpu-0001 --once --json   # one round of readings and telemetry; no NATS
    BATON_AGENT_SIM_URL=http://127.0.0.1:6443 baton agent --fleet   # every simulated node

The node name comes from ``--node``, else ``BATON_AGENT_NODE``, else ``NODE_NAME`` (set
by the DaemonSet from the downward API). The agent never calls the Kubernetes API.
Settings are ``BATON_AGENT_<NAME>`` (or ``BATON_<NAME>`` for the shared ones); see
``docs/agent.md`` for the table.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp
import msgspec
import structlog

from baton.libs.bus import Bus
from baton.libs.kube.quantities import InvalidQuantity, parse_quantity
from baton.libs.runner.access import AGENT_FLEET, agent_inbox, agent_user_name
from baton.libs.runtime import (
    OPS_PORTS,
    SettingsError,
    configure_logging,
    load_settings,
    run_until_signalled,
    serve_ops,
)
from baton.libs.runtime.nkey import seed_file_public_key
from baton.libs.runtime.settings import require
from baton.proto import subjects
from baton.services.agent import core
from baton.services.agent.backends import HostPoller, KernelLogPoller, Poller
from baton.services.agent.core.readings import AnyReading, Tick
from baton.services.agent.core.tc import Layout
from baton.services.agent.counting import Changed
from baton.services.agent.egress import Egress, FleetEgress, Netlink
from baton.services.agent.nvml import Nvml
from baton.services.agent.pods import PodResources
from baton.services.agent.shell import Agent, Emit, Source, nvml_events, polling
from baton.services.agent.simulated import SimHardware

PREFIX = "BATON_AGENT_"
log = structlog.get_logger("baton.agent")


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    nats_url: str = "nats://127.0.0.1:4222"
    # With NATS auth: a folder of nkey seeds, one per agent user (``baton nats-config``);
    # the agent connects as its node's user (file ``agent-<node>``).
    nats_credentials_dir: str = ""
    nats_nkey_seed_file: str = ""  # one seed for this agent (baton up's fleet)
    # With the auth callout (docs/security.md): no seed; the pod's projected ServiceAccount
    # token (audience nats), sent as auth_token and read again at every reconnect.
    nats_token_file: str = ""
    nats_ca_file: str = ""  # CA of NATS's certificate, for a tls:// URL
    cluster: str = "c1"
    ops_port: int = OPS_PORTS["agent"]
    node: str = ""
    backend: Literal["host", "sim"] = "host"
    sim_url: str = ""  # simcluster's base URL (backend sim, --fleet)
    expected_gpus: int = -1  # GPUs this node should have; -1: not configured
    interval_s: float = 10.0  # NVML, disks, NICs, pods
    kmsg_interval_s: float = 1.0
    heartbeat_s: float = 60.0
    refresh_s: float = 300.0
    temperature_deadband_c: float = 3.0
    disk_deadband: float = 0.01
    xid_merge_s: float = 5.0
    nvml: bool = True
    kernel_log: Literal["auto", "kmsg", "journal", "off"] = "auto"
    mounts: tuple[str, ...] = ("/",)
    host_root: str = ""  # where the host's / is mounted ("/host" in the DaemonSet)
    mounts_file: str = "/proc/mounts"
    nics: tuple[str, ...] = ()  # names or globs; empty: the physical NICs
    sys_net: str = "/sys/class/net"
    # Egress limits (docs/bandwidth.md): apply this node's NodeLimits with tc (NET_ADMIN)
    shape: bool = True
    hooks: tuple[str, ...] = ("cni0",)  # where pod egress enters the host (bridge or veths)
    ifb: str = "baton-egress"  # the agent's own IFB device
    line_rate: str = "100G"  # rate of the unshaped classes
    leaf: str = ""  # leaf qdisc of shaped classes ("fq_codel"); "": HTB's default
    egress_s: float = 5.0  # measure pods' egress this often
    # publish a measurement when a rate moved by egress_deadband and egress_deadband_bps,
    # and at least every egress_keepalive_s
    egress_keepalive_s: float = 60.0
    egress_deadband: float = 0.1
    egress_deadband_bps: int = 1_000_000
    # --fleet: simulated pod egress (services/baton/services/agent/core/traffic.py)
    sim_egress: bool = True
    sim_egress_seed: int = 1
    sim_egress_mean: str = "50M"
    sim_egress_period_s: float = 60.0

    def __post_init__(self) -> None:
        checks = {
            "INTERVAL_S": self.interval_s > 0,
            "KMSG_INTERVAL_S": self.kmsg_interval_s > 0,
            "HEARTBEAT_S": self.heartbeat_s > 0,
            "REFRESH_S": self.refresh_s > 0,
            "TEMPERATURE_DEADBAND_C": self.temperature_deadband_c >= 0,
            "DISK_DEADBAND": 0 <= self.disk_deadband < 1,
            "XID_MERGE_S": self.xid_merge_s >= 0,
            "EXPECTED_GPUS": self.expected_gpus >= -1,
            "MOUNTS": all(m.startswith("/") for m in self.mounts),
            "SIM_URL": self.backend != "sim" or self.sim_url.startswith(("http://", "https://")),
            "EGRESS_S": self.egress_s > 0,
            "EGRESS_KEEPALIVE_S": self.egress_keepalive_s > 0,
            "EGRESS_DEADBAND": 0 <= self.egress_deadband < 1,
            "EGRESS_DEADBAND_BPS": self.egress_deadband_bps >= 0,
            "SIM_EGRESS_PERIOD_S": self.sim_egress_period_s > 0,
            "LINE_RATE": _rate(self.line_rate) > 0,
            "SIM_EGRESS_MEAN": _rate(self.sim_egress_mean) >= 0,
        }
        require(PREFIX, checks, problem="is out of range or missing")

    def config(self, node: str, backends: tuple[str, ...]) -> core.Config:
        return core.Config(
            node=node, version=_version(), backends=backends, heartbeat_s=self.heartbeat_s,
            refresh_s=self.refresh_s, temperature_deadband_c=self.temperature_deadband_c,
            disk_deadband=self.disk_deadband, xid_merge_s=self.xid_merge_s,
        )  # fmt: skip

    def changed(self) -> Changed:
        return Changed(keepalive_s=self.egress_keepalive_s, ratio=self.egress_deadband,
                       bps=self.egress_deadband_bps)  # fmt: skip


def _rate(text: str) -> int:
    """A bandwidth quantity (``100G``) in bits per second; -1 when it is not one."""
    try:
        return int(parse_quantity(text))
    except InvalidQuantity:
        return -1


def _version() -> str:
    try:
        return importlib.metadata.version("baton")
    except importlib.metadata.PackageNotFoundError:
        return ""


def load(file: str | None, env: Mapping[str, str]) -> Settings:
    return load_settings(Settings, PREFIX, file=file, env=env)


def node_name(flag: str | None, settings: Settings, env: Mapping[str, str]) -> str:
    """``--node``, else BATON_AGENT_NODE, else NODE_NAME; raises SettingsError naming the key."""
    for key, value in (("--node", flag), (f"{PREFIX}NODE", settings.node),
                       ("NODE_NAME", env.get("NODE_NAME"))):  # fmt: skip
        if value:
            try:
                subjects.encode_name(value)
            except subjects.InvalidName as exc:
                raise SettingsError(f"{key}: {exc}") from exc
            return value
    raise SettingsError(f"--node, {PREFIX}NODE or NODE_NAME: required, not set")


@dataclass
class Wiring:
    """The backends of one agent process: pollers (polled every interval) and sources."""

    backends: tuple[str, ...]
    pollers: list[tuple[Poller, float]] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    sim: SimHardware | None = None


def wire(settings: Settings, *, node: str, fleet: bool, clock: Any = time.time) -> Wiring:
    if fleet or settings.backend == "sim":
        sim = SimHardware(settings.sim_url, nodes=None if fleet else [node], clock=clock)
        return Wiring(backends=(sim.name,), sources=[sim.run], sim=sim)
    pollers: list[tuple[Poller, float]] = [
        (HostPoller(mounts=settings.mounts, root=settings.host_root,
                    mounts_file=settings.mounts_file, sys_net=settings.sys_net,
                    nic_names=settings.nics), settings.interval_s),
        (PodResources(), settings.interval_s),
    ]  # fmt: skip
    if settings.kernel_log != "off":
        pollers.append((KernelLogPoller(settings.kernel_log), settings.kmsg_interval_s))
    sources: list[Source] = []
    if settings.nvml:
        expected = settings.expected_gpus if settings.expected_gpus >= 0 else None
        nvml = Nvml(expected=expected)
        pollers.append((nvml, settings.interval_s))
        sources.append(nvml_events(nvml, node=node, idle_s=settings.interval_s, clock=clock))
    sources += [polling(p, node=node, interval_s=every, clock=clock) for p, every in pollers]
    return Wiring(backends=tuple(p.name for p, _ in pollers), pollers=pollers, sources=sources)


async def serve(
    settings: Settings, *, node: str, fleet: bool, seed_file: str = "", token_file: str = ""
) -> None:
    wiring = wire(settings, node=node, fleet=fleet)
    agent = Agent(
        config=settings.config(node, wiring.backends),
        cluster=settings.cluster,
        nodes=() if fleet else (node,),
    )
    name = "agent-fleet" if fleet else f"agent-{node}"
    bus = await Bus.connect(settings.nats_url, cluster=settings.cluster, name=name,
                            ca_file=settings.nats_ca_file, seed_file=seed_file,
                            token_file=token_file,
                            inbox=agent_inbox(node) if token_file else "")  # fmt: skip
    egress, shaping = egress_source(settings, bus=bus, node=node, fleet=fleet)
    ready = lambda: (agent.ready or shaping()) and bus.nc.is_connected  # noqa: E731
    ops = await serve_ops(settings.ops_port, ready=ready, service="agent")
    log.info("agent starting", node=node or "(fleet)", backends=wiring.backends, ops_port=ops.port)
    try:
        await agent.run(bus, [*wiring.sources, *egress])
    finally:
        await ops.close()
        await bus.close()


def nats_seed_file(settings: Settings, *, user: str) -> str:
    """The nkey seed file this agent connects with: ``nats_credentials_dir/<user>`` when
    that is set, else ``nats_nkey_seed_file`` ("" : no NATS auth). A missing or invalid
    seed raises ``SettingsError`` naming the setting."""
    if settings.nats_credentials_dir:
        path = str(Path(settings.nats_credentials_dir) / user)
        setting = f"{PREFIX}NATS_CREDENTIALS_DIR"
        if not Path(path).is_file():
            raise SettingsError(
                f"{setting}: no nkey seed for NATS user {user!r} at {path}; generate it "
                "with baton nats-config --node"
            )
    elif settings.nats_nkey_seed_file:
        path, setting = settings.nats_nkey_seed_file, f"{PREFIX}NATS_NKEY_SEED_FILE"
    else:
        return ""
    seed_file_public_key(path, setting=setting)
    return path


def nats_token_file(settings: Settings, *, fleet: bool) -> str:
    """The token file this agent connects with ("": none, use a seed if any). Unreadable,
    empty, with --fleet or beside a seed: ``SettingsError`` naming the setting."""
    path, setting = settings.nats_token_file, f"{PREFIX}NATS_TOKEN_FILE"
    if not path:
        return ""
    if fleet:
        raise SettingsError(f"{setting}: not with --fleet (the fleet is one user, with a seed)")
    if settings.nats_credentials_dir or settings.nats_nkey_seed_file:
        raise SettingsError(f"{setting}: set it or a seed ({PREFIX}NATS_CREDENTIALS_DIR, "
                            f"{PREFIX}NATS_NKEY_SEED_FILE), not both")  # fmt: skip
    try:
        text = Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{setting}: cannot read {path} ({exc})") from exc
    if not text:
        raise SettingsError(f"{setting}: {path} is empty (a projected ServiceAccount token?)")
    return path


def egress_source(
    settings: Settings, *, bus: Bus, node: str, fleet: bool
) -> tuple[list[Source], Callable[[], bool]]:
    """Egress limits as one more source of the agent's loop (it emits no readings), and
    whether they work: limits applied (a node), limits followed (the fleet)."""
    if fleet:
        if not settings.sim_egress:
            return [], lambda: False
        sim = FleetEgress(bus, seed=settings.sim_egress_seed, egress_s=settings.egress_s,
                          changed=settings.changed(), mean_bps=_rate(settings.sim_egress_mean),
                          period_s=settings.sim_egress_period_s)  # fmt: skip
        return [lambda emit: sim.run()], lambda: sim.following
    if not settings.shape:
        return [], lambda: False
    made: list[Egress] = []

    async def shape(emit: Emit) -> None:
        layout = Layout(ifb=settings.ifb, hooks=settings.hooks,
                        line_bps=_rate(settings.line_rate), leaf=settings.leaf)  # fmt: skip
        netlink = await Netlink(layout).open()
        try:
            made.append(Egress(bus, node, netlink=netlink, egress_s=settings.egress_s,
                               changed=settings.changed()))  # fmt: skip
            await made[0].run()
        finally:
            await netlink.close()

    return [shape], lambda: any(e.applied is not None for e in made)


async def once(settings: Settings, *, node: str, fleet: bool) -> dict[str, Any]:
    """One round: every backend read once, a tick, and what would be published."""
    wiring = wire(settings, node=node, fleet=fleet)
    agent = Agent(
        config=settings.config(node, wiring.backends),
        cluster=settings.cluster,
        nodes=() if fleet else (node,),
    )
    read: list[tuple[str, AnyReading]] = []
    if wiring.sim is not None:
        async with aiohttp.ClientSession() as session:
            await wiring.sim.relist(session, lambda n, r: read.append((n, r)))
    for poller, _ in wiring.pollers:
        read += [(node, r) for r in await asyncio.to_thread(poller.poll, time.time())]
    outputs = [o for n, r in read for o in agent.feed(n, r)]
    outputs += [o for n in list(agent.states) for o in agent.feed(n, Tick(at=time.time()))]
    return {
        "readings": [{"node": n, **msgspec.to_builtins(r)} for n, r in read],
        "telemetry": [
            {"subject": o.subject, "msg_id": o.msg_id, "event": msgspec.to_builtins(o.event)}
            for o in agent.outgoing(outputs)
        ],
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="baton agent",
        description="Node agent: GPU (NVML), kernel log Xids, disks and NICs -> "
        "baton.<cluster>.telemetry.<kind>.<node>. Settings: BATON_AGENT_* variables.",
    )
    parser.add_argument("--settings", help="YAML or JSON file of settings (environment wins)")
    parser.add_argument("--node", help="this node's name (else BATON_AGENT_NODE, NODE_NAME)")
    parser.add_argument(
        "--fleet", action="store_true", help="simulation: one core per simulated node"
    )
    parser.add_argument("--once", action="store_true", help="read once, print, exit (no NATS)")
    parser.add_argument("--json", action="store_true", help="with --once: print one JSON document")
    return parser.parse_args(argv)


def run(argv: list[str]) -> int:
    args = parse_args(argv)
    env = dict(os.environ)
    try:
        settings = load(args.settings, env)
        if args.fleet:
            if not settings.sim_url:
                raise SettingsError(f"{PREFIX}SIM_URL: required with --fleet, not set")
            settings = msgspec.structs.replace(settings, backend="sim")
        node = "" if args.fleet else node_name(args.node, settings, env)
        user = AGENT_FLEET if args.fleet else agent_user_name(node)
        token_file = "" if args.once else nats_token_file(settings, fleet=args.fleet)
        seed_file = "" if args.once or token_file else nats_seed_file(settings, user=user)
    except SettingsError as exc:
        print(f"baton agent: {exc}", file=sys.stderr)
        return 2
    configure_logging(service="agent")
    if args.once:
        result = asyncio.run(once(settings, node=node, fleet=args.fleet))
        print(_render(result, as_json=args.json))
        return 0
    asyncio.run(run_until_signalled(
        lambda: serve(settings, node=node, fleet=args.fleet, seed_file=seed_file,
                      token_file=token_file)))  # fmt: skip
    return 0


def _render(result: dict[str, Any], *, as_json: bool) -> str:
    if as_json:
        return msgspec.json.format(msgspec.json.encode(result), indent=2).decode()
    lines = [f"{r['node']}  {r['reading']}" for r in result["readings"]]
    lines += [
        f"{t['subject']}  {msgspec.json.encode(t['event']).decode()}" for t in result["telemetry"]
    ]
    return "\n".join(lines)
