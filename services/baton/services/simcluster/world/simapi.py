"""simcluster's own endpoints, beside the Kubernetes API (``/sim/v1/...``).

    GET  /sim/v1/hardware[?node=N]              {"resourceVersion": "N", "items": [NodeHardware]}
    GET  /sim/v1/hardware?watch=1&resourceVersion=N[&node=N][&timeoutSeconds=S]
                                                JSON lines {"type", "object", "resourceVersion"}
    GET  /sim/v1/hardware/<node>                one NodeHardware
    POST /sim/v1/faults                         {"kind", "heal", "detail": {...}, "target": {...}}
                                                -> {"kind", "heal", "nodes": [...]}
    POST /sim/v1/faults/trace                   {"csv": "...", "speed": X, "seed": S} -> {"rows": N}
    POST /sim/v1/refusals                       {"resource", "namespace", "name", "message",
                                                "heal"}: the API refuses (403) every update
                                                of that object until healed (api/refusals.py)

A watch without ``resourceVersion`` (or ``0``) starts with every node as ADDED. A watch
from a version older than the feed's history gets one ERROR event carrying a 410
``Expired`` Status, as the pod watch does: list again. Errors are ``Status`` bodies.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
from aiohttp import web

from baton.services.simcluster.api.calls import json_response, raw_response
from baton.services.simcluster.api.history import Expired, Watcher
from baton.services.simcluster.api.objects import ApiError
from baton.services.simcluster.api.refusals import Refusals
from baton.services.simcluster.world import fault_trace, faults
from baton.services.simcluster.world.faulting import UnknownNodes
from baton.services.simcluster.world.hardware_feed import event_line
from baton.services.simcluster.world.targets import Target, TargetError

if TYPE_CHECKING:
    from baton.services.simcluster.world.simulation import Simulation

_encode = msgspec.json.Encoder().encode
_LIVENESS_SECONDS = 1.0
T = TypeVar("T")


class FaultRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    kind: str
    heal: bool = False
    detail: dict[str, Any] = {}
    target: Target = Target()


class RefuseRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    resource: str  # the plural: resourceclaims, pods, ...
    name: str
    namespace: str = ""
    message: str = "refused by simcluster (POST /sim/v1/refusals)"
    heal: bool = False


class TraceRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    csv: str
    speed: float = 1.0
    seed: int = 0


class SimApi:
    """The ``/sim/`` routes of one :class:`Simulation` (``ApiServer.sim``)."""

    def __init__(self, sim: Simulation, *, watch_queue: int = 100_000) -> None:
        self.sim = sim
        self.watch_queue = watch_queue
        self.refusals = Refusals()
        sim.admission.append(self.refusals)

    async def __call__(self, request: web.Request, path: str) -> web.StreamResponse:
        parts = path.strip("/").split("/")
        if parts[:3] == ["sim", "v1", "hardware"] and request.method == "GET":
            if len(parts) == 4:
                return self._one(parts[3])
            if len(parts) == 3:
                watching = request.query.get("watch") in ("1", "true", "True")
                return await (self._watch(request) if watching else self._list(request))
        if parts[:3] == ["sim", "v1", "faults"] and request.method == "POST":
            if len(parts) == 3:
                return await self._fault(request)
            if parts[3:] == ["trace"]:
                return await self._trace(request)
        if parts == ["sim", "v1", "refusals"] and request.method == "POST":
            return await self._refuse(request)
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    # hardware

    def _one(self, node: str) -> web.StreamResponse:
        _, raws = self.sim.hardware.list(node)
        if not raws:
            raise ApiError(404, "NotFound", f'hardware "{node}" not found')
        return raw_response(raws[0])

    async def _list(self, request: web.Request) -> web.StreamResponse:
        rv, raws = self.sim.hardware.list(request.query.get("node") or None)
        head = b'{"resourceVersion":"' + str(rv).encode() + b'","items":['
        return raw_response(head + b",".join(raws) + b"]}")

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        feed, node = self.sim.hardware, request.query.get("node") or None
        since = _int(request, "resourceVersion") or 0
        initial = b""
        if since == 0:
            since, raws = feed.list(node)
            initial = b"".join(event_line("ADDED", since, raw) for raw in raws)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        try:
            watcher = feed.watch(since=since, node=node, capacity=self.watch_queue)
        except Expired as err:
            status = ApiError(410, "Expired", str(err)).status()
            await response.write(_encode({"type": "ERROR", "object": status}) + b"\n")
            return response
        try:
            if initial:
                await response.write(initial)
            await _follow(request, watcher, response, seconds=_int(request, "timeoutSeconds"))
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            feed.unwatch(watcher)
        return response

    # faults

    async def _fault(self, request: web.Request) -> web.StreamResponse:
        body = await _body(request, FaultRequest)
        try:
            fault = faults.fault(body.kind, **body.detail)
            nodes = self.sim.faults.apply(fault, body.target, heal=body.heal)
        except UnknownNodes as exc:
            raise ApiError(404, "NotFound", str(exc)) from None
        except faults.FaultError as exc:
            raise ApiError(400, "BadRequest", str(exc)) from None
        return json_response({"kind": fault.kind, "heal": body.heal, "nodes": nodes})

    async def _refuse(self, request: web.Request) -> web.StreamResponse:
        body = await _body(request, RefuseRequest)
        where = (body.resource, body.namespace, body.name)
        if body.heal:
            return json_response({"healed": self.refusals.heal(*where)})
        self.refusals.refuse(*where, body.message)
        return json_response({"refused": list(where)})

    async def _trace(self, request: web.Request) -> web.StreamResponse:
        body = await _body(request, TraceRequest)
        if body.speed <= 0:
            raise ApiError(400, "BadRequest", f"speed: expected > 0, got {body.speed}")
        try:
            rows = fault_trace.parse(body.csv.splitlines(), seed=body.seed)
        except fault_trace.TraceError as exc:
            raise ApiError(400, "BadRequest", str(exc)) from None
        self.sim.replay_faults(rows, speed=body.speed)
        return json_response({"rows": len(rows)})


async def _body(request: web.Request, kind: type[T]) -> T:
    try:
        return msgspec.json.decode(await request.read(), type=kind)
    except (msgspec.ValidationError, TargetError) as exc:
        raise ApiError(400, "BadRequest", str(exc)) from None


def _int(request: web.Request, key: str) -> int | None:
    text = request.query.get(key, "")
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ApiError(400, "BadRequest", f"invalid {key}: {text!r}") from None


async def _follow(
    request: web.Request, watcher: Watcher, response: web.StreamResponse, *, seconds: int | None
) -> None:
    deadline = time.monotonic() + (seconds or 1800)
    while time.monotonic() < deadline:
        await watcher.wait(min(_LIVENESS_SECONDS, max(0.0, deadline - time.monotonic())))
        transport = request.transport
        if transport is None or transport.is_closing():
            return
        if watcher.lines:
            await response.write(watcher.drain())
        if watcher.closed:
            return
