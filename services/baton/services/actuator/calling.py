"""One API call, with the retry table applied: the only place the actuator meets HTTP.

Calls go through kubernetes-asyncio's typed methods with ``_preload_content=False``:
the actuator reads a handful of fields, so the JSON is decoded with msgspec into
plain dicts instead of building the generated model objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import aiohttp
import msgspec
from kubernetes_asyncio.client import (
    ApiClient,
    CoreV1Api,
    CustomObjectsApi,
    EventsV1Api,
    ResourceV1Api,
)
from kubernetes_asyncio.client.exceptions import ApiException

from baton.proto import keys
from baton.services.actuator import metrics
from baton.services.actuator.core import retrying

MERGE = "application/merge-patch+json"
Obj = dict[str, Any]
T = TypeVar("T")
U = TypeVar("U")


class ApiError(Exception):
    """The API refused a call, or it failed after every in-process retry."""

    def __init__(self, status: int, message: str, *, reason: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}" if reason else f"{status}: {message}")
        self.status, self.reason, self.message = status, reason, message

    @property
    def policy(self) -> retrying.Policy:
        return retrying.policy_for(self.status)


class Api:
    """Shared clients plus the retry settings; one per process."""

    def __init__(
        self, client: ApiClient, *, tries: int = 4, base: float = 0.1, cap: float = 5.0,
        timeout: float = 30.0, seed: int = 0, node_cache_seconds: float = 2.0,
    ) -> None:  # fmt: skip
        self.client = client
        self.core = CoreV1Api(client)
        self.custom = CustomObjectsApi(client)
        self.events = EventsV1Api(client)
        self.resource = ResourceV1Api(client)  # resource.k8s.io/v1: DRA's ResourceClaims
        self.tries, self.base, self.cap, self.timeout = tries, base, cap, timeout
        self.rng = random.Random(seed)
        self.node_cache_seconds = node_cache_seconds
        # node -> (monotonic time it was read, Baton's scheduling taints on it then);
        # written only inside the node's gate (``node_gate``), so an entry is never older
        # than the create that held the gate alone before it (a node write drops it)
        self.nodes_seen: dict[str, tuple[float, tuple[str, ...]]] = {}
        self.node_gates: dict[str, NodeGate] = {}
        self.copies: dict[str, Obj] = {}  # uid -> copy of a pod deleted, not yet recreated

    def session(self) -> Session:
        return Session(self)


class Session:
    """The calls made for one action: counts its writes for the rate limiter."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.writes = 0

    async def call(
        self, verb: str, fn: Callable[..., Awaitable[Any]], *args: Any, **kw: Any
    ) -> Obj:
        """Call ``fn``; back off and retry on 429/5xx/timeouts; raise ApiError otherwise."""
        api = self.api
        for attempt in range(1, api.tries + 1):
            status, message, reason, retry_after = await self._once(verb, fn, *args, **kw)
            if status < 300:
                return msgspec.json.decode(message) if message else {}
            error = ApiError(status, _message(message), reason=reason)
            if error.policy != "backoff" or attempt == api.tries:
                raise error
            delay = retrying.backoff(attempt, base=api.base, cap=api.cap, rng=api.rng)
            await asyncio.sleep(max(delay, min(retry_after, api.cap)))
        raise AssertionError("unreachable")

    async def _once(
        self, verb: str, fn: Callable[..., Awaitable[Any]], *args: Any, **kw: Any
    ) -> tuple[int, bytes, str, float]:
        if verb != "get":
            self.writes += 1
        started = time.perf_counter()
        try:
            response = await fn(
                *args, _preload_content=False, _request_timeout=self.api.timeout, **kw
            )
            async with response:
                body = await response.read()
                status = response.status
                retry_after = float(response.headers.get("Retry-After", 0) or 0)
            return status, body, "", retry_after
        except ApiException as exc:
            body = exc.body.encode() if isinstance(exc.body, str) else bytes(exc.body or b"")
            return exc.status or 0, body, str(exc.reason or ""), 0.0
        except (TimeoutError, aiohttp.ClientError) as exc:
            return 0, str(exc).encode(), type(exc).__name__, 0.0
        finally:
            metrics.API_SECONDS.labels(verb=verb).observe(time.perf_counter() - started)


