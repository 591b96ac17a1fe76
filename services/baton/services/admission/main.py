"""``baton admission``: settings, wiring and the process entry.

Settings (environment, or a YAML/JSON file via ``--settings``):

| key | default | meaning |
|---|---|---|
| ``BATON_NATS_URL`` | ``nats://127.0.0.1:4222`` | NATS server |
| ``BATON_CLUSTER`` | ``c1`` | cluster token in every subject |
| ``BATON_ADMISSION_OPS_PORT`` | ``9108`` | ``/metrics``, ``/healthz``, ``/readyz`` |
| ``BATON_ADMISSION_TEAMS_FILE`` | unset: one team owns everything | team config (YAML) |
| ``BATON_ADMISSION_TLS_CERT`` / ``_TLS_KEY`` | unset: no webhook | PEM files for HTTPS |
| ``BATON_ADMISSION_TLS_SELF_SIGNED_DIR`` | unset | no cert given: self-signed one made here |
| ``BATON_ADMISSION_TLS_HOSTS`` | ``127.0.0.1,localhost`` | names in the self-signed certificate |
| ``BATON_ADMISSION_WEBHOOK_PORT`` | ``8443`` | webhook port |
| ``BATON_ADMISSION_NOT_READY`` | ``baton-closed`` | before the state is loaded (see below) |
| ``BATON_ADMISSION_BORROW_PRIORITY_CLASS`` | unset | PriorityClass given to pods that borrow |
| ``BATON_ADMISSION_RELOAD_S`` | ``5`` | how often the team config file is checked for changes |

Self-signed: ``tls.crt``/``tls.key`` are made in Python (``certificates.py``; when that
fails the webhook is off, logged) and reused while present; ``caBundle`` is base64 of
``tls.crt``.

Not ready: ``baton-closed`` rejects Baton-managed objects (gang pods, PodGroups, pods
with schedulerName baton) and admits the rest; ``closed`` rejects all; ``open`` admits all.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
from typing import Any, Literal

import structlog

from baton.libs.bus import Bus
from baton.libs.runner import Input, Runner, Spec, Timer, serve
from baton.libs.runtime import (
    OPS_PORTS,
    SettingsError,
    configure_logging,
    load_settings,
    run_until_signalled,
)
from baton.libs.runtime.settings import Base
from baton.libs.runtime.teams import load_teams
from baton.proto.admission import TeamsLoaded
from baton.proto.k8s import (
    DeviceClassEvent,
    MachineDeploymentEvent,
    NodeEvent,
    PodEvent,
    PodGroupEvent,
    ResourceClaimEvent,
    ResourceSliceEvent,
)
from baton.proto.teams import TeamConfig
from baton.services.admission import core, shell
from baton.services.admission.certificates import CertificateError, self_signed
from baton.services.admission.core.webhook import Options
from baton.services.admission.serving import tls_context
from baton.services.admission.teams import TeamConfigError

log = structlog.get_logger("baton.admission")


class Settings(Base, frozen=True, kw_only=True):
    ops_port: int = OPS_PORTS["admission"]
    teams_file: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_self_signed_dir: str = ""
    tls_hosts: str = "127.0.0.1,localhost"
    webhook_host: str = "127.0.0.1"  # deploy/: the pod IP (downward API); demo: loopback
    webhook_port: int = 8443
    not_ready: Literal["baton-closed", "closed", "open"] = "baton-closed"
    borrow_priority_class: str = ""
    reload_s: float = 5.0
    cycle_interval: float = 5.0  # seconds between ticks while a PodGroup waits for members

    def __post_init__(self) -> None:
        super().__post_init__()
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key: set both (the webhook serves HTTPS) or neither")
        if self.tls_cert and self.tls_self_signed_dir:
            raise ValueError("tls_self_signed_dir: set it or tls_cert/tls_key, not both")
        if not self.hosts:
            raise ValueError("tls_hosts: expected comma-separated names or IPs")
        if not 0 <= self.webhook_port <= 65535:
            raise ValueError(f"webhook_port {self.webhook_port}: expected 0..65535")
        if self.reload_s <= 0:
            raise ValueError("reload_s must be positive")
        if self.cycle_interval <= 0:
            raise ValueError("cycle_interval must be positive")

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(h.strip() for h in self.tls_hosts.split(",") if h.strip())


SPEC = Spec(
    name="admission",
    description="Team quotas and taints: admits whole gangs against their team's quota, "
    "labels and taints team nodes, reclaims borrowed GPUs.",
    settings=Settings,
    policy=lambda settings: load_teams(settings.teams_file),
    policy_type=TeamConfig,
    initial=core.initial,
    step=core.step,
    inputs=(
        Input("k8s.node.>", NodeEvent),
        Input("k8s.machinedeployment.>", MachineDeploymentEvent),
        Input("k8s.podgroup.>", PodGroupEvent),
        Input("k8s.upstream-podgroup.>", PodGroupEvent),
        Input("k8s.volcano-podgroup.>", PodGroupEvent),
        Input("k8s.pod.>", PodEvent),
        Input("k8s.resourceslice.>", ResourceSliceEvent),
        Input("k8s.deviceclass.>", DeviceClassEvent),
        Input("k8s.resourceclaim.>", ResourceClaimEvent),
        Input("admission.teams", TeamsLoaded),
    ),
    routes=shell.ROUTES,
    publishes=("admission.>",),
    timer=Timer(every=lambda settings: settings.cycle_interval, wants=core.wants_tick),
    observe=shell.observe,
    gauges=shell.gauges,
)


def settings_from(env: dict[str, str], file: str | None = None) -> Settings:
    return load_settings(Settings, prefix="BATON_ADMISSION_", file=file, env=env)


def beside(
    settings: Settings, bus: Bus, *, bound: asyncio.Future[int] | None = None
) -> shell.Beside:
    options = Options(
        policy=settings.not_ready, borrow_priority_class=settings.borrow_priority_class
    )
    tls, off = _tls(settings)
    if tls is None:
        log.warning(f"{off}: the webhook is off; quotas and team taints still run")
    return shell.Beside(
        bus=bus, teams_file=settings.teams_file, options=options, reload_s=settings.reload_s,
        tls=tls, host=settings.webhook_host, port=settings.webhook_port, bound=bound, off=off,
    )  # fmt: skip


async def serve_admission(settings: Settings) -> None:
    extra: list[shell.Beside] = []

    async def make(bus: Bus) -> Runner[core.State]:
        extra.append(beside(settings, bus))
        return Runner(SPEC, bus=bus, settings=settings, dry_run=settings.dry_run,
                      stop_grace=settings.stop_grace_s)  # fmt: skip

    async def run_beside(runner: Runner[core.State]) -> None:
        await extra[0].run(runner)

    log.info("admission starting", cluster=settings.cluster, ops_port=settings.ops_port)
    await serve(SPEC, settings, make=make, beside=run_beside)


def _tls(settings: Settings) -> tuple[ssl.SSLContext | None, str]:
    """The webhook's TLS context, or None and why there is none."""
    cert, key = settings.tls_cert, settings.tls_key
    if not cert and settings.tls_self_signed_dir:
        try:
            cert, key = self_signed(settings.tls_self_signed_dir, hosts=settings.hosts)
        except CertificateError as exc:
            return None, f"no self-signed certificate ({exc})"
        log.info("webhook serves a self-signed certificate", cert=cert, hosts=settings.hosts)
    if not cert:
        return None, "no TLS certificate (BATON_ADMISSION_TLS_CERT or _TLS_SELF_SIGNED_DIR)"
    return tls_context(cert, key), ""


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="baton admission", description=__doc__.splitlines()[0])
    parser.add_argument("--settings", help="YAML or JSON file of settings (env wins)")
    parser.add_argument("--check-teams", metavar="FILE", help="validate a team config and exit")
    parser.add_argument(
        "--make-cert", metavar="DIR", help="write a self-signed tls.crt and tls.key there, exit"
    )
    parser.add_argument("--hosts", default="baton-admission.baton-system.svc",
                        help="names in --make-cert's certificate, comma separated")  # fmt: skip
    args = parser.parse_args(argv)
    if args.make_cert:
        hosts = tuple(h.strip() for h in args.hosts.split(",") if h.strip())
        try:
            cert, key = self_signed(args.make_cert, hosts=hosts)
        except CertificateError as exc:
            parser.exit(2, f"baton admission: {exc}\n")
        print(f"{cert} {key} (for {', '.join(hosts)}; caBundle: base64 of {cert})")
        return 0
    if args.check_teams:
        try:
            config = load_teams(args.check_teams)
        except TeamConfigError as exc:
            parser.exit(2, f"baton admission: {exc}\n")
        print(f"{args.check_teams}: ok, teams: {', '.join(t.name for t in config.teams)}")
        return 0
    env: dict[str, Any] = dict(os.environ)
    try:
        settings = settings_from(env, args.settings)
        load_teams(settings.teams_file)  # refuse a bad team config before doing anything
    except (SettingsError, TeamConfigError) as exc:
        parser.exit(2, f"baton admission: {exc}\n")
    configure_logging(service="admission")
    deadline = settings.stop_grace_s + 10.0
    asyncio.run(run_until_signalled(lambda: serve_admission(settings), deadline=deadline))
    return 0
