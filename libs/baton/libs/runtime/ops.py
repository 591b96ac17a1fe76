"""The ops endpoint every service serves: ``/metrics``, ``/healthz``, ``/readyz``.

``/healthz`` answers 200 while the event loop runs (a wedged loop cannot answer);
``/readyz`` answers 200 once ``ready()`` is true (e.g. bootstrapped from the bus).
``/metrics`` includes ``baton_build_info{service,version,python} 1``.

Each service has its own default ops port (``OPS_PORTS``), so services started by hand
on one machine do not collide; ``BATON_<SERVICE>_OPS_PORT`` sets one service's port
(``BATON_OPS_PORT`` sets them all, for one service per host or container).
"""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Callable
from typing import Final

import prometheus_client
from aiohttp import web

OPS_PORTS: Final = {
    "bridge": 9105,
    "actuator": 9106,
    "gang": 9107,
    "admission": 9108,
    "health": 9109,
    "balloon": 9110,
    "bandwidth": 9111,
    "autoscaler": 9112,
    "reporter": 9113,
    "callout": 9114,
    "agent": 9119,  # host network on every GPU node: clear of node_exporter (9100) and friends
}

BUILD_INFO = prometheus_client.Gauge(
    "baton_build_info",
    "Always 1: the Baton version and Python of a service's process",
    ["service", "version", "python"],
)


def version() -> str:
    try:
        return importlib.metadata.version("baton")
    except importlib.metadata.PackageNotFoundError:  # run from a tree without installing
        return "unknown"


def build_info(service: str) -> None:
    """Set ``baton_build_info`` for ``service`` (idempotent; one process may hold several)."""
    BUILD_INFO.labels(service=service, version=version(), python=platform.python_version()).set(1)


class OpsServer:
    def __init__(self, runner: web.AppRunner, port: int) -> None:
        self._runner = runner
        self.port = port

    async def close(self) -> None:
        await self._runner.cleanup()


async def serve_ops(
    port: int,
    ready: Callable[[], bool] = lambda: True,
    *,
    service: str,
    host: str = "0.0.0.0",
) -> OpsServer:
    """Start serving on ``port`` (0: any free port, see ``OpsServer.port``)."""
    build_info(service)

    async def metrics(_: web.Request) -> web.Response:
        body = prometheus_client.generate_latest(prometheus_client.REGISTRY)
        return web.Response(
            body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST}
        )

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ready\n")
        return web.Response(status=503, text="not ready\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    server = site._server  # the bound port, when 0 was asked for
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    return OpsServer(runner, int(bound))
