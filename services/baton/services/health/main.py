"""``baton health``: settings, the service's spec, its entry, and the pause switch.

    baton health                          # the service (BATON_HEALTH_* settings)
    baton health pause --reason "driver rollout"   # take no node out until resumed
    baton health resume

Settings come from ``BATON_HEALTH_<NAME>`` (or ``BATON_<NAME>`` for the shared ones)
and an optional file named by ``BATON_HEALTH_CONFIG`` or ``--settings``. See
docs/health.md.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import socket
import sys
import time

import msgspec

from baton.libs.bus import Bus, operator, publishing
from baton.libs.bus.connection import auth_options
from baton.libs.bus.operator import NoBus
from baton.libs.runner import Input, Runner, Spec, Timer, serve
from baton.libs.runtime import SettingsError, load_settings, run_service
from baton.libs.runtime.ops import OPS_PORTS
from baton.libs.runtime.settings import Base, require
from baton.proto import health
from baton.proto.actions import ActionResult
from baton.proto.health import Control, HealthPolicy, Heard, Silence
from baton.proto.k8s import NodeEvent, PodEvent, ResourceSliceEvent
from baton.proto.telemetry import GpuReport, NodeReport, XidEvent
from baton.services.health import core, heartbeats, shell

PREFIX = "BATON_HEALTH_"


class Settings(Base, frozen=True, kw_only=True):
    """Every ``HealthPolicy`` field (same name, same default: a unit test checks) and the
    service's own."""

    ops_port: int = OPS_PORTS["health"]
    after_s: dict[str, float] = {}
    flap_window_s: float = 600.0
    flap_count: int = 3
    nvlink_errors_max: int = 100
    zombie_mib_max: int = 1024
    disk_full_ratio: float = 0.95
    drain_grace_s: float = 300.0
    drain_timeout_s: float = 900.0
    remediation_recheck_s: float = 600.0
    preflight: bool = True
    new_node_s: float = 3600.0
    preflight_namespace: str = "baton-system"
    preflight_image: str = "nvcr.io/nvidia/cloud-native/dcgm:3.3.8-1-ubuntu22.04"
    preflight_command: tuple[str, ...] = ("dcgmi", "diag", "-r", "2")
    preflight_timeout_s: float = 900.0
    max_testing: int = 8
    testing_share: float = 0.25
    recheck_days: float = 7.0
    recheck_retry_s: float = 600.0
    cap_rack: float = 0.25
    cap_block: float = 0.2
    cap_pool: float = 0.2
    cap_cluster: float = 0.2
    cap_min: int = 1
    release_interval_s: float = 10.0
    release_max: int = 64
    probation_s: float = 600.0
    paused: bool = False  # start paused (the last `baton health pause|resume` wins)
    tick_s: float = 1.0  # how often time is looked at while something waits for it
    silence_after_s: float = 60.0  # the least silence that counts (older agents say no period)
    silence_beats: float = 3.0  # a node is silent after this many of its agent's keep-alives
    config: str = ""  # BATON_HEALTH_CONFIG: a settings file (read before the others)

    def __post_init__(self) -> None:
        super().__post_init__()
        shares = ("cap_rack", "cap_block", "cap_pool", "cap_cluster", "disk_full_ratio",
                  "testing_share")  # fmt: skip
        checks = {
            "TICK_S": self.tick_s > 0,
            "SILENCE_AFTER_S": self.silence_after_s > 0,
            "SILENCE_BEATS": self.silence_beats >= 1,
            "FLAP_WINDOW_S": self.flap_window_s > 0,
            "FLAP_COUNT": self.flap_count >= 2,
            "DRAIN_GRACE_S": self.drain_grace_s >= 0,
            "DRAIN_TIMEOUT_S": self.drain_timeout_s >= self.drain_grace_s,
            "REMEDIATION_RECHECK_S": self.remediation_recheck_s > 0,
            "PREFLIGHT_TIMEOUT_S": self.preflight_timeout_s > 0,
            "PREFLIGHT_COMMAND": all(self.preflight_command),
            "PREFLIGHT_NAMESPACE": bool(self.preflight_namespace),
            "MAX_TESTING": self.max_testing >= 1,
            "RECHECK_DAYS": self.recheck_days > 0,
            "RECHECK_RETRY_S": self.recheck_retry_s > 0,
            "CAP_MIN": self.cap_min >= 0,
            "RELEASE_INTERVAL_S": self.release_interval_s > 0,
            "RELEASE_MAX": self.release_max >= 1,
            "AFTER_S": all(v >= 0 for v in self.after_s.values()),
            **{name.upper(): 0 <= getattr(self, name) <= 1 for name in shares},
        }
        require(PREFIX, checks)


