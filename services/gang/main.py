"""``baton gang``: settings and wiring for gang placement.

Settings come from ``BATON_GANG_<NAME>`` (or ``BATON_<NAME>`` for the shared ones:
``BATON_NATS_URL``, ``BATON_CLUSTER``, ``BATON_DRY_RUN``, ``BATON_OPS_PORT``) and an
optional file named by ``BATON_GANG_CONFIG``. See docs/gang.md.
"""

from __future__ import annotations

import os

import msgspec

from libs.bus import Bus
from libs.runtime import (
    load_settings,
    run_service,
    serve_ops,
)
from proto.ticks import DEFAULT_LEVELS
from services.gang import core
from services.gang.shell import GangShell

PREFIX = "BATON_GANG_"


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    nats_url: str = "nats://127.0.0.1:4222"
    cluster: str = "c1"
    dry_run: bool = False  # publish decisions, never actions
    ops_port: int = 9107
    cycle_interval: float = 0.5  # seconds between placement cycles
    topology_keys: tuple[str, ...] = DEFAULT_LEVELS  # broad -> narrow
    require_admission: bool = False  # place only gangs the admission service admitted
    recreate_bare_pods: bool = True
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0
    assume_timeout_s: float = 30.0
    verdict_refresh_s: float = 10.0
    reserve_after_s: float = 0.0
    config: str = ""  # BATON_GANG_CONFIG: a settings file (read before the others)

    def __post_init__(self) -> None:
        checks = {
            "CYCLE_INTERVAL": self.cycle_interval > 0,
            "TOPOLOGY_KEYS": len(set(self.topology_keys)) == len(self.topology_keys)
            and all(self.topology_keys),
            "BACKOFF_S": self.backoff_s > 0,
            "BACKOFF_MAX_S": self.backoff_max_s >= self.backoff_s,
            "ASSUME_TIMEOUT_S": self.assume_timeout_s > 0,
            "VERDICT_REFRESH_S": self.verdict_refresh_s >= 0,
            "RESERVE_AFTER_S": self.reserve_after_s >= 0,
        }
        bad = [key for key, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"{PREFIX}{bad[0]} is out of range")

    def policy(self) -> core.Policy:
        return core.Policy(
            topology_keys=self.topology_keys, require_admission=self.require_admission,
            recreate_bare_pods=self.recreate_bare_pods, backoff_s=self.backoff_s,
            backoff_max_s=self.backoff_max_s, assume_timeout_s=self.assume_timeout_s,
            verdict_refresh_s=self.verdict_refresh_s,
            reserve_after_s=self.reserve_after_s,
        )  # fmt: skip


async def serve(settings: Settings) -> None:
    bus = await Bus.connect(settings.nats_url, cluster=settings.cluster, name="gang")
    try:
        await bus.ensure_streams()
        shell = GangShell(
            bus, state=core.initial(settings.policy()), interval=settings.cycle_interval,
            dry_run=settings.dry_run,
        )  # fmt: skip
        ops = await serve_ops(settings.ops_port, ready=lambda: shell.ready)
        try:
            await shell.run()
        finally:
            await ops.close()
    finally:
        await bus.close()


def load(file: str | None) -> Settings:
    return load_settings(Settings, PREFIX, file=file or os.environ.get(f"{PREFIX}CONFIG"))


def run(argv: list[str]) -> int:
    return run_service(
        argv,
        name="gang",
        description="All-or-nothing, topology-aware gang placement: reads baton.<cluster>.k8s.>, "
        "publishes placement decisions and bind/evict actions. Settings: BATON_GANG_* variables.",
        load=load,
        serve=serve,
        dry_run="publish decisions, no actions",
    )
