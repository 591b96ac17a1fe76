"""``baton actuator``: settings and wiring for the one writer to the API.

Settings come from ``BATON_ACTUATOR_<NAME>`` (or ``BATON_<NAME>`` for the shared
ones: ``BATON_NATS_URL``, ``BATON_CLUSTER``, ``BATON_DRY_RUN``, ``BATON_OPS_PORT``)
and an optional file named by ``BATON_ACTUATOR_CONFIG``. ``kubeconfig`` falls back
to ``KUBECONFIG``, then to the in-cluster service account.
"""

from __future__ import annotations

import os

import msgspec

from libs.bus import Bus
from libs.kube import api_client
from libs.runtime import (
    load_settings,
    run_service,
    serve_ops,
)
from services.actuator import core
from services.actuator.calling import Api
from services.actuator.shell import Actuator

PREFIX = "BATON_ACTUATOR_"


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    nats_url: str = "nats://127.0.0.1:4222"
    cluster: str = "c1"
    kubeconfig: str = ""
    dry_run: bool = False  # log and publish "would-do", never call the API
    ops_port: int = 9106
    qps: float = 200.0  # API writes per second, sustained (0: unlimited)
    burst: int = 400
    concurrency: int = 32  # actions applied at once
    bind_concurrency: int = 64  # binds (or evictions) of one gang at once
    max_attempts: int = 5  # deliveries before an action is dead-lettered
    ack_wait: float = 60.0
    request_timeout: float = 30.0
    seed: int = 0  # for backoff jitter

    def __post_init__(self) -> None:
        checks = {
            "QPS": self.qps >= 0,
            "BURST": self.burst >= 1,
            "CONCURRENCY": self.concurrency >= 1,
            "BIND_CONCURRENCY": self.bind_concurrency >= 1,
            "MAX_ATTEMPTS": self.max_attempts >= 1,
            "ACK_WAIT": self.ack_wait > 0,
            "REQUEST_TIMEOUT": self.request_timeout > 0,
        }
        bad = [key for key, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"{PREFIX}{bad[0]} is out of range")

    def limits(self) -> core.Limits:
        return core.Limits(
            qps=self.qps, burst=self.burst, concurrency=self.concurrency,
            max_attempts=self.max_attempts, seed=self.seed,
        )  # fmt: skip


async def serve(settings: Settings) -> None:
    bus = await Bus.connect(settings.nats_url, cluster=settings.cluster, name="actuator")
    client = None if settings.dry_run else await api_client(settings.kubeconfig, pool=256)
    try:
        await bus.ensure_streams()
        api = None
        if client is not None:
            api = Api(client, timeout=settings.request_timeout, seed=settings.seed)
        actuator = Actuator(
            bus, api=api, limits=settings.limits(), dry_run=settings.dry_run,
            bind_concurrency=settings.bind_concurrency, ack_wait=settings.ack_wait,
        )  # fmt: skip
        ops = await serve_ops(settings.ops_port, ready=lambda: actuator.ready)
        try:
            await actuator.run()
        finally:
            await ops.close()
    finally:
        if client is not None:
            await client.close()
        await bus.close()


def load(file: str | None) -> Settings:
    return load_settings(Settings, PREFIX, file=file or os.environ.get(f"{PREFIX}CONFIG"))


def run(argv: list[str]) -> int:
    return run_service(
        argv,
        name="actuator",
        description="Apply actions from baton.<cluster>.action.> to the API, once each, "
        "rate limited by priority. Settings: BATON_ACTUATOR_* environment variables.",
        load=load,
        serve=serve,
        dry_run="log and publish would-do only",
    )
