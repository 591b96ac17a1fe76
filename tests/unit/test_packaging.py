"""One tree (docs/packaging.md): Baton installs one top-level package, ``baton``, and
each module's file is where its import name says, with no links and no second name."""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
ROOTS = ("libs", "proto", "services")


def test_the_distribution_installs_only_the_baton_package() -> None:
    dist = importlib.metadata.distribution("baton")
    assert (dist.read_text("top_level.txt") or "").split() == ["baton"]
    (script,) = [e for e in dist.entry_points if e.name == "baton"]
    assert script.value.startswith("baton.")
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert found["packages"]["find"]["where"] == list(ROOTS)


def test_the_tree_holds_no_links() -> None:
    listed = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True,
                            text=True, check=True, timeout=30).stdout  # fmt: skip
    links = [line.split("\t")[1] for line in listed.splitlines() if line.startswith("120000")]
    assert links == [], f"symbolic links in the tree: {links}"


def test_every_module_is_where_its_import_name_says() -> None:
    """Each root folder holds only ``baton/<root>/``, and importing a module by the name its
    path gives loads that very file."""
    checked = 0
    for root in ROOTS:
        entries = sorted(p.name for p in (ROOT / root).iterdir() if p.name != "__pycache__")
        assert entries == ["baton"], f"{root}/ holds {entries}, not only baton/"
        assert not (ROOT / root / "baton" / "__init__.py").exists(), "baton is a namespace"
        for path in sorted((ROOT / root).rglob("*.py")):
            if path.name != "__init__.py" or "data" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT / root).parent.parts)
            module = importlib.import_module(name)
            assert Path(module.__file__ or "").resolve() == path, name
            checked += 1
    assert checked > 20, f"only {checked} packages found under {ROOTS}"


def test_the_folders_are_not_a_second_import_name() -> None:
    """From the repository root, ``import libs.view`` (the old second name) fails."""
    for name in ("libs.view.cluster", "proto.k8s", "services.gang.core"):
        result = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=ROOT,
                                capture_output=True, text=True, timeout=60,
                                check=False)  # fmt: skip
        assert result.returncode != 0 and "ModuleNotFoundError" in result.stderr, name


def test_no_code_imports_the_old_top_level_names() -> None:
    """`import proto` would find proto-plus (or nothing) once installed."""
    found = []
    for folder in (*ROOTS, "tests"):
        for path in (ROOT / folder).rglob("*.py"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                words = line.split()
                if words[:1] in (["import"], ["from"]) and len(words) > 1:
                    top = words[1].split(".")[0]
                    if top in ROOTS:
                        found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == [], "\n".join(found)


def test_every_pure_module_is_type_checked_strictly() -> None:
    """The pure-cores contract (.importlinter) is the one list of pure modules; mypy's strict
    set (pyproject.toml) must hold each of them (it may hold more: typed shells)."""
    import configparser
    import fnmatch

    contracts = configparser.ConfigParser()
    contracts.read(ROOT / ".importlinter")
    pure = contracts["importlinter:contract:pure-cores"]["source_modules"].split()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    strict = [p for o in config["overrides"] if o.get("strict") for p in o["module"]]
    loose = [m for m in pure if not any(fnmatch.fnmatch(m, p) or p == f"{m}.*" for p in strict)]
    assert loose == [], f"pure but not strictly typed: {loose}"
