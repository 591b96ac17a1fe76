"""JSON Schemas for every event type, generated into ``proto/baton/proto/schemas/<type>.json``.

Every tagged Struct in a ``proto`` module (tag ``<name>.v<N>``) is an event type;
new modules are picked up without registering them here. Refresh the files with

    python -m baton.proto.schema

and check them (CI, and a unit test) with ``python -m baton.proto.schema --check``.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import re
import sys
from pathlib import Path
from typing import Any

import msgspec

SCHEMAS = Path(__file__).resolve().parent / "schemas"
REFRESH = "python -m baton.proto.schema"
_EVENT_TAG = re.compile(r"^[a-z0-9][a-z0-9.-]*\.v[0-9]+$")
_DRAFT = "https://json-schema.org/draft/2020-12/schema"


def event_types() -> dict[str, type[msgspec.Struct]]:
    """Tag -> Struct for every event type in every proto module; a tag used twice is an error."""
    from baton import proto

    found: dict[str, type[msgspec.Struct]] = {}
    for info in sorted(pkgutil.iter_modules(proto.__path__), key=lambda i: i.name):
        if info.name == "schema":
            continue
        module = importlib.import_module(f"baton.proto.{info.name}")
        for obj in vars(module).values():
            tag = _tag_of(obj)
            if tag is None or obj.__module__ != module.__name__:
                continue
            if tag in found and found[tag] is not obj:
                other = found[tag]
                raise ValueError(
                    f"event type tag {tag!r} is used by both "
                    f"{other.__module__}.{other.__name__} and {module.__name__}.{obj.__name__}"
                )
            found[tag] = obj
    return dict(sorted(found.items()))


def _tag_of(obj: Any) -> str | None:
    if not (isinstance(obj, type) and issubclass(obj, msgspec.Struct)):
        return None
    tag = obj.__struct_config__.tag
    return tag if isinstance(tag, str) and _EVENT_TAG.match(tag) else None


def render(type_: type[msgspec.Struct], tag: str) -> str:
    schema = {"$schema": _DRAFT, "title": tag, **msgspec.json.schema(type_)}
    return json.dumps(_cleaned(schema), indent=2, sort_keys=True) + "\n"


def _cleaned(node: Any) -> Any:
    """Every ``description`` as ``inspect.cleandoc`` gives it: msgspec 0.23 dedents
    docstrings and 0.22 did not, and the files must not depend on which is installed."""
    if isinstance(node, dict):
        return {k: inspect.cleandoc(v) if k == "description" and isinstance(v, str)
                else _cleaned(v) for k, v in node.items()}  # fmt: skip
    if isinstance(node, list):
        return [_cleaned(v) for v in node]
    return node


def generate() -> dict[str, str]:
    """File name -> content, for every event type."""
    return {f"{tag}.json": render(type_, tag) for tag, type_ in event_types().items()}


def stale(folder: Path = SCHEMAS) -> list[str]:
    """Names of schema files that are missing, different, or left over."""
    wanted = generate()
    present = {p.name: p.read_text() for p in folder.glob("*.json")} if folder.exists() else {}
    names = sorted(set(wanted) | set(present))
    return [n for n in names if wanted.get(n) != present.get(n)]


def write(folder: Path = SCHEMAS) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    wanted = generate()
    for old in folder.glob("*.json"):
        if old.name not in wanted:
            old.unlink()
    for name, text in wanted.items():
        (folder / name).write_text(text)
    return sorted(wanted)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--check" in args:
        bad = stale()
        if bad:
            print(f"stale JSON Schemas: {', '.join(bad)}; refresh with: {REFRESH}")
            return 1
        print(f"{len(generate())} JSON Schemas up to date")
        return 0
    names = write()
    print(f"wrote {len(names)} JSON Schemas to {SCHEMAS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
