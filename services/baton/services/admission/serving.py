"""The webhook's HTTPS server: ``POST /mutate`` and ``POST /validate`` (AdmissionReview v1).

Answers from the in-memory state only (``state()`` returns None until the core has
caught up with the bus); the decision event is handed to ``publish`` and sent in
the background, never on the request's path.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog
from aiohttp import web

from baton.proto.admission import PodMutated, PodRejected
from baton.services.admission import metrics
from baton.services.admission.core import State
from baton.services.admission.core.webhook import BadReview, Options, review

log = structlog.get_logger("baton.admission")

MAX_BODY = 3 * 1024 * 1024  # the API server's own request limit


@dataclass
class Webhook:
    state: Callable[[], State | None]
    publish: Callable[[PodMutated | PodRejected], None]
    options: Options = field(default_factory=Options)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/mutate", self._mutate)
        app.router.add_post("/validate", self._validate)
        return app

    async def _mutate(self, request: web.Request) -> web.Response:
        return await self._handle(request, mutate=True)

    async def _validate(self, request: web.Request) -> web.Response:
        return await self._handle(request, mutate=False)

    async def _handle(self, request: web.Request, *, mutate: bool) -> web.Response:
        body = await request.read()
        name = "mutate" if mutate else "validate"
        started = time.perf_counter()
        state = self.state()
        try:
            verdict = review(state, body, mutate=mutate, now=time.time(), options=self.options)
        except BadReview as exc:
            metrics.REVIEWS.labels(webhook=name, kind=metrics.UNKNOWN_KIND, outcome="bad").inc()
            return web.Response(status=400, text=f"{exc}\n")
        metrics.REVIEW_SECONDS.labels(webhook=name).observe(time.perf_counter() - started)
        event = verdict.event
        outcome = (
            "not-ready"
            if state is None
            else "rejected"
            if isinstance(event, PodRejected)
            else "patched"
            if event is not None
            else "allowed"
        )
        kind = event.kind if event is not None else metrics.UNKNOWN_KIND
        metrics.REVIEWS.labels(webhook=name, kind=kind, outcome=outcome).inc()
        if event is not None:
            self.publish(event)
        return web.Response(body=verdict.body, content_type="application/json")


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


async def serve_webhook(
    webhook: Webhook, *, host: str, port: int, tls: ssl.SSLContext
) -> tuple[web.AppRunner, int]:
    """Start serving; returns the runner (``cleanup()`` to stop) and the bound port."""
    runner = web.AppRunner(webhook.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=tls)
    await site.start()
    server = site._server
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    log.info("webhook serving", host=host, port=bound)
    return runner, bound
