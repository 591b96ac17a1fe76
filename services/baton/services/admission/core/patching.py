"""JSON Patch (RFC 6902) builders that add to a pod without disturbing what it has."""

from __future__ import annotations

from typing import Any

from baton.services.admission.core.objects import PatchOp, pointer

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
AFFINITY = "/spec/affinity"


def map_patch(path: str, have: dict[str, str] | None, want: dict[str, str]) -> list[PatchOp]:
    """Set ``want``'s keys in the string map at ``path`` (created when missing)."""
    if not want:
        return []
    if have is None:
        return [PatchOp(op="add", path=path, value=dict(want))]
    return [
        PatchOp(op="add", path=path + pointer(key), value=value)
        for key, value in want.items()
        if have.get(key) != value
    ]


def affinity_patch(
    affinity: dict[str, Any] | None, *, key: str, values: tuple[str, ...]
) -> list[PatchOp]:
    """AND a required ``key In values`` node requirement into every node selector term,
    once: a term that already requires ``key In`` a subset of ``values`` (a copy of a pod
    admitted before, such as a gang recreated whole; the values in another order; or its
    author's narrower choice) is left as it is, and one whose ``key In`` allows more (a
    copy admitted when its team could borrow) has that requirement replaced, never a
    second one added beside it."""
    requirement = {"key": key, "operator": "In", "values": list(values)}
    term = {"matchExpressions": [requirement]}
    required = {"nodeSelectorTerms": [term]}
    if affinity is None:
        return [PatchOp(op="add", path=AFFINITY, value={"nodeAffinity": {REQUIRED: required}})]
    node_affinity = affinity.get("nodeAffinity")
    if not isinstance(node_affinity, dict):
        return [PatchOp(op="add", path=f"{AFFINITY}/nodeAffinity", value={REQUIRED: required})]
    selector = node_affinity.get(REQUIRED)
    base = f"{AFFINITY}/nodeAffinity/{REQUIRED}"
    if not isinstance(selector, dict):
        return [PatchOp(op="add", path=base, value=required)]
    terms = selector.get("nodeSelectorTerms")
    if not isinstance(terms, list) or not terms:
        return [PatchOp(op="add", path=f"{base}/nodeSelectorTerms", value=[term])]
    ops: list[PatchOp] = []
    for i, existing in enumerate(terms):
        expressions = existing.get("matchExpressions") if isinstance(existing, dict) else None
        path = f"{base}/nodeSelectorTerms/{i}/matchExpressions"
        if not isinstance(expressions, list):
            ops.append(PatchOp(op="add", path=path, value=[requirement]))
            continue
        held = _requirements(expressions, key)
        if any(set(values) >= allowed for _, allowed in held):
            continue  # as narrow already: admitted before, or narrowed by its author
        if held:  # a stale copy's, allowing more: narrowed where it stands
            ops.append(PatchOp(op="replace", path=f"{path}/{held[0][0]}", value=requirement))
        else:
            ops.append(PatchOp(op="add", path=f"{path}/-", value=requirement))
    return ops


def _requirements(expressions: list[Any], key: str) -> list[tuple[int, set[str]]]:
    """(index, values) of the ``key In [...]`` requirements among a term's expressions."""
    return [
        (i, {str(v) for v in e.get("values") or ()})
        for i, e in enumerate(expressions)
        if isinstance(e, dict) and e.get("key") == key and e.get("operator") == "In"
        and isinstance(e.get("values"), list)
    ]  # fmt: skip
