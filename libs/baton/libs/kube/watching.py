"""List+watch of one kind (the informer's reflector), yielding slim object events.

kubernetes-asyncio's ``ApiClient`` supplies auth, TLS and the server address; the
bytes are read raw (``_preload_content=False``) and decoded straight into slim
structs. Lists are paged with ``limit``/``continue``; the watch resumes from the
last resourceVersion seen (bookmarks included); 410 Gone relists and diffs against
the cache, so deletions missed meanwhile are emitted and unchanged objects are not.
Errors back off exponentially with jitter and never end the iteration.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import structlog
from kubernetes_asyncio.client import ApiClient

from baton.libs.kube import diffing
from baton.libs.kube.kinds import Bookmark, Change, Failure, Kind, Obj, Page, decode_status
from baton.proto import k8s
from baton.proto.codec import Undecodable

log = structlog.get_logger("baton.libs.kube")

RESTART_GRACE_S = 1.0  # a watch shorter than this was a failure: back off before the next


class ApiError(Exception):
    """The API server answered with an error (a dependency problem, retried)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(f"{failure.code} {failure.reason}: {failure.message}")
        self.failure = failure


class Expired(ApiError):
    """410 Gone: our resourceVersion or continue token is too old; relist."""


class Observer(Protocol):
    """What a reflector reports (the bridge turns these into metrics and readiness)."""

    def listed(self, kind: str, *, count: int, relist: bool) -> None: ...
    def watch_restarted(self, kind: str, *, reason: str) -> None: ...


class NullObserver:
    def listed(self, kind: str, *, count: int, relist: bool) -> None:
        pass

    def watch_restarted(self, kind: str, *, reason: str) -> None:
        pass


@dataclass(frozen=True, kw_only=True)
class Options:
    page_size: int = 500
    watch_timeout_s: int = 300  # server-side timeoutSeconds; the watch is reopened after it
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 30.0


class Reflector:
    """One kind's list+watch. ``seed`` is the state consumers already have (e.g. from
    the bus), so the first list emits only what changed, including deletions."""

    def __init__(
        self,
        api: ApiClient,
        kind: Kind,
        *,
        seed: Iterable[Obj] = (),
        options: Options | None = None,
        observer: Observer | None = None,
    ) -> None:
        self.api, self.kind = api, kind
        self.options = options or Options()
        self.observer: Observer = observer or NullObserver()
        self.cache: diffing.Cache = {kind.key(obj): obj for obj in seed}
        self.path = kind.path  # the served version, once found (``Kind.paths``)
        self.resource_version = ""
        self.synced = False  # the first list has been emitted

    async def events(self) -> AsyncIterator[k8s.K8sEvent]:
        async for batch in self.batches():
            for event in batch:
                yield event

    async def batches(self) -> AsyncIterator[list[k8s.K8sEvent]]:
        """Batches of events (one per list or per chunk of watch bytes), forever.

        A watch that ends within a second of starting (closed, 410, error) counts as a
        failure and the next attempt backs off, so a flapping server is never hammered.
        """
        failures, started = 0, -RESTART_GRACE_S
        while True:
            failures = failures + 1 if time.monotonic() - started < RESTART_GRACE_S else 0
            if failures:
                await asyncio.sleep(self._backoff(failures))
            started = time.monotonic()
            try:
                if not self.resource_version:
                    yield await self._list()
                async for batch in self._watch():
                    if batch:
                        yield batch
                reason = "closed"
            except Expired:
                self.resource_version = ""
                reason = "expired"
            except (ApiError, Undecodable, aiohttp.ClientError, TimeoutError) as exc:
                reason = type(exc).__name__
                log.warning("watch failed", kind=self.kind.name, error=str(exc))
                if isinstance(exc, ApiError) and exc.failure.code == 404:
                    self.path = self.kind.next_path(self.path)  # another served version?
                    if not self.synced:
                        # e.g. the PodGroup CRD is not installed: nothing to list yet
                        self.synced = True
                        yield []
            self.observer.watch_restarted(self.kind.name, reason=reason)

    def _backoff(self, failures: int) -> float:
        ceiling = min(self.options.backoff_max_s, self.options.backoff_initial_s * 2**failures)
        return random.uniform(ceiling / 2, ceiling)

    async def _list(self) -> list[k8s.K8sEvent]:
        listed: list[Obj] = []
        token = ""
        while True:
            page = await self._page(token)
            listed.extend(page.items)
            token = page.continue_token
            if not token:
                break
        at = time.time()
        operations = diffing.relist(self.cache, listed, key=self.kind.key)
        self.resource_version = page.resource_version
        self.observer.listed(self.kind.name, count=len(listed), relist=self.synced)
        self.synced = True
        return [self.kind.event(op, obj, at) for op, obj in operations]

    async def _page(self, token: str) -> Page:
        query: list[tuple[str, Any]] = [("limit", self.options.page_size)]
        if token:
            query.append(("continue", token))
        response = await self._get(query, limits=aiohttp.ClientTimeout(total=120))
        try:
            body = await response.read()
        finally:
            response.release()
        return self.kind.decode_page(body)

    async def _watch(self) -> AsyncIterator[list[k8s.K8sEvent]]:
        query = [
            ("watch", "true"),
            ("resourceVersion", self.resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", self.options.watch_timeout_s),
        ]
        limits = aiohttp.ClientTimeout(total=None, sock_read=self.options.watch_timeout_s + 30)
        response = await self._get(query, limits=limits)
        try:
            pending = b""
            async for chunk in response.content.iter_any():
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                events, failure = self._fold(lines, at=time.time())
                yield events  # before raising: the cache already holds these changes
                if failure is not None:
                    raise (Expired if failure.expired else ApiError)(failure)
        finally:
            response.close()

    def _fold(self, lines: list[bytes], *, at: float) -> tuple[list[k8s.K8sEvent], Failure | None]:
        """Watch lines -> events, stopping at an ERROR line (returned, not raised)."""
        events: list[k8s.K8sEvent] = []
        for line in lines:
            if not line.strip():
                continue
            try:
                item = self.kind.decode_watch_line(line)
            except Undecodable as exc:  # the API's fault: skip the line, keep watching
                log.error("undecodable watch line", kind=self.kind.name, reason=str(exc))
                continue
            if isinstance(item, Failure):
                return events, item
            if isinstance(item, Bookmark):
                self.resource_version = item.resource_version or self.resource_version
                continue
            self.resource_version = item.obj.resource_version or self.resource_version
            operation = diffing.apply(self.cache, item, key=self.kind.key)
            if operation is not None:
                events.append(self.kind.event(operation[0], operation[1], at))
        return events, None

    async def _get(self, query: list[tuple[str, Any]], *, limits: aiohttp.ClientTimeout) -> Any:
        response = await self.api.call_api(
            self.path,
            "GET",
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=limits,
        )
        if response.status >= 400:
            try:
                failure = decode_status(await response.read(), http_status=response.status)
            finally:
                response.release()
            raise (Expired if failure.expired else ApiError)(failure)
        return response


__all__ = ["ApiError", "Change", "Expired", "NullObserver", "Observer", "Options", "Reflector"]
