"""Decoding a written object against its kind's structural schema, as the API server does.

Unknown fields are what ``fieldValidation`` says (kubectl sends ``Strict``, other
clients get the server's default ``Warn``): ``Strict`` refuses the write (400,
``strict decoding error: unknown field "spec.minMembers"``), ``Warn`` drops them and
answers a ``Warning`` header for each, ``Ignore`` drops them silently. A value of the
wrong type is refused whatever ``fieldValidation`` says: 422 Invalid for a custom
resource (the CRD's schema), 400 for a built-in kind (its Go types cannot hold it).
Kinds without a schema (:func:`kinds.schema_of` gives None) are stored as sent.

Pure: (schema, object) in, the pruned object and the problems out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from baton.services.simcluster.api.kinds import schema_of
from baton.services.simcluster.api.objects import ApiError, invalid
from baton.services.simcluster.api.resources import Resource
from baton.services.simcluster.api.schemas import Obj

MODES = ("Strict", "Warn", "Ignore")
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


@dataclass
class Problems:
    unknown: list[str] = field(default_factory=list)  # paths of unknown fields
    invalid: list[tuple[str, str]] = field(default_factory=list)  # (path, message)


def decode(
    res: Resource, body: dict[str, Any], *, mode: str = "Warn"
) -> tuple[dict[str, Any], list[str]]:
    """``body`` with unknown fields dropped, and the warnings to answer (ApiError if the
    write is refused)."""
    if mode not in MODES:
        raise ApiError(
            400,
            "BadRequest",
            f'fieldValidation: Unsupported value: "{mode}": supported values: '
            '"Ignore", "Strict", "Warn"',
        )
    schema = schema_of(res.group, res.kind)
    if schema is None:
        return body, []
    problems = Problems()
    pruned = prune(schema, body, "", problems)
    name = (body.get("metadata") or {}).get("name") or ""
    if problems.invalid and res.built_in:
        path, message = problems.invalid[0]
        raise _undecodable(res, f"{path}: {message}")
    if problems.invalid:
        raise invalid(f"{res.kind}.{res.group}", name, problems.invalid)
    unknown = [f'unknown field "{path}"' for path in problems.unknown]
    if unknown and mode == "Strict":
        raise _undecodable(res, "strict decoding error: " + ", ".join(unknown))
    return pruned, unknown if mode == "Warn" else []


def _undecodable(res: Resource, why: str) -> ApiError:
    return ApiError(
        400,
        "BadRequest",
        f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: {why}',
    )


def prune(schema: Obj, value: Any, path: str, problems: Problems) -> Any:
    """``value`` without the fields ``schema`` does not know; problems noted on the way."""
    if value is None or not _typed(schema, value, path, problems):
        return value
    if isinstance(value, list) and "items" in schema:
        return [prune(schema["items"], v, f"{path}[{i}]", problems) for i, v in enumerate(value)]
    if not isinstance(value, dict) or not (
        "properties" in schema or "additionalProperties" in schema
    ):
        return value
    props, extra = schema.get("properties") or {}, schema.get("additionalProperties")
    out = {}
    for key, item in value.items():
        where = f"{path}.{key}" if path else key
        sub = props.get(key, extra)
        if sub is not None:
            out[key] = prune(sub, item, where, problems)
        elif schema.get("x-kubernetes-preserve-unknown-fields"):
            out[key] = item
        else:
            problems.unknown.append(where)
    return out


def _typed(schema: Obj, value: Any, path: str, problems: Problems) -> bool:
    """Whether ``value`` has the schema's type (and minimum); notes it when not."""
    if schema.get("x-kubernetes-int-or-string"):
        wanted: tuple[str, ...] = ("integer", "string")
    else:
        wanted = (schema["type"],) if "type" in schema else ()
    if wanted and not any(_is(value, t) for t in wanted):
        shown = " or ".join(wanted)
        problems.invalid.append(
            (path, f"Invalid value: {_show(value)}: {path} in body must be of type {shown}")
        )
        return False
    minimum = schema.get("minimum")
    if minimum is not None and isinstance(value, int) and value < minimum:
        problems.invalid.append(
            (
                path,
                f"Invalid value: {value}: {path} in body should be greater than or equal "
                f"to {minimum}",
            )
        )
    return True


def _is(value: Any, type_name: str) -> bool:
    if isinstance(value, bool):
        return type_name == "boolean"
    if isinstance(value, float) and type_name == "integer":
        return value.is_integer()
    return isinstance(value, _TYPES.get(type_name, (object,)))


def _show(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean"}
    return f'"{names.get(type(value), "number")}"'
