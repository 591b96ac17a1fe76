"""``baton callout``: NATS auth callout for node agents (settings, wiring, entry).

Each node agent connects with its pod's projected ServiceAccount token (audience
``nats``) instead of a seed; NATS hands the CONNECT to this service (a user subscribed
to ``$SYS.REQ.USER.AUTH``), which asks Kubernetes a TokenReview and answers with a
user that may do exactly what its node's agent may (``access.agent_permissions``).
When a pod in the agents' namespace, or a node, is deleted (the bridge's event), each
replica closes the agents' connections it let in for it (``revoking``); at start and
every ``resync_s`` each reads every server's agent connections and the agents' pods, and
closes the connections of pods gone meanwhile. See docs/security.md. Replicas share the
answers (a queue group).

| key | default | meaning |
|---|---|---|
| ``BATON_NATS_URL`` / ``_CA_FILE`` | | NATS, as every service |
| ``BATON_NATS_NKEY_SEED_FILE`` | required | its own NATS user (``nats-config --callout``) |
| ``BATON_CALLOUT_ISSUER_SEED_FILE`` | required | account seed (``SA...``) signing answers |
| ``BATON_CALLOUT_KICK_SEED_FILE`` | | its ``callout-kick`` user: closes gone pods' agents |
| ``BATON_CALLOUT_RESYNC_S`` | ``300`` | how often it reads every agent connection and pod |
| ``BATON_CALLOUT_NAMESPACE`` | ``baton-agent`` | the agents' ServiceAccount's namespace |
| ``BATON_CALLOUT_SERVICE_ACCOUNT`` | ``baton-agent`` | the agents' ServiceAccount |
| ``BATON_CALLOUT_AUDIENCE`` | ``nats`` | the audience tokens must be for |
| ``BATON_CALLOUT_MAX_S`` | ``3600`` | a user's longest life (never past its token's expiry) |
| ``BATON_CALLOUT_KUBECONFIG`` | in-cluster | the API server that reviews tokens |
| ``BATON_CALLOUT_OPS_PORT`` | ``9114`` | ``/metrics``, ``/healthz``, ``/readyz`` |
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

import nats
import structlog

from baton.libs.bus import Bus
from baton.libs.bus.connection import auth_options
from baton.libs.kube.client import api_client
from baton.libs.runtime import (
    OPS_PORTS,
    SettingsError,
    configure_logging,
    load_settings,
    run_until_signalled,
    serve_ops,
)
from baton.libs.runtime.nkey import account_pair, seed_file_public_key
from baton.libs.runtime.settings import Base, policy_from, require
from baton.libs.runtime.stopping import checkpoint
from baton.proto import subjects
from baton.services.callout import core, shell

PREFIX = "BATON_CALLOUT_"
SUBJECT = "$SYS.REQ.USER.AUTH"
QUEUE = "baton-callout"
log = structlog.get_logger("baton.callout")


class Settings(Base, frozen=True, kw_only=True):
    ops_port: int = OPS_PORTS["callout"]
    issuer_seed_file: str = ""
    namespace: str = "baton-agent"
    service_account: str = "baton-agent"
    audience: str = "nats"
    max_s: int = 3600
    kubeconfig: str = ""
    kick_seed_file: str = ""
    resync_s: float = 300.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require(PREFIX, {"MAX_S": self.max_s > 0, "AUDIENCE": bool(self.audience),
                         "RESYNC_S": self.resync_s > 0,
                         "NAMESPACE": bool(self.namespace),
                         "SERVICE_ACCOUNT": bool(self.service_account)})  # fmt: skip

    def policy(self) -> core.Policy:
        return policy_from(self, core.Policy)


def issuer_seed(settings: Settings) -> str:
    """The issuer account seed; ``SettingsError`` naming the key when missing or bad."""
    key = f"{PREFIX}ISSUER_SEED_FILE"
    if not settings.issuer_seed_file:
        raise SettingsError(f"{key}: required (the account seed that signs the answers)")
    try:
        seed = Path(settings.issuer_seed_file).read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{key}: cannot read {settings.issuer_seed_file} ({exc})") from exc
    try:
        account_pair(seed)
    except ValueError as exc:
        raise SettingsError(f"{key}: {settings.issuer_seed_file}: {exc}") from exc
    return seed


def settings_from(env: dict[str, Any], file: str | None = None) -> Settings:
    settings = load_settings(Settings, PREFIX, file, env)
    if not settings.nats_nkey_seed_file:
        raise SettingsError("BATON_NATS_NKEY_SEED_FILE: required (the callout's own NATS user)")
    issuer_seed(settings)
    if settings.kick_seed_file:
        seed_file_public_key(settings.kick_seed_file, setting=f"{PREFIX}KICK_SEED_FILE")
    return settings


async def system_connection(settings: Settings) -> Any:
    """The ``callout-kick`` user's connection (None: no kick seed)."""
    if not settings.kick_seed_file:
        log.warning("callout: no BATON_CALLOUT_KICK_SEED_FILE: agents keep their connection "
                    "after their pod is deleted, until their token expires")  # fmt: skip
        return None
    options = auth_options(seed_file=settings.kick_seed_file, ca_file=settings.nats_ca_file)
    return await nats.connect(settings.nats_url, name="callout-kick", **options)


