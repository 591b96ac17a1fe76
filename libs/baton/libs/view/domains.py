"""Topology domains: where a node sits at each level of the topology.

Levels are node label keys from broad to narrow (``keys.DEFAULT_LEVELS``: zone ->
block -> rack, as Kueue's Topology lists them). A node's domain at level ``i`` is a
*path* joining its label values of levels ``0..i`` (``/z1/b3/r7``), so racks named
alike in different blocks stay distinct. A node without the label of a level has no
domain there (None).
"""

from __future__ import annotations

Paths = tuple[str | None, ...]


def domain_paths(labels: dict[str, str], levels: tuple[str, ...]) -> Paths:
    """The node's domain path per level (None where its label is missing)."""
    paths: list[str | None] = []
    prefix = ""
    for key in levels:
        value = labels.get(key)
        prefix = f"{prefix}/{value or ''}"
        paths.append(prefix if value is not None else None)
    return tuple(paths)


def domain_value(path: str) -> str:
    """The last label value of a path: ``/z1/b3/r7`` -> ``r7``."""
    return path.rsplit("/", 1)[-1]


def narrowest(paths: Paths, node: str) -> str:
    """The node's narrowest-level domain; a node without one is a domain of its own."""
    return paths[-1] if paths and paths[-1] is not None else f"node:{node}"
