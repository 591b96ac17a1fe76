"""``baton admission``: settings, wiring and the process entry.

Settings (environment, or a YAML/JSON file via ``--settings``):

| key | default | meaning |
|---|---|---|
| ``BATON_NATS_URL`` | ``nats://127.0.0.1:4222`` | NATS server |
| ``BATON_CLUSTER`` | ``c1`` | cluster token in every subject |
| ``BATON_OPS_PORT`` | ``9090`` | ``/metrics``, ``/healthz``, ``/readyz`` |
| ``BATON_ADMISSION_TEAMS_FILE`` | unset: one team owns everything | team config (YAML) |
| ``BATON_ADMISSION_TLS_CERT`` / ``_TLS_KEY`` | unset: no webhook | PEM files for HTTPS |
| ``BATON_ADMISSION_TLS_SELF_SIGNED_DIR`` | unset | no cert given: self-signed one made here |
| ``BATON_ADMISSION_TLS_HOSTS`` | ``127.0.0.1,localhost`` | names in the self-signed certificate |
| ``BATON_ADMISSION_WEBHOOK_PORT`` | ``8443`` | webhook port |
| ``BATON_ADMISSION_NOT_READY`` | ``baton-closed`` | before the state is loaded (see below) |
| ``BATON_ADMISSION_BORROW_PRIORITY_CLASS`` | unset | PriorityClass given to pods that borrow |
| ``BATON_ADMISSION_RELOAD_S`` | ``5`` | how often the team config file is checked for changes |

Self-signed: ``tls.crt``/``tls.key`` are made with the openssl CLI (without it the webhook
is off, logged) and reused while present; ``caBundle`` is base64 of ``tls.crt``.

Not ready: ``baton-closed`` rejects Baton-managed objects (gang pods, PodGroups, pods
with schedulerName baton) and admits the rest; ``closed`` rejects all; ``open`` admits all.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
from typing import Any, Literal

import msgspec
import structlog

from libs.bus import Bus
from libs.runtime import (
    SettingsError,
    configure_logging,
    load_settings,
    run_until_signalled,
    serve_ops,
)
from services.admission.certificates import CertificateError, self_signed
from services.admission.serving import tls_context
from services.admission.shell import Admission, load_teams
from services.admission.teams import TeamConfigError
from services.admission.webhook import Options

log = structlog.get_logger("baton.admission")


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    nats_url: str = "nats://127.0.0.1:4222"
    cluster: str = "c1"
    ops_port: int = 9090
    dry_run: bool = False  # accepted for uniformity: admission only publishes, the actuator writes
    teams_file: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_self_signed_dir: str = ""
    tls_hosts: str = "127.0.0.1,localhost"
    webhook_host: str = "0.0.0.0"
    webhook_port: int = 8443
    not_ready: Literal["baton-closed", "closed", "open"] = "baton-closed"
    borrow_priority_class: str = ""
    reload_s: float = 5.0

    def __post_init__(self) -> None:
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

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(h.strip() for h in self.tls_hosts.split(",") if h.strip())


def settings_from(env: dict[str, str], file: str | None = None) -> Settings:
    return load_settings(Settings, prefix="BATON_ADMISSION_", file=file, env=env)


async def serve(settings: Settings) -> None:
    bus = await Bus.connect(settings.nats_url, cluster=settings.cluster, name="admission")
    options = Options(
        policy=settings.not_ready, borrow_priority_class=settings.borrow_priority_class
    )
    admission = Admission(
        bus=bus, teams_file=settings.teams_file, options=options, reload_s=settings.reload_s
    )
    ops = await serve_ops(settings.ops_port, ready=lambda: admission.ready)
    tls = _tls(settings)
    if tls is None:
        log.warning("no TLS certificate: the webhook is off; quotas and team taints still run")
    log.info("admission starting", cluster=settings.cluster, ops_port=ops.port)
    try:
        await admission.run(tls=tls, host=settings.webhook_host, port=settings.webhook_port)
    finally:
        await ops.close()
        await bus.close()


def _tls(settings: Settings) -> ssl.SSLContext | None:
    cert, key = settings.tls_cert, settings.tls_key
    if not cert and settings.tls_self_signed_dir:
        try:
            cert, key = self_signed(settings.tls_self_signed_dir, hosts=settings.hosts)
        except CertificateError as exc:
            log.warning("no self-signed certificate: the webhook is off", error=str(exc))
            return None
        log.info("webhook serves a self-signed certificate", cert=cert, hosts=settings.hosts)
    return tls_context(cert, key) if cert else None


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="baton admission", description=__doc__.splitlines()[0])
    parser.add_argument("--settings", help="YAML or JSON file of settings (env wins)")
    parser.add_argument("--check-teams", metavar="FILE", help="validate a team config and exit")
    args = parser.parse_args(argv)
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
    asyncio.run(run_until_signalled(lambda: serve(settings)))
    return 0
