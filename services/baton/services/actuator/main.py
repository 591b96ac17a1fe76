"""``baton actuator``: settings, the service's spec and its entry.

Settings come from ``BATON_ACTUATOR_<NAME>`` (or ``BATON_<NAME>`` for the shared
ones: ``BATON_NATS_URL``, ``BATON_CLUSTER``, ``BATON_DRY_RUN``, ``BATON_OPS_PORT``)
and an optional file named by ``BATON_ACTUATOR_CONFIG``. ``kubeconfig`` falls back
to ``KUBECONFIG``, then to the in-cluster service account.

The actuator's core decides by the wall clock (rate limits, backoff), not by the
time its inputs carry, so it is not replayed; its decisions are its results, on
``baton.<cluster>.result.>``.
"""

from __future__ import annotations

import time

from baton.libs.bus import Bus
from baton.libs.kube import api_client
from baton.libs.runner import Runner, Spec, serve
from baton.libs.runtime import OPS_PORTS, load_settings, run_service
from baton.libs.runtime.settings import Base, require
from baton.proto.k8s import MAX_GANG_MEMBERS
from baton.services.actuator import core, shell
from baton.services.actuator.calling import Api

PREFIX = "BATON_ACTUATOR_"


class Settings(Base, frozen=True, kw_only=True):
    ops_port: int = OPS_PORTS["actuator"]
    kubeconfig: str = ""
    qps: float = 200.0  # API writes per second, sustained (0: unlimited)
    burst: int = 400
    # Of qps, what preflight work (new capacity) is assured ahead of binds while queued
    validation_share: float = 0.4
    concurrency: int = 32  # actions applied at once
    bind_concurrency: int = 64  # binds (or evictions) of one gang at once
    max_attempts: int = 5  # deliveries before an action is dead-lettered
    ack_wait: float = 10.0  # held deliveries are kept alive; a lost one returns after this
    request_timeout: float = 30.0
    seed: int = 0  # for backoff jitter
    # Pods one action may name; more is refused with the reason. Never below the gang
    # size the webhook admits and gang places (MAX_GANG_MEMBERS), or a gang would be
    # admitted and placed that the actuator refuses, forever.
    max_members: int = MAX_GANG_MEMBERS

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = {
            "QPS": self.qps >= 0,
            "BURST": self.burst >= 1,
            "VALIDATION_SHARE": 0 <= self.validation_share < 1,
            "CONCURRENCY": self.concurrency >= 1,
            "BIND_CONCURRENCY": self.bind_concurrency >= 1,
            "MAX_ATTEMPTS": self.max_attempts >= 1,
            "ACK_WAIT": self.ack_wait > 0,
            "REQUEST_TIMEOUT": self.request_timeout > 0,
        }
        require(PREFIX, checks)
        placed = f"is below {MAX_GANG_MEMBERS}, the largest gang admitted and placed"
        require(PREFIX, {"MAX_MEMBERS": self.max_members >= MAX_GANG_MEMBERS}, problem=placed)

    def limits(self) -> core.Limits:
        return core.Limits(
            qps=self.qps, burst=self.burst, validation_share=self.validation_share,
            concurrency=self.concurrency,
            max_attempts=self.max_attempts, seed=self.seed, max_members=self.max_members,
        )  # fmt: skip


SPEC = Spec(
    name="actuator",
    description="Apply actions from baton.<cluster>.action.> to the API, once each, rate "
    "limited by priority.",
    settings=Settings,
    policy=lambda settings: settings.limits(),
    policy_type=core.Limits,
    initial=lambda limits: core.initial(limits, now=time.time()),
    step=core.step,
    routes=shell.ROUTES,
    publishes=("result.>",),
    reads=("action.>",),  # its durable work consumer
    observe=shell.observe,
    gauges=shell.gauges,
    clock=True,
)


def runner(
    bus: Bus, settings: Settings, *, api: Api | None, limits: core.Limits | None = None
) -> Runner[core.State]:
    """The actuator's runner; ``limits`` overrides the settings' (tests: fast backoff)."""
    limits = limits or settings.limits()
    desk = shell.Desk(
        bus, api=api, limits=limits, clock=time.time, dry_run=settings.dry_run,
        bind_concurrency=settings.bind_concurrency, ack_wait=settings.ack_wait,
        stop_grace=settings.stop_grace_s,
    )  # fmt: skip
    run = Runner(SPEC, bus=bus, settings=settings, feed=desk, effects=desk.effects(),
                 stop_grace=settings.stop_grace_s)  # fmt: skip
    run.state = core.initial(limits, now=time.time())
    return run


async def serve_actuator(settings: Settings) -> None:
    client = None if settings.dry_run else await api_client(settings.kubeconfig, pool=256)
    api = None
    if client is not None:
        api = Api(client, timeout=settings.request_timeout, seed=settings.seed)

    async def make(bus: Bus) -> Runner[core.State]:
        return runner(bus, settings, api=api)

    try:
        await serve(SPEC, settings, make=make)
    finally:
        if client is not None:
            await client.close()


def run(argv: list[str]) -> int:
    return run_service(
        argv,
        name="actuator",
        description=SPEC.description + " Settings: BATON_ACTUATOR_* environment variables.",
        load=lambda file: load_settings(Settings, PREFIX, file=file),
        serve=serve_actuator,
        dry_run="log and publish would-do only",
    )
