"""OpenAPI documents for the resources simcluster serves (``/openapi/v2``, ``/openapi/v3``).

kubectl reads them before ``create``/``apply``: it checks that each kind's PATCH
operation takes the ``fieldValidation`` parameter and then leaves validation to the
server, and it looks a kind's schema up by its ``x-kubernetes-group-version-kind``.
The documents are built from the resources table: every kind gets its paths (list,
create, get, replace, patch, delete, subresources) and the structural schema the server
validates it against (:mod:`schemas`, so ``kubectl explain`` works); a kind without one
gets ``apiVersion``, ``kind``, ``metadata`` and open ``spec``/``status``. Kinds compiled
into the real API server advertise strategic merge patch in v2; v3 leaves it out, so
``kubectl apply`` computes strategic patches from its compiled-in types (merge keys)
rather than from these schemas. ``/openapi/v2`` is JSON only: a
client that accepts only protobuf (kubectl, validating a kind the v3 documents do not
have) gets an empty protobuf document: kubectl finds no schema there, skips its own
validation and answers ``no matches for kind`` from discovery, as against a real cluster.

Pure: the resources table in, JSON-ready dicts out; built once per process.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from baton.services.simcluster.api.kinds import schema_of
from baton.services.simcluster.api.resources import RESOURCES, Resource

Obj = dict[str, Any]
META = "io.k8s.apimachinery.pkg.apis.meta.v1"
OBJECT_META = f"{META}.ObjectMeta"
LIST_META = f"{META}.ListMeta"
STATUS = f"{META}.Status"
SCALE = "io.k8s.api.autoscaling.v1.Scale"
_PACKAGES = {"": "core", "events.k8s.io": "events"}  # built-in group -> Go package
_PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
)
_STRATEGIC = "application/strategic-merge-patch+json"
_WRITE_PARAMS = ("dryRun", "fieldManager", "fieldValidation")
_SUB_KINDS = {  # subresource -> (group, version, kind) of its body
    "binding": ("", "v1", "Binding"),
    "eviction": ("policy", "v1", "Eviction"),
    "scale": ("autoscaling", "v1", "Scale"),
}


def definition(group: str, version: str, kind: str) -> str:
    """Upstream's schema name: ``io.k8s.api.core.v1.Pod``; a CRD's reverses its group:
    ``io.x-k8s.scheduling.v1alpha1.PodGroup``."""
    if group == "" or group.endswith(".k8s.io") or "." not in group:
        package = _PACKAGES.get(group, group.split(".")[0])
        return f"io.k8s.api.{package}.{version}.{kind}"
    return ".".join(reversed(group.split("."))) + f".{version}.{kind}"


def _gvk(group: str, version: str, kind: str) -> Obj:
    return {"group": group, "version": version, "kind": kind}


def _ref(name: str, *, v3: bool) -> Obj:
    return {"$ref": f"#/components/schemas/{name}" if v3 else f"#/definitions/{name}"}


def _kind_schema(r: Resource, *, v3: bool) -> Obj:
    metadata = {"allOf": [_ref(OBJECT_META, v3=v3)]} if v3 else _ref(OBJECT_META, v3=v3)
    known = schema_of(r.group, r.kind)
    if known is not None:  # what simcluster validates against (schemas.py)
        return {
            **known,
            "properties": {**known["properties"], "metadata": metadata},
            "x-kubernetes-group-version-kind": [_gvk(r.group, r.version, r.kind)],
        }
    props: Obj = {
        "apiVersion": {"type": "string", "description": "APIVersion of this object."},
        "kind": {"type": "string", "description": "Kind of this object."},
        "metadata": {"allOf": [_ref(OBJECT_META, v3=v3)]} if v3 else _ref(OBJECT_META, v3=v3),
        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    }
    if "status" in r.subresources:
        props["status"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "type": "object",
        "description": f"{r.kind} ({r.api_version}) as simcluster serves it.",
        "properties": props,
        "x-kubernetes-preserve-unknown-fields": True,
        "x-kubernetes-group-version-kind": [_gvk(r.group, r.version, r.kind)],
    }


def _list_schema(r: Resource, *, v3: bool) -> Obj:
    return {
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": _ref(LIST_META, v3=v3),
            "items": {
                "type": "array",
                "items": _ref(definition(r.group, r.version, r.kind), v3=v3),
            },
        },
        "x-kubernetes-group-version-kind": [_gvk(r.group, r.version, f"{r.kind}List")],
    }


def _meta_schemas() -> dict[str, Obj]:
    string_map = {"type": "object", "additionalProperties": {"type": "string"}}
    open_object = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        OBJECT_META: {
            "type": "object",
            "properties": {
                **{
                    k: {"type": "string"}
                    for k in ("name", "generateName", "namespace", "uid", "resourceVersion")
                },
                "creationTimestamp": {"type": "string", "format": "date-time"},
                "deletionTimestamp": {"type": "string", "format": "date-time"},
                "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
                "generation": {"type": "integer", "format": "int64"},
                "labels": string_map,
                "annotations": string_map,
                "finalizers": {"type": "array", "items": {"type": "string"}},
                "ownerReferences": {"type": "array", "items": open_object},
                "managedFields": {"type": "array", "items": open_object},
            },
        },
        LIST_META: {
            "type": "object",
            "properties": {
                "resourceVersion": {"type": "string"},
                "continue": {"type": "string"},
                "remainingItemCount": {"type": "integer", "format": "int64"},
            },
        },
        STATUS: {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "x-kubernetes-group-version-kind": [_gvk("", "v1", "Status")],
        },
    }


def _sub_schemas(*, v3: bool) -> dict[str, Obj]:
    out: dict[str, Obj] = {}
    for group, version, kind in _SUB_KINDS.values():
        out[definition(group, version, kind)] = {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": _ref(OBJECT_META, v3=v3),
            },
            "x-kubernetes-preserve-unknown-fields": True,
            "x-kubernetes-group-version-kind": [_gvk(group, version, kind)],
        }
    return out


def _schemas(resources: list[Resource], *, v3: bool) -> dict[str, Obj]:
    out = {**_meta_schemas(), **_sub_schemas(v3=v3)}
    for r in resources:
        out[definition(r.group, r.version, r.kind)] = _kind_schema(r, v3=v3)
        out[definition(r.group, r.version, f"{r.kind}List")] = _list_schema(r, v3=v3)
    return out


def _base(r: Resource) -> str:
    return "/api/v1" if r.group == "" else f"/apis/{r.group}/{r.version}"


def _param(name: str, where: str = "query", *, v3: bool) -> Obj:
    kind = {"type": "string"}
    return {"name": name, "in": where, "required": where == "path", "uniqueItems": True} | (
        {"schema": kind} if v3 else kind
    )


def _operation(
    r: Resource, action: str, gvk: tuple[str, str, str], body: str | None, *, v3: bool
) -> Obj:
    group, version, kind = gvk
    ref = _ref(body or definition(group, version, kind), v3=v3)
    op: Obj = {
        "operationId": f"{action}{r.kind}{r.group}{r.version}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(group, version, kind),
        "responses": {"200": {"description": "OK"}},
    }
    if v3:
        op["responses"]["200"]["content"] = {"application/json": {"schema": ref}}
    else:
        op["responses"]["200"]["schema"] = ref
    params = []
    if action in ("post", "put", "patch"):
        params += [_param(p, v3=v3) for p in _WRITE_PARAMS]
        # v3 does not offer strategic merge: kubectl would then compute apply patches
        # from these open schemas (no merge keys) instead of its compiled-in types
        types = (*_PATCH_TYPES, _STRATEGIC) if r.built_in and not v3 else _PATCH_TYPES
        content = types if action == "patch" else ("application/json",)
        schema = {"type": "object"} if action == "patch" else ref
        if v3:
            op["requestBody"] = {"content": {t: {"schema": schema} for t in content}}
        else:
            params.append({"name": "body", "in": "body", "required": True, "schema": schema})
            op["consumes"] = list(content)
    if action == "patch":
        params.append(_param("force", v3=v3))
    if action in ("list", "watch"):
        params += [
            _param(p, v3=v3)
            for p in ("labelSelector", "fieldSelector", "limit", "continue", "resourceVersion")
        ]
    op["parameters"] = params
    return op


def _paths(r: Resource, *, v3: bool) -> dict[str, Obj]:
    base = _base(r)
    scope = f"{base}/namespaces/{{namespace}}" if r.namespaced else base
    gvk = (r.group, r.version, r.kind)
    listed = (r.group, r.version, f"{r.kind}List")
    ns_params = [_param("namespace", "path", v3=v3)] if r.namespaced else []
    item_params = [_param("name", "path", v3=v3), *ns_params]
    paths: dict[str, Obj] = {
        f"{scope}/{r.plural}": {
            "get": _operation(r, "list", listed, None, v3=v3),
            "post": _operation(r, "post", gvk, None, v3=v3),
            "delete": _operation(r, "deletecollection", gvk, STATUS, v3=v3),
            "parameters": ns_params,
        },
        f"{scope}/{r.plural}/{{name}}": {
            verb: _operation(r, verb, gvk, STATUS if verb == "delete" else None, v3=v3)
            for verb in ("get", "put", "patch", "delete")
        }
        | {"parameters": item_params},
    }
    if r.namespaced:
        paths[f"{base}/{r.plural}"] = {"get": _operation(r, "list", listed, None, v3=v3)}
    for sub in r.subresources:
        sub_gvk = _SUB_KINDS.get(sub, gvk)
        verbs = ("post",) if sub in ("binding", "eviction") else ("get", "put", "patch")
        paths[f"{scope}/{r.plural}/{{name}}/{sub}"] = {
            verb: _operation(r, verb, sub_gvk, None, v3=v3) for verb in verbs
        } | {"parameters": item_params}
    return paths


def _served() -> dict[str, list[Resource]]:
    """Group/version path (``api/v1``, ``apis/g/v``) -> its resources."""
    out: dict[str, list[Resource]] = {}
    for r in RESOURCES:
        key = "api/v1" if r.group == "" else f"apis/{r.group}/{r.version}"
        out.setdefault(key, []).append(r)
    return out


_INFO = {"title": "Kubernetes", "version": "v1.31.0-simcluster"}


@functools.cache
def v3_document(path: str) -> bytes | None:
    """The OpenAPI v3 document of one group/version (``apis/scheduling.x-k8s.io/v1alpha1``)."""
    resources = _served().get(path)
    if resources is None:
        return None
    paths: dict[str, Obj] = {}
    for r in resources:
        paths.update(_paths(r, v3=True))
    doc = {
        "openapi": "3.0.0",
        "info": _INFO,
        "paths": paths,
        "components": {"schemas": _schemas(resources, v3=True)},
    }
    return json.dumps(doc, sort_keys=True).encode()


@functools.cache
def v3_index() -> bytes:
    """``/openapi/v3``: each group/version's document, named with a hash of its content."""
    entries = {}
    for path in _served():
        digest = hashlib.sha256(v3_document(path) or b"").hexdigest().upper()
        entries[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return json.dumps({"paths": entries}, sort_keys=True).encode()


@functools.cache
def v2_document() -> bytes:
    """``/openapi/v2``: every group/version in one Swagger 2.0 document (JSON)."""
    paths: dict[str, Obj] = {}
    for r in RESOURCES:
        paths.update(_paths(r, v3=False))
    doc = {
        "swagger": "2.0",
        "info": _INFO,
        "paths": paths,
        "definitions": _schemas(list(RESOURCES), v3=False),
    }
    return json.dumps(doc, sort_keys=True).encode()


V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


@functools.cache
def v2_protobuf() -> bytes:
    """``/openapi/v2`` for a client that accepts only protobuf: a gnostic ``Document``
    with ``swagger``, ``info`` and no paths or definitions (simcluster does not encode
    schemas as protobuf; its JSON documents carry them)."""
    info = _field(1, _INFO["title"].encode()) + _field(2, _INFO["version"].encode())
    return _field(1, b"2.0") + _field(2, info) + _field(8, b"")


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)