async def bounded(items: Sequence[T], fn: Callable[[T], Awaitable[U]], *, limit: int) -> list[U]:
    """``fn`` of every item, at most ``limit`` at once, in item order; the first error
    cancels the rest and is raised."""
    gate = asyncio.Semaphore(max(limit, 1))

    async def one(item: T) -> U:
        async with gate:
            return await fn(item)

    # Not a TaskGroup: on Python 3.11 a child's error makes the group cancel the awaiting
    # task and never uncancel it, so the action's task would look cancelled from then on
    # and its retries would give up without a result.
    tasks = [asyncio.ensure_future(one(i)) for i in items]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:  # the first failure (or our cancellation): stop the others
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _message(body: bytes) -> str:
    """The ``message`` of a Kubernetes ``Status`` body, or the body itself."""
    try:
        status = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return body.decode(errors="replace")[:500]
    message = status.get("message") if isinstance(status, dict) else None
    if isinstance(message, str):
        return message
    return body.decode(errors="replace")[:500]


# Baton's taints that keep pods off a node: a gang is not bound onto a node that
# carries one (the gang service decided before it saw the taint), as no scheduler checks
# a binding's fit.
KEEP_OFF = frozenset({(keys.PREFLIGHT, "NoSchedule"), (keys.UNHEALTHY, "NoSchedule")})


class NodeGate:
    """Per node: gang binds onto the node share it; a pod created there by name (health's
    preflight, which no scheduler fits) holds it alone. So the pod's free-GPU read never
    falls between a bind's check of the node and the bind, while two gangs' binds onto
    one node (small gangs sharing it) still run together. A waiting create goes first:
    new binds wait behind it. One actuator leads at a time: an in-process gate is enough.
    """

    __slots__ = ("binds", "changed", "creating", "queued")

    def __init__(self) -> None:
        self.binds, self.creating, self.queued = 0, False, 0
        self.changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        async with self.changed:
            await self.changed.wait_for(lambda: not self.creating and not self.queued)
            self.binds += 1
        try:
            yield
        finally:
            async with self.changed:
                self.binds -= 1
                self.changed.notify_all()

    @contextlib.asynccontextmanager
    async def alone(self) -> AsyncIterator[None]:
        async with self.changed:
            self.queued += 1
            try:
                await self.changed.wait_for(lambda: not self.creating and not self.binds)
            finally:
                self.queued -= 1
            self.creating = True
        try:
            yield
        finally:
            async with self.changed:
                self.creating = False
                self.changed.notify_all()


def node_gate(api: Api, name: str) -> NodeGate:
    gate = api.node_gates.get(name)
    if gate is None:
        gate = api.node_gates[name] = NodeGate()
    return gate


def seen(api: Api, node: Obj) -> tuple[str, ...]:
    """Record a node read inside its gate; returns Baton's taints on it that keep pods off."""
    taints = node.get("spec", {}).get("taints") or []
    marks = tuple(sorted({str(t.get("key")) for t in taints
                          if (t.get("key"), t.get("effect")) in KEEP_OFF}))  # fmt: skip
    name = str(node.get("metadata", {}).get("name", ""))
    if name:
        api.nodes_seen[name] = (time.monotonic(), marks)
    return marks


async def node_marks(session: Session, name: str) -> tuple[str, ...] | None:
    """Baton's taints on the node that keep pods off (``KEEP_OFF``), None if there is no
    such node: from a short cache or a GET (reads are not rate limited). Call it inside
    ``node_gate``: a pod created there by name (after its taint was on) was created
    holding the gate alone, after a read that refreshed this cache."""
    api = session.api
    cached = api.nodes_seen.get(name)
    if cached is not None and time.monotonic() - cached[0] < api.node_cache_seconds:
        return cached[1]
    try:
        node = await session.call("get", api.core.read_node, name)
    except ApiError as exc:
        if exc.status == 404:
            api.nodes_seen.pop(name, None)
            return None
        raise
    node.setdefault("metadata", {}).setdefault("name", name)
    return seen(api, node)
