"""The three PATCH formats: JSON merge patch, strategic merge patch, JSON patch.

Strategic merge patch follows the ``patchStrategy``/``patchMergeKey`` tags of the
Kubernetes core types for the lists that have one (below). Lists without a tag are
replaced whole, as the real API server does: notably ``spec.taints`` on nodes and
``spec.tolerations`` on pods have no merge key upstream, so a patch carries the full
list (read, change, patch with the resourceVersion as precondition). Directives
``$patch: replace|delete``, ``$retainKeys``, ``$deleteFromPrimitiveList/<f>`` are
honoured; ``$setElementOrder/<f>`` is accepted and ignored.
"""

from __future__ import annotations

import copy
from typing import Any

from baton.services.simcluster.api.objects import ApiError

# path of field names (list items transparent) -> merge key, or "" for a set of scalars
MERGE_KEYS: dict[tuple[str, ...], str] = {
    ("metadata", "ownerReferences"): "uid",
    ("metadata", "finalizers"): "",
    ("spec", "containers"): "name",
    ("spec", "initContainers"): "name",
    ("spec", "ephemeralContainers"): "name",
    ("spec", "containers", "env"): "name",
    ("spec", "containers", "ports"): "containerPort",
    ("spec", "containers", "volumeMounts"): "mountPath",
    ("spec", "initContainers", "env"): "name",
    ("spec", "volumes"): "name",
    ("spec", "imagePullSecrets"): "name",
    ("spec", "hostAliases"): "ip",
    ("spec", "topologySpreadConstraints"): "topologyKey",
    ("spec", "podCIDRs"): "",
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def strategic_merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    result = _smp_map(target, patch, ())
    return result if result is not None else {}


def _smp_map(target: Any, patch: dict[str, Any], path: tuple[str, ...]) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    body = {k: v for k, v in patch.items() if not k.startswith("$")}
    if directive == "replace":
        return copy.deepcopy(body)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in body.items():
        sub = (*path, key)
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            merged = _smp_map(out[key], value, sub)
            if merged is None:
                out.pop(key)
            else:
                out[key] = merged
        elif isinstance(value, list) and sub in MERGE_KEYS:
            out[key] = _smp_list(out.get(key) or [], value, sub)
        else:
            out[key] = _strip(value)
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            out[field] = [v for v in out.get(field) or [] if v not in value]
    if isinstance(patch.get("$retainKeys"), list):
        out = {k: v for k, v in out.items() if k in patch["$retainKeys"]}
    return out


def _smp_list(target: list[Any], patch: list[Any], path: tuple[str, ...]) -> list[Any]:
    key = MERGE_KEYS[path]
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [_strip(p) for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    if not key:
        return list(target) + [v for v in patch if v not in target]
    out = list(target)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise ApiError(
                400, "BadRequest", f"map: {item!r} does not contain declared merge key: {key}"
            )
        idx = next(
            (i for i, o in enumerate(out) if isinstance(o, dict) and o.get(key) == item[key]), None
        )
        if item.get("$patch") == "delete":
            out = [o for o in out if not (isinstance(o, dict) and o.get(key) == item[key])]
        elif idx is None:
            out.append(_strip(item))
        else:
            out[idx] = _smp_map(out[idx], item, path)
    return out


def _strip(value: Any) -> Any:
    """A deep copy without ``$``-directives (new values added by a patch)."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def json_patch(target: dict[str, Any], ops: Any) -> dict[str, Any]:
    """RFC 6902 add/remove/replace/move/copy/test over a copy of ``target``."""
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "json patch must be a list of operations")
    doc: Any = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ApiError(400, "BadRequest", f"invalid json patch operation: {op!r}")
        doc = _apply(doc, op)
    if not isinstance(doc, dict):
        raise _unprocessable("the patched document is not an object")
    return doc


def _apply(doc: Any, op: dict[str, Any]) -> Any:
    kind, path = op["op"], _pointer(op["path"])
    if kind == "test":
        if _get(doc, path) != op.get("value"):
            raise _unprocessable(f"testing value {op['path']} failed")
        return doc
    if kind in ("move", "copy"):
        source = _pointer(op.get("from", ""))
        value = copy.deepcopy(_get(doc, source))
        if kind == "move":
            doc = _remove(doc, source)
        return _add(doc, path, value)
    if kind == "remove":
        return _remove(doc, path)
    if kind == "replace":
        _get(doc, path)
        return _add(_remove(doc, path), path, copy.deepcopy(op.get("value")))
    if kind == "add":
        return _add(doc, path, copy.deepcopy(op.get("value")))
    raise ApiError(400, "BadRequest", f"unknown json patch operation {kind!r}")


def _pointer(text: str) -> list[str]:
    if text == "":
        return []
    if not text.startswith("/"):
        raise ApiError(400, "BadRequest", f"invalid json pointer {text!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in text[1:].split("/")]


def _step(node: Any, token: str) -> Any:
    try:
        return node[int(token)] if isinstance(node, list) else node[token]
    except (KeyError, IndexError, ValueError, TypeError):
        raise _unprocessable(f"path element {token!r} not found") from None


def _get(doc: Any, path: list[str]) -> Any:
    for token in path:
        doc = _step(doc, token)
    return doc


def _add(doc: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    parent, last = _get(doc, path[:-1]), path[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(_index(last, len(parent) + 1))
        parent.insert(index, value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise _unprocessable(f"cannot add to a scalar at {last!r}")
    return doc


def _remove(doc: Any, path: list[str]) -> Any:
    if not path:
        raise _unprocessable("cannot remove the whole document")
    parent, last = _get(doc, path[:-1]), path[-1]
    _step(parent, last)
    if isinstance(parent, list):
        del parent[_index(last, len(parent))]
    else:
        del parent[last]
    return doc


def _index(token: str, size: int) -> int:
    if not token.isdigit() or int(token) >= size:
        raise _unprocessable(f"index {token!r} out of range")
    return int(token)


def _unprocessable(message: str) -> ApiError:
    return ApiError(422, "Invalid", message)
