"""POST, PUT, PATCH, DELETE and the pod actions (binding, eviction).

As the API server: the main resource ignores ``status`` when the resource has a status
subresource and ``/status`` changes only status; a ``metadata.resourceVersion`` in the
body is a precondition (409 Conflict when stale); admission hooks see each create and
update before it is stored. Strategic merge patch is refused (415) for custom
resources, as for CRDs upstream. ``dryRun=All`` (query, or DeleteOptions/an
Eviction's ``deleteOptions``) runs every step, admission included, and answers as the
write would, but stores nothing: no new resourceVersion, no watch event.
"""

from __future__ import annotations

from typing import Any

import msgspec
import structlog
from aiohttp import web

from baton.services.simcluster.api import evictions, objects, patching, validation
from baton.services.simcluster.api.calls import (
    Call,
    dry_run_of,
    json_response,
    raw_response,
    success,
)
from baton.services.simcluster.api.objects import ApiError
from baton.services.simcluster.api.reading import predicate, scale_of, served
from baton.services.simcluster.clock import timestamp

_decode = msgspec.json.Decoder().decode
log = structlog.get_logger("simcluster.api")
_PATCHES = {
    "application/merge-patch+json": patching.merge_patch,
    "application/strategic-merge-patch+json": patching.strategic_merge_patch,
    "application/json-patch+json": patching.json_patch,
}


async def _object_body(call: Call) -> dict[str, Any]:
    body = await call.body()
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the request body is not a JSON object")
    kind = body.get("kind")
    if kind and kind != call.res.kind and call.sub is None:
        raise ApiError(
            400,
            "BadRequest",
            f"the kind of the object ({kind}) does not match the resource ({call.res.kind})",
        )
    meta = body.setdefault("metadata", {})
    if call.res.namespaced:
        if meta.get("namespace") and meta["namespace"] != call.namespace:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not "
                "match the namespace sent on the request",
            )
        meta["namespace"] = call.namespace
    if call.name and meta.get("name", call.name) != call.name:
        raise ApiError(
            400,
            "BadRequest",
            f"the name of the object ({meta['name']}) does not "
            f"match the name on the URL ({call.name})",
        )
    return _decoded(call, body)


WARNINGS = web.RequestKey("warnings", list[str])  # answered as Warning headers


