"""The ops endpoint every service serves: ``/metrics``, ``/healthz``, ``/readyz``.

``/healthz`` answers 200 while the event loop runs (a wedged loop cannot answer);
``/readyz`` answers 200 once ``ready()`` is true (e.g. bootstrapped from the bus).
"""

from __future__ import annotations

from collections.abc import Callable

import prometheus_client
from aiohttp import web


class OpsServer:
    def __init__(self, runner: web.AppRunner, port: int) -> None:
        self._runner = runner
        self.port = port

    async def close(self) -> None:
        await self._runner.cleanup()


async def serve_ops(
    port: int, ready: Callable[[], bool] = lambda: True, *, host: str = "0.0.0.0"
) -> OpsServer:
    """Start serving on ``port`` (0: any free port, see ``OpsServer.port``)."""

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
