"""``baton bridge``: settings, the service's spec and its entry.

Settings (environment, or a YAML/JSON file via ``--settings``):

| key | default | meaning |
|---|---|---|
| ``BATON_NATS_URL`` | ``nats://127.0.0.1:4222`` | NATS server |
| ``BATON_CLUSTER`` | ``c1`` | cluster token in every subject |
| ``KUBECONFIG`` | unset: in-cluster service account | the API server to watch |
| ``BATON_BRIDGE_OPS_PORT`` | ``9105`` | ``/metrics``, ``/healthz``, ``/readyz`` |
| ``BATON_BRIDGE_PAGE_SIZE`` | ``500`` | objects per list page (``limit``) |
| ``BATON_BRIDGE_WATCH_TIMEOUT_S`` | ``300`` | server-side watch timeout before reopening |
| ``BATON_BRIDGE_TOMBSTONE_TTL`` | ``1h`` | how long deletion tombstones stay in the K8S stream |
| ``BATON_BRIDGE_BATCH`` | ``4096`` | object events decided and published together |
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

import msgspec
from kubernetes_asyncio.client import ApiClient

from baton.libs.bus import Bus
from baton.libs.kube import KINDS, Kind, Options, api_client
from baton.libs.runner import Runner, Spec, serve
from baton.libs.runtime import OPS_PORTS, load_settings, run_service
from baton.libs.runtime.settings import Base
from baton.proto.k8s import MAX_NODE_GPUS
from baton.services.bridge import core, shell
from baton.services.bridge.core.bounds import Bounds


class Settings(Base, frozen=True, kw_only=True):
    ops_port: int = OPS_PORTS["bridge"]
    kubeconfig: str = ""
    page_size: int = 500
    watch_timeout_s: int = 300
    tombstone_ttl: str = "1h"
    batch: int = 4096
    max_node_gpus: int = MAX_NODE_GPUS  # a node claiming more is refused (dead-lettered)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.page_size < 1:
            raise ValueError("BATON_BRIDGE_PAGE_SIZE must be at least 1")
        if self.watch_timeout_s < 1:
            raise ValueError("BATON_BRIDGE_WATCH_TIMEOUT_S must be at least 1")
        if not 1 <= self.max_node_gpus <= MAX_NODE_GPUS:
            raise ValueError(
                f"BATON_BRIDGE_MAX_NODE_GPUS must be 1..{MAX_NODE_GPUS}: every consumer "
                f"refuses a node of more GPUs (proto.bounds)"
            )
        if self.batch < 1:
            raise ValueError("BATON_BRIDGE_BATCH must be at least 1")
        if not re.fullmatch(r"[0-9]+[smhd]?", self.tombstone_ttl):
            raise ValueError(
                f"BATON_BRIDGE_TOMBSTONE_TTL={self.tombstone_ttl!r}: expected e.g. 90s, 1h"
            )

    def options(self) -> Options:
        return Options(page_size=self.page_size, watch_timeout_s=self.watch_timeout_s)


SPEC = Spec(
    name="bridge",
    description="Watch the API server once per kind and fan the slim objects out on "
    "baton.<cluster>.k8s.>.",
    settings=Settings,
    policy=lambda s: core.Policy(
        cluster=s.cluster,
        tombstone_ttl=s.tombstone_ttl,
        bounds=Bounds(max_node_gpus=s.max_node_gpus, setting="BATON_BRIDGE_MAX_NODE_GPUS"),
    ),
    policy_type=core.Policy,
    initial=core.initial,
    step=core.step,
    routes=shell.ROUTES,
    publishes=("k8s.>",),
    reads=("k8s.>",),  # what it published before, at start (tombstones, resource versions)
    observe=shell.observe,
)


def settings_from(env: dict[str, str], file: str | None = None) -> Settings:
    settings = load_settings(Settings, prefix="BATON_BRIDGE_", file=file, env=env)
    if not settings.kubeconfig and env.get("KUBECONFIG"):
        settings = msgspec.structs.replace(settings, kubeconfig=env["KUBECONFIG"])
    return settings


def runner(
    bus: Bus,
    api: ApiClient,
    settings: Settings,
    *,
    kinds: Sequence[Kind] = tuple(KINDS.values()),
    options: Options | None = None,
) -> Runner[core.State]:
    feed = shell.WatchFeed(bus, api, kinds=kinds, options=options or settings.options())
    return Runner(SPEC, bus=bus, settings=settings, feed=feed, batch=settings.batch,
                  stop_grace=settings.stop_grace_s)  # fmt: skip


async def serve_bridge(settings: Settings) -> None:
    api = await api_client(settings.kubeconfig)

    async def make(bus: Bus) -> Runner[core.State]:
        return runner(bus, api, settings)

    try:
        await serve(SPEC, settings, make=make)
    finally:
        await api.close()


def run(argv: list[str]) -> int:
    return run_service(
        argv,
        name="bridge",
        description=(__doc__ or "").splitlines()[0],
        load=lambda file: settings_from(dict(os.environ), file),
        serve=serve_bridge,
    )