async def resyncing(callout: shell.Callout, every: float) -> None:
    """``callout.resync`` now and every ``every`` seconds; a failed one is logged and
    tried again at the next."""
    while True:
        try:
            await callout.resync()
        except Exception as exc:  # NATS or the API away: the deletions still close agents
            log.warning("callout: resync failed", error=f"{type(exc).__name__}: {exc}")
        checkpoint()  # nats-py may have swallowed a cancel in the resync
        await asyncio.sleep(every)


async def serve(settings: Settings, *, ready: asyncio.Event | None = None) -> None:
    client = await api_client(settings.kubeconfig)
    kick_nc = await system_connection(settings)
    kick = shell.nats_kicker(kick_nc) if kick_nc is not None else None
    callout = shell.Callout(
        issuer_seed=issuer_seed(settings), policy=settings.policy(),
        review=shell.kube_reviewer(client), kick=kick,
        listing=shell.nats_lister(kick_nc) if kick_nc is not None else None,
        pods=shell.kube_pod_lister(client, settings.namespace),
    )  # fmt: skip
    bus = await Bus.connect(settings.nats_url, cluster=settings.cluster, name="callout",
                            ca_file=settings.nats_ca_file,
                            seed_file=settings.nats_nkey_seed_file)  # fmt: skip
    gone = []
    if kick is not None:  # every replica hears every deletion (no queue group)
        for kind in ("pod", "node"):
            wanted = subjects.wildcard(settings.cluster, subjects.K8S, kind, ">")
            gone.append(await bus.nc.subscribe(wanted, cb=callout.handle_k8s))
    sub = await bus.nc.subscribe(SUBJECT, queue=QUEUE, cb=callout.handle)
    resync = asyncio.create_task(resyncing(callout, settings.resync_s), name="callout resync")
    ops = await serve_ops(settings.ops_port, ready=lambda: bus.nc.is_connected, service="callout")
    log.info("callout serving", issuer=callout.issuer, subject=SUBJECT, ops_port=ops.port,
             agents=settings.policy().username)  # fmt: skip
    if ready is not None:
        ready.set()
    try:
        await asyncio.Event().wait()
    finally:
        resync.cancel()
        await asyncio.gather(resync, return_exceptions=True)
        await sub.unsubscribe()
        for each in gone:
            await each.unsubscribe()
        await ops.close()
        await bus.close()
        if kick_nc is not None:
            await kick_nc.close()
        await client.close()


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="baton callout", description=__doc__.splitlines()[0])
    parser.add_argument("--settings", help="YAML or JSON file of settings (env wins)")
    args = parser.parse_args(argv)
    try:
        settings = settings_from(dict(os.environ), args.settings)
    except SettingsError as exc:
        parser.exit(2, f"baton callout: {exc}\n")
    configure_logging(service="callout")
    asyncio.run(run_until_signalled(lambda: serve(settings)))
    return 0
