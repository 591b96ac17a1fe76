"""GET, LIST (with limit/continue) and WATCH over the store.

Lists are assembled from each object's stored JSON bytes, so a 100k-pod list is one
join, not 100k encodes. Paging walks the objects in key order (namespace, name); the
continue token carries the list's resourceVersion and the last key, and expires (410)
when that resourceVersion leaves the change ring. Later pages show objects as they are
now, not as they were at the first page (etcd would serve the old snapshot); a client
that then watches from the list's resourceVersion converges on the same state.
"""

from __future__ import annotations

import base64
import bisect
import time
from typing import Any

import msgspec
from aiohttp import web

from baton.services.simcluster.api import tables
from baton.services.simcluster.api.calls import Call, json_response, raw_response
from baton.services.simcluster.api.history import Expired, Predicate, Watcher, frame
from baton.services.simcluster.api.objects import ApiError
from baton.services.simcluster.api.selectors import SelectorError
from baton.services.simcluster.api.store import Entry

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
_LIVENESS_SECONDS = 1.0  # how often an idle watch checks that its client is still there


def scale_of(obj: dict[str, Any]) -> dict[str, Any]:
    """The autoscaling/v1 Scale view of a MachineDeployment-like object."""
    meta = obj["metadata"]
    status = obj.get("status") or {}
    selector = status.get("selector", "")
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
        "status": {
            "replicas": status.get("replicas", 0),
            "selector": selector if isinstance(selector, str) else "",
        },
    }


def served(call: Call, obj: dict[str, Any]) -> dict[str, Any]:
    """A stored object as this resource serves it (converted when it is a view)."""
    conversion = call.res.conversion
    return obj if conversion is None else conversion.out(obj)


async def get(call: Call) -> web.StreamResponse:
    store = call.server.store
    assert call.name is not None
    if call.sub == "scale":
        return json_response(scale_of(store.get(call.res.key, call.namespace, call.name)))
    if call.as_table:
        obj = served(call, store.get(call.res.key, call.namespace, call.name))
        return json_response(_table(call, [obj], rv=str(store.rv)))
    if call.res.conversion is not None:
        return json_response(served(call, store.get(call.res.key, call.namespace, call.name)))
    return raw_response(store.get_raw(call.res.key, call.namespace, call.name))


def predicate(call: Call) -> Predicate | None:
    fields = call.query("fieldSelector")
    if call.res.conversion is not None:
        fields = call.res.conversion.field_selector(fields)
    try:
        return call.server.store.predicate(call.res.key, call.query("labelSelector"), fields)
    except SelectorError as err:
        raise ApiError(400, "BadRequest", str(err)) from None


async def list_(call: Call) -> web.StreamResponse:
    store, res = call.server.store, call.res
    pred = predicate(call)
    limit = call.int_query("limit") or 0
    token = call.query("continue")
    rv, meta, next_token = store.rv, b"", ""
    if limit > 0 or token:
        entries, rv, next_token = _page(call, pred, limit, token)
        if next_token:
            meta = b',"continue":"' + next_token.encode() + b'"'
    else:
        _check_exact(call)
        entries = store.entries(res.key, call.namespace, pred, field=call.query("fieldSelector"))
    if call.as_table:  # kubectl get: only this path pays for building rows
        objs = [served(call, obj) for obj, _ in entries]
        return json_response(_table(call, objs, rv=str(rv), cont=next_token))
    if res.conversion is not None:
        raws = [_encode(res.conversion.out(obj)) for obj, _ in entries]
    else:
        raws = [raw for _, raw in entries]
    head = (
        b'{"kind":"'
        + res.kind.encode()
        + b'List","apiVersion":"'
        + res.api_version.encode()
        + b'","metadata":{"resourceVersion":"'
        + str(rv).encode()
        + b'"'
        + meta
        + b'},"items":['
    )
    return raw_response(head + b",".join(raws) + b"]}")


def _table(call: Call, objs: list[dict[str, Any]], *, rv: str = "", cont: str = "") -> Any:
    include = call.query("includeObject", "Metadata")
    if include not in ("None", "Metadata", "Object"):
        raise ApiError(400, "BadRequest", f"invalid includeObject: {include!r}")
    now = call.server.store.now()
    return tables.table(call.res.key, objs, now=now, include=include, rv=rv, cont=cont)


def _lines_out(call: Call, lines: bytes) -> bytes:
    """Watch event lines as this call wants them: converted for a view, one-row Tables
    for kubectl get -w; the stored lines untouched otherwise (the fast path)."""
    if not call.as_table and call.res.conversion is None:
        return lines
    out: list[bytes] = []
    for line in lines.splitlines():
        event = _decode(line)
        obj = event.get("object") or {}
        if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
            obj = served(call, obj)
            event["object"] = _table(call, [obj]) if call.as_table else obj
        elif event.get("type") == "BOOKMARK" and call.as_table:
            rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
            event["object"] = tables.table(call.res.key, [], now=0.0, rv=rv)
        out.append(_encode(event) + b"\n")
    return b"".join(out)