def _decoded(call: Call, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` checked against its kind's schema under the request's ``fieldValidation``
    (the server's default: Warn); warnings go on the request for the answer's headers."""
    mode = call.query("fieldValidation") or "Warn"
    body, warnings = validation.decode(call.res, body, mode=mode)
    if warnings:
        call.request[WARNINGS] = warnings
        log.info("unknown fields dropped", resource=call.res.plural, fields=warnings)
    return body


async def _admit(
    call: Call, operation: str, obj: dict[str, Any], old: dict[str, Any] | None
) -> dict[str, Any]:
    for hook in call.server.admission:
        obj = await hook(operation, call.res, obj, old, dry_run=call.dry_run)
    return obj


def _stored(call: Call, obj: dict[str, Any]) -> dict[str, Any]:
    """A request's object in the form the Store keeps (converted when ``res`` is a view)."""
    conversion = call.res.conversion
    return obj if conversion is None else conversion.into(obj)


def _answer(call: Call, obj: dict[str, Any], status: int = 200) -> web.Response:
    """The object a write stored (or, in a dry run, would have stored) as served."""
    store, name = call.server.store, obj["metadata"]["name"]
    if call.dry_run or call.res.conversion is not None:
        return json_response(served(call, obj), status)
    return raw_response(store.get_raw(call.res.key, call.namespace, name), status)


async def create(call: Call) -> web.StreamResponse:
    if call.res.namespaced and call.namespace is None:
        raise ApiError(405, "MethodNotAllowed", "create needs a namespace in the path")
    body = await _object_body(call)
    if call.res.plural == "pods" or (call.res.group and "status" in call.res.subresources):
        body.pop("status", None)  # as upstream: a pod starts Pending, a CR without status
    if call.res.plural == "pods":
        objects.default_requests(body)  # defaulting comes before admission, as upstream
    body = await _admit(call, "CREATE", body, None)
    obj = call.server.store.create(call.res.key, _stored(call, body), dry_run=call.dry_run)
    return _answer(call, obj, 201)


async def update(call: Call) -> web.StreamResponse:
    store, name = call.server.store, call.name or ""
    old_raw = store.get_raw(call.res.key, call.namespace, name)
    body = await _object_body(call)
    if call.sub == "scale":
        return _set_replicas(call, body)
    current = served(call, _decode(old_raw))
    if call.sub == "status":
        current["status"] = body.get("status")
        current["metadata"]["resourceVersion"] = body["metadata"].get("resourceVersion")
        body = current
    elif "status" in call.res.subresources:
        body["status"] = current.get("status")
    return await _store(call, body, current)


async def patch(call: Call) -> web.StreamResponse:
    store = call.server.store
    ctype = call.request.content_type
    apply = _PATCHES.get(ctype)
    if apply is None or (apply is patching.strategic_merge_patch and not call.res.built_in):
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media "
            f"types include: {', '.join(_PATCHES)}",
        )
    body = await call.body()
    if apply is not patching.json_patch and not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
    current = served(call, _decode(store.get_raw(call.res.key, call.namespace, call.name or "")))
    if call.sub == "scale":
        scaled = apply(scale_of(current), body)
        return _set_replicas(call, scaled)
    patched = apply(_decode(msgspec.json.encode(current)), body)
    if not isinstance(patched.get("metadata"), dict):
        raise ApiError(422, "Invalid", "metadata: Required value")
    patched = _decoded(call, patched)
    if call.sub == "status":
        rv = patched["metadata"].get("resourceVersion")
        patched, status = _decode(msgspec.json.encode(current)), patched.get("status")
        patched["status"], patched["metadata"]["resourceVersion"] = status, rv
    elif "status" in call.res.subresources:
        patched["status"] = current.get("status")
    return await _store(call, patched, current)


async def _store(call: Call, new: dict[str, Any], old: dict[str, Any]) -> web.StreamResponse:
    if call.res.plural == "pods":
        objects.default_requests(new)  # every write is decoded and defaulted upstream
    new = await _admit(call, "UPDATE", new, old)
    new["metadata"]["name"] = call.name
    if call.res.namespaced:
        new["metadata"]["namespace"] = call.namespace
    else:
        new["metadata"].pop("namespace", None)
    if new.get("status") is None:
        new.pop("status", None)
    stored = call.server.store.replace(call.res.key, _stored(call, new), dry_run=call.dry_run)
    return _answer(call, stored)


def _set_replicas(call: Call, scale: dict[str, Any]) -> web.StreamResponse:
    store, plural, name = call.server.store, call.res.key, call.name or ""
    replicas = (scale.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or replicas < 0:
        raise ApiError(
            422,
            "Invalid",
            f'Scale "{name}" is invalid: spec.replicas: Invalid '
            "value: must be a non-negative integer",
        )
    sent = (scale.get("metadata") or {}).get("resourceVersion")
    current = store.get(plural, call.namespace, name)
    if sent and sent != current["metadata"]["resourceVersion"]:
        raise ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {plural} "{name}": '
            "the object has been modified; please apply your changes to the "
            "latest version and try again",
        )
    obj = store.mutate(
        plural,
        call.namespace,
        name,
        lambda o: o.setdefault("spec", {}).update(replicas=replicas),
        dry_run=call.dry_run,
    )
    return json_response(scale_of(obj))


async def _delete_options(call: Call) -> dict[str, Any]:
    raw = await call.request.read()
    opts = _decode(raw) if raw else {}
    if not isinstance(opts, dict):
        raise ApiError(400, "BadRequest", "DeleteOptions must be a JSON object")
    grace = call.int_query("gracePeriodSeconds")
    if grace is not None:
        opts["gracePeriodSeconds"] = grace
    opts["dryRun"] = call.dry_run or dry_run_of(opts.get("dryRun"))  # query or body
    return opts


async def delete(call: Call) -> web.StreamResponse:
    store, plural, name = call.server.store, call.res.key, call.name or ""
    opts = await _delete_options(call)
    meta = store.get(plural, call.namespace, name)["metadata"]
    for key, have in (opts.get("preconditions") or {}).items():
        if have is not None and meta.get(key) != have:
            raise ApiError(
                409,
                "Conflict",
                f"Precondition failed: {key} in precondition: "
                f"{have}, {key} in object meta: {meta.get(key)}",
            )
    gone = store.delete(
        plural,
        call.namespace,
        name,
        grace_seconds=opts.get("gracePeriodSeconds"),
        dry_run=opts["dryRun"],
    )
    return json_response(served(call, gone))


async def delete_collection(call: Call) -> web.StreamResponse:
    store, res = call.server.store, call.res
    opts = await _delete_options(call)
    items = [obj for obj, _ in store.entries(res.key, call.namespace, predicate(call))]
    gone = [
        store.delete(
            res.key,
            obj["metadata"].get("namespace"),
            obj["metadata"]["name"],
            grace_seconds=opts.get("gracePeriodSeconds"),
            dry_run=opts["dryRun"],
        )
        for obj in items
    ]
    return json_response(
        {
            "kind": f"{res.kind}List",
            "apiVersion": res.api_version,
            "metadata": {"resourceVersion": str(store.rv)},
            "items": [served(call, obj) for obj in gone],
        }
    )


async def act(call: Call) -> web.StreamResponse:
    """POST pods/<name>/binding or pods/<name>/eviction."""
    body = await call.body()
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the request body is not a JSON object")
    name = call.name or (body.get("metadata") or {}).get("name") or ""
    if call.sub == "binding":
        return bind(call, name, body)
    options = body.get("deleteOptions") or {}
    dry = call.dry_run or dry_run_of(options.get("dryRun"))
    grace = options.get("gracePeriodSeconds")
    evictions.evict(call.server.store, call.namespace, name, grace=grace, dry_run=dry)
    return success(201)


def bind(call: Call, name: str, binding: dict[str, Any]) -> web.StreamResponse:
    store = call.server.store
    node = (binding.get("target") or {}).get("name")
    if not node:
        raise ApiError(422, "Invalid", f'Binding "{name}" is invalid: target.name: Required value')
    pod = store.get("pods", call.namespace, name)
    if pod["metadata"].get("deletionTimestamp"):
        raise ApiError(
            409, "Conflict", f"pod {name} is being deleted, cannot be assigned to a host"
        )
    if pod["spec"].get("nodeName"):
        raise ApiError(
            409, "Conflict", f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"'
        )
    notes = (binding.get("metadata") or {}).get("annotations") or {}

    def assign(obj: dict[str, Any]) -> None:
        obj["spec"]["nodeName"] = node
        scheduled(obj.setdefault("status", {}))  # as the API server's binding does
        if notes:
            obj["metadata"]["annotations"] = {**obj["metadata"].get("annotations", {}), **notes}

    store.mutate("pods", call.namespace, name, assign, dry_run=call.dry_run)
    return success(201)


def scheduled(status: dict[str, Any]) -> None:
    """``PodScheduled`` True (a scheduler's Unschedulable verdict is replaced)."""
    kept = [c for c in status.get("conditions") or () if c.get("type") != "PodScheduled"]
    entry = {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
             "lastTransitionTime": timestamp()}  # fmt: skip
    status["conditions"] = [entry, *kept]
