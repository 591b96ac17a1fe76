"""simcluster's HTTP face: Kubernetes REST paths over aiohttp.

Routing follows the API server's URL scheme (``/api/v1/...``, ``/apis/<g>/<v>/...``,
optional ``namespaces/<ns>/``, ``<plural>[/<name>[/<subresource>]]``, and the legacy
``/watch/`` prefix). Reads live in :mod:`reading`, writes in :mod:`writing`.
Every answer is counted in the server's own metrics; every failure is a ``Status``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import structlog
from aiohttp import web
from prometheus_client import generate_latest

from baton.services.simcluster.api import openapi, reading, tokens, unmodelled, webhooks, writing
from baton.services.simcluster.api.calls import (
    Admission,
    Call,
    Settings,
    json_response,
    raw_response,
)
from baton.services.simcluster.api.metrics import ApiMetrics
from baton.services.simcluster.api.objects import ApiError
from baton.services.simcluster.api.resources import BY_GROUP_VERSION, groups, resource_list
from baton.services.simcluster.api.store import Store

log = structlog.get_logger("simcluster.api")
Handler = Callable[[Call], Awaitable[web.StreamResponse]]
# simcluster's own routes (/sim/...): (request, path) -> response; see simapi.SimApi
SimRoutes = Callable[[web.Request, str], Awaitable[web.StreamResponse]]
METRIC = web.RequestKey("metric", tuple[str, str, str])  # (verb, resource, subresource)
VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-simcluster",
    "gitCommit": "simcluster",
    "gitTreeState": "clean",
    "buildDate": "2026-11-22T00:00:00Z",
    "goVersion": "go1.22",
    "compiler": "gc",
    "platform": "linux/amd64",
}


@dataclass
class ApiServer:
    """The aiohttp application around a :class:`Store`; ``await start()`` to serve."""

    store: Store
    settings: Settings = field(default_factory=Settings)
    admission: list[Admission] = field(default_factory=list)  # webhooks, in order
    sim: SimRoutes | None = None  # the simulation's /sim/ endpoints, once there is one

    def __post_init__(self) -> None:
        self.metrics = ApiMetrics(self.store.counts)
        self.app = web.Application(middlewares=[self._errors], client_max_size=64 << 20)
        self.app.router.add_route("*", "/{tail:.*}", self._route)
        self.app.on_shutdown.append(self._close_watches)
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.tokens = tokens.Tokens(self.store)  # TokenRequest, TokenReview
        webhooks.install(self)  # configured admission webhooks, called on create

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on ``host:port`` (0: a free port); returns the base URL."""
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0][1]
        self.url = f"http://{host}:{bound}"
        log.info("simcluster api serving", url=self.url)
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _close_watches(self, _app: web.Application) -> None:
        for watcher in self.store.watchers():
            self.store.unwatch(watcher)

    @web.middleware
    async def _errors(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        started = time.perf_counter()
        try:
            response = await handler(request)
        except ApiError as err:
            response = json_response(err.status(), err.code)
        except msgspec.DecodeError as err:
            response = json_response(ApiError(400, "BadRequest", str(err)).status(), 400)
        for warning in request.get(writing.WARNINGS, ()):
            response.headers.add("Warning", f'299 - "{_quoted(warning)}"')
        label = request.get(METRIC)
        if label is not None:
            verb, res, sub = label
            self.metrics.requests.labels(verb, res, sub, str(response.status)).inc()
            if verb != "WATCH":
                self.metrics.duration.labels(verb, res).observe(time.perf_counter() - started)
        return response

    async def _route(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        if path.startswith("/sim/") and self.sim is not None:
            return await self.sim(request, path)
        special = self._special(path, request)
        if special is not None:
            return special
        if tokens.handles(path):
            return json_response(await tokens.route(self.tokens, request, path), 201)
        if unmodelled.handles(path):
            return json_response(*await unmodelled.answer(request, path))
        call = parse(path, request, self)
        request[METRIC] = (call.verb, call.res.plural, call.sub or "")
        handler = _handler(request.method, call)
        return await handler(call)

    def _special(self, path: str, request: web.Request) -> web.StreamResponse | None:
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        if path == "/metrics":
            return web.Response(
                body=generate_latest(self.metrics.registry),
                content_type="text/plain",
                charset="utf-8",
            )
        if path == "/version":
            return json_response(VERSION)
        if path.startswith("/openapi/"):
            return _openapi(path, request.headers.get("Accept", ""))
        body = discovery(path, self.url)
        return None if body is None else json_response(body)


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _openapi(path: str, accept: str) -> web.StreamResponse:
    if path == "/openapi/v2" and "json" not in accept and "*/*" not in accept and accept:
        if "protobuf" not in accept:
            raise ApiError(406, "NotAcceptable", f"only application/json is served, not {accept}")
        return web.Response(body=openapi.v2_protobuf(), content_type=openapi.V2_PROTOBUF)
    if path == "/openapi/v2":
        doc: bytes | None = openapi.v2_document()
    elif path == "/openapi/v3":
        doc = openapi.v3_index()
    else:
        doc = openapi.v3_document(path.removeprefix("/openapi/v3/"))
    if doc is None:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return raw_response(doc)


def discovery(path: str, url: str) -> dict[str, Any] | None:
    if path == "/api":
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": url.removeprefix("http://")}
            ],
        }
    if path == "/api/v1":
        body = resource_list("v1")
        assert body is not None
        body["resources"].append(
            {
                "name": "bindings",
                "singularName": "binding",
                "namespaced": True,
                "kind": "Binding",
                "verbs": ["create"],
            }
        )
        return body
    if path == "/apis":
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [_group(g, vs) for g, vs in groups().items()],
        }
    parts = path.strip("/").split("/")
    if len(parts) == 2 and parts[0] == "apis" and parts[1] in groups():
        return {"kind": "APIGroup", "apiVersion": "v1", **_group(parts[1], groups()[parts[1]])}
    if len(parts) == 3 and parts[0] == "apis":
        return resource_list(f"{parts[1]}/{parts[2]}")
    return None


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def parse(path: str, request: web.Request, server: ApiServer) -> Call:
    """The resource, namespace, name and subresource a REST path names (404 if none)."""
    parts = path.strip("/").split("/")
    if parts[:2] == ["api", "v1"]:
        gv, rest = "v1", parts[2:]
    elif parts[0] == "apis" and len(parts) >= 3:
        gv, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    else:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    watch_path = bool(rest) and rest[0] == "watch"
    rest = rest[1:] if watch_path else rest
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    if gv == "v1" and rest[:1] == ["bindings"] and namespace:
        rest = ["pods", "", "binding"]
    table = BY_GROUP_VERSION.get(gv, {})
    if not rest or rest[0] not in table or len(rest) > 3:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    res = table[rest[0]]
    if (namespace is not None) != res.namespaced and (namespace is not None or len(rest) > 1):
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return Call(
        server=server,
        request=request,
        res=res,
        namespace=namespace,
        name=rest[1] if len(rest) > 1 else None,
        sub=rest[2] if len(rest) > 2 else None,
        watch=watch_path or request.query.get("watch") in ("1", "true", "True"),
    )


def _handler(method: str, call: Call) -> Handler:
    sub = call.sub
    if sub is not None and sub not in call.res.subresources:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    table: dict[tuple[str, bool], Handler] = {
        ("GET", False): reading.watch if call.watch else reading.list_,
        ("POST", False): writing.create,
        ("DELETE", False): writing.delete_collection,
        ("GET", True): reading.get,
        ("PUT", True): writing.update,
        ("PATCH", True): writing.patch,
        ("DELETE", True): writing.delete,
        ("POST", True): writing.act,
    }
    handler = table.get((method, call.name is not None))
    allowed = {"binding": {"POST"}, "eviction": {"POST"}}.get(
        sub or "", {"GET", "PUT", "PATCH"} if sub else set(_VERBS)
    )
    if handler is None or method not in allowed or (method == "POST" and call.name and not sub):
        raise ApiError(
            405,
            "MethodNotAllowed",
            f"the server does not allow this method on the requested resource ({method})",
        )
    return handler


_VERBS = ("GET", "POST", "PUT", "PATCH", "DELETE")
