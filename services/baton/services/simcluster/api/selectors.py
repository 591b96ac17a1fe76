"""Label and field selectors, parsed once into predicates over plain object dicts.

Label selector grammar (as the API server's ``labels.Parse``): comma-separated
requirements ``k``, ``!k``, ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``,
``k notin (a,b)``, ``k>n``, ``k<n``. ``!=`` and ``notin`` also match objects without
the label. Field selectors allow ``=``, ``==`` and ``!=`` on the paths a resource
lists in :mod:`resources`; a missing field reads as ``""``.
Parse errors raise :class:`SelectorError`; the server answers 400 BadRequest.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

Predicate = Callable[[dict[str, Any]], bool]

_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
_SET = re.compile(r"^\s*(\S+?)\s+(in|notin)\s*\((.*)\)\s*$")
_OP = re.compile(r"^\s*([^!=<>\s]+)\s*(==|!=|=|<|>)\s*(.*?)\s*$")


class SelectorError(ValueError):
    """A selector the caller sent does not parse (their fault: 400)."""


def _split(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _check(key: str, values: list[str]) -> None:
    if not _KEY.match(key):
        raise SelectorError(f"unable to parse requirement: invalid label key {key!r}")
    for v in values:
        if not _VALUE.match(v):
            raise SelectorError(f"unable to parse requirement: invalid label value {v!r}")


def _requirement(text: str) -> Callable[[dict[str, str]], bool]:
    if m := _SET.match(text):
        key, op = m.group(1), m.group(2)
        values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
        _check(key, list(values))
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _OP.match(text):
        key, op, value = m.group(1), m.group(2), m.group(3)
        if op in "<>":
            return _numeric(key, op, value)
        _check(key, [value])
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    negate = text.startswith("!")
    key = text[1:].strip() if negate else text
    _check(key, [])
    if negate:
        return lambda labels: key not in labels
    return lambda labels: key in labels


def _numeric(key: str, op: str, value: str) -> Callable[[dict[str, str]], bool]:
    _check(key, [])
    try:
        bound = int(value)
    except ValueError:
        raise SelectorError(f"unable to parse requirement: {value!r} is not an integer") from None

    def match(labels: dict[str, str]) -> bool:
        try:
            have = int(labels[key])
        except (KeyError, ValueError):
            return False
        return have > bound if op == ">" else have < bound

    return match


@lru_cache(maxsize=512)
def label_predicate(text: str) -> Predicate | None:
    """A predicate for a label selector string, or None when it selects everything."""
    reqs = [_requirement(part) for part in _split(text or "")]
    if not reqs:
        return None

    def match(obj: dict[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(r(labels) for r in reqs)

    return match


def field_value(obj: dict[str, Any], path: str) -> str:
    """A field as a selector compares it: strings as-is, booleans lower case, missing ''."""
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, dict):
            return ""
        node = node.get(part)
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def field_equals(text: str, path: str) -> str | None:
    """The value a field selector requires ``path`` to equal (``path=v``), if it does: the
    store answers from an index instead of a scan (the API server's ``spec.nodeName``)."""
    for part in _split(text or ""):
        m = _OP.match(part)
        if m and m.group(1) == path and m.group(2) in ("=", "=="):
            return m.group(3)
    return None


@lru_cache(maxsize=512)
def field_predicate(text: str, allowed: tuple[str, ...]) -> Predicate | None:
    """A predicate for a field selector string, or None when it selects everything."""
    terms: list[tuple[str, bool, str]] = []
    for part in _split(text or ""):
        m = _OP.match(part)
        if not m or m.group(2) in "<>":
            raise SelectorError(f"invalid field selector: {part!r}")
        path, op, value = m.group(1), m.group(2), m.group(3)
        if path not in allowed:
            raise SelectorError(f'field label not supported: "{path}"')
        terms.append((path, op == "!=", value))
    if not terms:
        return None

    def match(obj: dict[str, Any]) -> bool:
        return all((field_value(obj, p) == v) != neg for p, neg, v in terms)

    return match


def combine(*preds: Predicate | None) -> Predicate | None:
    """One predicate that holds when all the given ones do (None ones ignored)."""
    real = [p for p in preds if p is not None]
    if not real:
        return None
    if len(real) == 1:
        return real[0]
    return lambda obj: all(p(obj) for p in real)