SPEC = Spec(
    name="health",
    description="GPU node health: verdicts from telemetry, conditions and preflight checks; "
    "quarantine, gang-aware drain, remediation and return, within safety rails.",
    settings=Settings,
    policy_type=HealthPolicy,
    initial=core.initial,
    step=core.step,
    inputs=(
        Input("k8s.node.>", NodeEvent),
        Input("k8s.pod.>", PodEvent),
        Input("telemetry.gpu.>", GpuReport, bootstrap=True),  # the last report of each node
        Input("telemetry.node.>", NodeReport, bootstrap=True),
        Input("telemetry.xid.>", XidEvent),
        Input("k8s.resourceslice.>", ResourceSliceEvent),  # DRA: what drivers publish
        Input(f"health.{health.SILENCE}.>", Silence),
        Input(f"health.{health.HEARD}.>", Heard),
        Input(f"health.{health.CONTROL}", Control),
        Input("result.create-pod.>", ActionResult),
        Input("result.mark-node.>", ActionResult),  # a failed one is asked again
        Input("result.delete-pod.>", ActionResult),  # a sweep answered: the next goes
    ),
    routes=shell.ROUTES,
    publishes=("health.>",),
    reads=("telemetry.heartbeat.>",),  # the heartbeat watch beside the runner
    timer=Timer(every=lambda settings: settings.tick_s, wants=core.wants_tick),
    observe=shell.observe,
    gauges=shell.gauges,
)


async def serve_health(settings: Settings) -> None:
    """The runner, with the pause switch as it was last set, and the heartbeat watch."""

    async def make(bus: Bus) -> Runner[core.State]:
        control = await shell.last_control(bus)
        start = settings
        if control is not None:
            start = msgspec.structs.replace(settings, paused=control.paused)
        return Runner(SPEC, bus=bus, settings=start, dry_run=settings.dry_run,
                      stop_grace=settings.stop_grace_s)  # fmt: skip

    async def beside(runner: Runner[core.State]) -> None:
        await heartbeats.watch(
            runner.bus, after_s=settings.silence_after_s, beats_missed=settings.silence_beats,
            ready=lambda: runner.started is not None and runner.leader,
        )  # fmt: skip

    await serve(SPEC, settings, make=make, beside=beside)


def run(argv: list[str]) -> int:
    if argv and argv[0] in ("pause", "resume"):
        return switch(argv)
    return run_service(
        argv,
        name="health",
        description=SPEC.description + " Settings: BATON_HEALTH_* variables. "
        "'baton health pause|resume' flips the pause switch.",
        load=lambda file: load_settings(Settings, PREFIX, file=file),
        serve=serve_health,
        dry_run="publish verdicts, no actions",
    )


def switch(argv: list[str]) -> int:
    """``baton health pause|resume [--reason R]``: publish the pause switch."""
    parser = argparse.ArgumentParser(prog=f"baton health {argv[0]}")
    parser.add_argument("--reason", default="", help="why, for the people who read it")
    parser.add_argument("--settings", help="YAML or JSON file of settings (environment wins)")
    parser.add_argument("--nats", help="NATS URL (default: BATON_NATS_URL), as status and tail")
    args = parser.parse_args(argv[1:])
    try:
        settings = load_settings(Settings, PREFIX, file=args.settings)
    except SettingsError as exc:
        print(f"baton health: {exc}", file=sys.stderr)
        return 2
    if args.nats:
        settings = msgspec.structs.replace(settings, nats_url=args.nats)
    by = f"{getpass.getuser()}@{socket.gethostname()}"
    control = Control(at=time.time(), paused=argv[0] == "pause", by=by, reason=args.reason)
    try:
        asyncio.run(publish_control(settings, control))
    except (NoBus, SettingsError) as exc:  # one line, as status and tail say it
        print(f"baton health: {exc}", file=sys.stderr)
        return 1
    print(f"baton health: {'paused' if control.paused else 'resumed'}")
    return 0


async def publish_control(settings: Base, control: Control) -> None:
    """Publish the switch with one try (``NoBus``: one line saying what to set or check),
    and nothing logged: the tool prints its own line."""
    auth = auth_options(seed_file=settings.nats_nkey_seed_file, ca_file=settings.nats_ca_file)
    nc = await operator.connect(settings.nats_url, name="health-switch", auth=auth)
    try:
        subject = health.control_subject(settings.cluster)
        try:
            await publishing.publish(nc.jetstream(), subject, control,
                                     msg_id=f"control:{control.at!r}")  # fmt: skip
        except Exception as exc:  # no stream (Baton not running there) or not allowed
            raise NoBus(
                f"NATS at {settings.nats_url} did not store the switch on "
                f"{subject} ({type(exc).__name__}: {exc}): is Baton running "
                "there, and is BATON_NATS_NKEY_SEED_FILE the operator's?"
            ) from None
    finally:
        await nc.close()