def _check_exact(call: Call) -> None:
    if call.query("resourceVersionMatch") == "Exact":
        wanted = call.int_query("resourceVersion")
        if wanted != call.server.store.rv:
            raise ApiError(410, "Expired", f"too old resource version: {wanted}")


def _page(
    call: Call, pred: Predicate | None, limit: int, token: str
) -> tuple[list[Entry], int, str]:
    store, plural = call.server.store, call.res.key
    rv, start = _decode_token(token) if token else (store.rv, (call.namespace or "", ""))
    try:
        store.ring.check(rv)
    except Expired:
        raise ApiError(
            410,
            "Expired",
            "The provided continue parameter is too old to display "
            "a consistent list result. You can start a new list without the "
            "continue parameter.",
        ) from None
    keys = store.sorted_keys(plural)
    i = bisect.bisect_right(keys, start) if token else bisect.bisect_left(keys, start)
    out: list[Entry] = []
    last: tuple[str, str] | None = None
    while i < len(keys) and (limit <= 0 or len(out) < limit):
        key = keys[i]
        i += 1
        if call.namespace is not None and key[0] != call.namespace:
            break
        entry: Entry | None = store.lookup(plural, key)
        if entry is not None and (pred is None or pred(entry[0])):
            out.append(entry)
            last = key
    more = i < len(keys) and (call.namespace is None or keys[i][0] == call.namespace)
    return out, rv, _encode_token(rv, last) if more and last else ""


def _encode_token(rv: int, key: tuple[str, str]) -> str:
    return base64.urlsafe_b64encode(_encode({"rv": rv, "start": list(key)})).decode()


def _decode_token(token: str) -> tuple[int, tuple[str, str]]:
    try:
        data = msgspec.json.decode(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), (str(data["start"][0]), str(data["start"][1]))
    except (ValueError, KeyError, IndexError, TypeError, msgspec.DecodeError):
        raise ApiError(400, "BadRequest", "continue key is not valid") from None


async def watch(call: Call) -> web.StreamResponse:
    """Stream changes after ``resourceVersion`` (all current objects first if 0/unset)."""
    server, store, res = call.server, call.server.store, call.res
    pred = predicate(call)
    rv_text = call.query("resourceVersion")
    if rv_text in ("", "0"):
        initial = [frame("ADDED", raw) for _, raw in store.entries(res.key, call.namespace, pred)]
        since = store.rv
    else:
        initial, since = [], call.int_query("resourceVersion") or 0
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(call.request)
    try:
        watcher = store.watch(
            res.key,
            namespace=call.namespace,
            predicate=pred,
            since=since,
            capacity=server.settings.watch_queue,
        )
    except Expired as err:
        status = ApiError(410, "Expired", str(err)).status()
        await response.write(_encode({"type": "ERROR", "object": status}) + b"\n")
        return response
    gauge = server.metrics.longrunning.labels("WATCH", res.plural)
    gauge.inc()
    try:
        if initial:
            first = b"".join(initial)
            await response.write(_lines_out(call, first))
        await _follow(call, watcher, response)
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        store.unwatch(watcher)
        gauge.dec()
    return response


async def _follow(call: Call, watcher: Watcher, response: web.StreamResponse) -> None:
    settings, metrics = call.server.settings, call.server.metrics.watch_events
    timeout = call.int_query("timeoutSeconds")
    deadline = time.monotonic() + (timeout if timeout else settings.max_watch_seconds)
    bookmarks = call.query("allowWatchBookmarks") in ("1", "true", "True")
    next_bookmark = time.monotonic() + settings.bookmark_seconds
    while True:
        now = time.monotonic()
        if now >= deadline:
            return
        wake = min(deadline, next_bookmark) if bookmarks else deadline
        await watcher.wait(max(0.0, min(wake - now, _LIVENESS_SECONDS)))
        transport = call.request.transport
        if transport is None or transport.is_closing():
            return  # the client went away; aiohttp does not cancel the handler for us
        if watcher.lines:
            metrics.labels(call.res.plural).inc(len(watcher.lines))
            lines = watcher.drain()
            await response.write(_lines_out(call, lines))
        if watcher.closed:
            return
        if bookmarks and time.monotonic() >= next_bookmark and not watcher.lines:
            # only with nothing queued: the bookmark promises all up to this RV was sent
            mark = _bookmark(call, call.server.store.rv)
            await response.write(_lines_out(call, mark))
            next_bookmark = time.monotonic() + settings.bookmark_seconds


def _bookmark(call: Call, rv: int) -> bytes:
    obj = {
        "kind": call.res.kind,
        "apiVersion": call.res.api_version,
        "metadata": {"resourceVersion": str(rv)},
    }
    return _encode({"type": "BOOKMARK", "object": obj}) + b"\n"
