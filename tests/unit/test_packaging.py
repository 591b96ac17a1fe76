"""Baton installs as one top-level package, ``baton``: it must install next to other
``libs``, ``services`` or ``proto`` packages (``proto`` is proto-plus's import name,
used by Google's client libraries). The repository keeps its layout: baton/libs,
baton/proto and baton/services are links to the top-level folders."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import pytest

import baton.proto.k8s

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_the_distribution_installs_only_the_baton_package() -> None:
    dist = importlib.metadata.distribution("baton")
    assert (dist.read_text("top_level.txt") or "").split() == ["baton"]
    (script,) = [e for e in dist.entry_points if e.name == "baton"]
    assert script.value.startswith("baton.")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["setuptools"]["packages"]["find"]["include"] == ["baton*"]


def test_the_package_is_the_repository_layout_by_links() -> None:
    for part in ("libs", "proto", "services"):
        link = ROOT / "baton" / part
        assert link.is_symlink() and link.resolve() == ROOT / part, part
    assert Path(baton.proto.k8s.__file__).resolve() == ROOT / "proto" / "k8s.py"


def test_no_code_imports_the_old_top_level_names() -> None:
    """`import proto` would find proto-plus (or nothing) once installed."""
    found = []
    for folder in ("libs", "proto", "services", "tests"):
        for path in (ROOT / folder).rglob("*.py"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                words = line.split()
                if words[:1] in (["import"], ["from"]) and len(words) > 1:
                    top = words[1].split(".")[0]
                    if top in ("libs", "proto", "services"):
                        found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == [], "\n".join(found)
