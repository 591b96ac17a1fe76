"""One API request as the handlers see it, the server's settings, and JSON answers."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
from aiohttp import web

from baton.services.simcluster.api import tables
from baton.services.simcluster.api.objects import ApiError
from baton.services.simcluster.api.resources import Resource

if TYPE_CHECKING:
    from baton.services.simcluster.api.server import ApiServer

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


class Admission(Protocol):
    """An admission hook: (operation "CREATE"|"UPDATE", resource, new object, old object
    or None) -> the object to store (possibly mutated); raise ApiError to reject.
    ``dry_run``: the request will not be stored (a hook with side effects refuses it)."""

    def __call__(
        self,
        operation: str,
        res: Resource,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        *,
        dry_run: bool = False,
    ) -> Awaitable[dict[str, Any]]: ...


@dataclass(frozen=True)
class Settings:
    bookmark_seconds: float = 5.0  # how often a watch that asked for bookmarks gets one
    watch_queue: int = 100_000  # events a watcher may fall behind before it is closed
    max_watch_seconds: float = 1800.0  # a watch without timeoutSeconds ends after this


@dataclass
class Call:
    server: ApiServer
    request: web.Request
    res: Resource
    namespace: str | None
    name: str | None
    sub: str | None
    watch: bool

    @property
    def verb(self) -> str:
        method = self.request.method
        if method == "GET" and self.name is None:
            return "WATCH" if self.watch else "LIST"
        if method == "DELETE" and self.name is None:
            return "DELETECOLLECTION"
        return method

    @property
    def as_table(self) -> bool:
        """The client asked for a meta.k8s.io Table (kubectl get) rather than objects."""
        return self.sub is None and tables.wants_table(self.request.headers.get("Accept", ""))

    @property
    def dry_run(self) -> bool:
        """``?dryRun=All``: the write is checked and answered but nothing is stored."""
        return dry_run_of(self.request.query.getall("dryRun", []))

    def query(self, key: str, default: str = "") -> str:
        return self.request.query.get(key, default)

    def int_query(self, key: str) -> int | None:
        text = self.query(key)
        if not text:
            return None
        try:
            return int(text)
        except ValueError:
            raise ApiError(400, "BadRequest", f"invalid {key}: {text!r}") from None

    async def body(self) -> Any:
        raw = await self.request.read()
        if not raw:
            raise ApiError(400, "BadRequest", "request body is empty")
        return _decode(raw)


def dry_run_of(values: Any) -> bool:
    """Whether a ``dryRun`` list (query or DeleteOptions) asks for a dry run; only
    ``All`` is a valid value, as upstream (422 naming the value otherwise)."""
    if values is None or values == []:
        return False
    listed = [values] if isinstance(values, str) else values
    bad = [v for v in listed if v != "All"]
    if bad or not isinstance(listed, list):
        raise ApiError(
            422,
            "Invalid",
            f'dryRun: Unsupported value: "{bad[0] if bad else listed}": supported values: "All"',
        )
    return True


def json_response(body: Any, status: int = 200) -> web.Response:
    return raw_response(_encode(body), status)


def raw_response(raw: bytes, status: int = 200) -> web.Response:
    return web.Response(body=raw, status=status, content_type="application/json")


def success(code: int = 201) -> web.Response:
    return json_response(
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code},
        code,
    )
