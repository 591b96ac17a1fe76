"""Baton's structure as its imports make it: one box per lib, per service and for proto,
an arrow for each box that imports another, stacked in floors (a box stands above every
box it imports; floor 1 imports no other).

    python -m tests.layers          # the floors, as text
    python -m tests.layers --dot    # a Graphviz drawing: ... --dot | dot -Tsvg > layers.svg

It reads the code with grimp, import-linter's graph, told the three namespace roots
(``baton.libs``, ``baton.proto``, ``baton.services``), so the arrows between the roots
are drawn: a tool that resolves imports only within one top-level folder misses them
(docs/packaging.md). ``tests/unit/test_layers.py`` holds the floors to the layering
the import-linter contracts check.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

import grimp

ROOTS = ("baton.libs", "baton.proto", "baton.services")


def arrows() -> dict[str, set[str]]:
    """Each box (``baton.proto``, each package under ``baton.libs`` and
    ``baton.services``) -> the boxes it imports."""
    graph = grimp.build_graph(*ROOTS)
    packages = graph.find_children("baton.libs") | graph.find_children("baton.services")
    boxes = sorted({"baton.proto", *packages})
    return {
        box: {
            other
            for other in boxes
            if other != box
            and graph.direct_import_exists(importer=box, imported=other, as_packages=True)
        }
        for box in boxes
    }


def floors(imports: Mapping[str, set[str]]) -> dict[str, int]:
    """Each box's floor: 1 + the highest floor it imports. A loop between boxes has no
    floors: ``ValueError`` naming the boxes on it."""
    floor: dict[str, int] = {}
    left = dict(imports)
    while left:
        ready = {box for box, below in left.items() if below <= floor.keys()}
        if not ready:
            raise ValueError(f"boxes import each other in a loop: {', '.join(sorted(left))}")
        for box in ready:
            floor[box] = 1 + max((floor[b] for b in left[box]), default=0)
            del left[box]
    return floor


def text(imports: Mapping[str, set[str]]) -> str:
    floor = floors(imports)
    lines = []
    for level in range(max(floor.values()), 0, -1):
        lines.append(f"floor {level}")
        for box in sorted(b for b, f in floor.items() if f == level):
            below = ", ".join(sorted(imports[box])) or "nothing"
            lines.append(f"  {box}  ->  {below}")
    return "\n".join(lines)


def dot(imports: Mapping[str, set[str]]) -> str:
    floor = floors(imports)
    lines = ["digraph baton {", "  rankdir=BT; node [shape=box, fontname=helvetica];"]
    for level in sorted(set(floor.values())):
        same = " ".join(f'"{b}";' for b in sorted(b for b, f in floor.items() if f == level))
        lines.append(f"  {{ rank=same; {same} }}")
    for box in sorted(imports):
        lines += [f'  "{box}" -> "{other}";' for other in sorted(imports[box])]
    return "\n".join([*lines, "}"])


def main(argv: list[str]) -> int:
    if argv not in ([], ["--dot"]):
        print("usage: python -m tests.layers [--dot]", file=sys.stderr)
        return 2
    imports = arrows()
    print(dot(imports) if argv else text(imports))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
