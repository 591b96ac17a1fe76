"""``baton bridge``: settings, wiring and the process entry.

Settings (environment, or a YAML/JSON file via ``--settings``):

| key | default | meaning |
|---|---|---|
| ``BATON_NATS_URL`` | ``nats://127.0.0.1:4222`` | NATS server |
| ``BATON_CLUSTER`` | ``c1`` | cluster token in every subject |
| ``KUBECONFIG`` | unset: in-cluster service account | the API server to watch |
| ``BATON_OPS_PORT`` | ``9090`` | ``/metrics``, ``/healthz``, ``/readyz`` |
| ``BATON_BRIDGE_PAGE_SIZE`` | ``500`` | objects per list page (``limit``) |
| ``BATON_BRIDGE_WATCH_TIMEOUT_S`` | ``300`` | server-side watch timeout before reopening |
| ``BATON_BRIDGE_TOMBSTONE_TTL`` | ``1h`` | how long deletion tombstones stay in the K8S stream |
"""

from __future__ import annotations

import os
import re

import msgspec
import structlog

from libs.bus import Bus
from libs.kube import Options, api_client
from libs.runtime import (
    load_settings,
    run_service,
    serve_ops,
)
from services.bridge.shell import Bridge

log = structlog.get_logger("baton.bridge")


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    nats_url: str = "nats://127.0.0.1:4222"
    cluster: str = "c1"
    ops_port: int = 9090
    dry_run: bool = False  # accepted for uniformity: the bridge never writes to the API
    kubeconfig: str = ""
    page_size: int = 500
    watch_timeout_s: int = 300
    tombstone_ttl: str = "1h"

    def __post_init__(self) -> None:
        if self.page_size < 1:
            raise ValueError("BATON_BRIDGE_PAGE_SIZE must be at least 1")
        if self.watch_timeout_s < 1:
            raise ValueError("BATON_BRIDGE_WATCH_TIMEOUT_S must be at least 1")
        if not re.fullmatch(r"[0-9]+[smhd]?", self.tombstone_ttl):
            raise ValueError(
                f"BATON_BRIDGE_TOMBSTONE_TTL={self.tombstone_ttl!r}: expected e.g. 90s, 1h"
            )


def settings_from(env: dict[str, str], file: str | None = None) -> Settings:
    settings = load_settings(Settings, prefix="BATON_BRIDGE_", file=file, env=env)
    if not settings.kubeconfig and env.get("KUBECONFIG"):
        settings = msgspec.structs.replace(settings, kubeconfig=env["KUBECONFIG"])
    return settings


async def serve(settings: Settings) -> None:
    api = await api_client(settings.kubeconfig)
    bus = await Bus.connect(settings.nats_url, cluster=settings.cluster, name="bridge")
    options = Options(page_size=settings.page_size, watch_timeout_s=settings.watch_timeout_s)
    bridge = Bridge(
        bus=bus,
        api=api,
        cluster=settings.cluster,
        options=options,
        tombstone_ttl=settings.tombstone_ttl,
    )
    ops = await serve_ops(settings.ops_port, ready=lambda: bridge.ready)
    log.info("bridge starting", cluster=settings.cluster, ops_port=ops.port)
    try:
        await bridge.run()
    finally:
        await ops.close()
        await bus.close()
        await api.close()


def run(argv: list[str]) -> int:
    return run_service(
        argv,
        name="bridge",
        description=(__doc__ or "").splitlines()[0],
        load=lambda file: settings_from(dict(os.environ), file),
        serve=serve,
    )
