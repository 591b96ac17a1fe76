"""The wheel alone runs Baton (docs/packaging.md): built from the checkout with
``pip wheel``, unpacked, and imported from there, not from the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_holds_the_package_tree_and_runs_from_it(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(tmp_path)],
        capture_output=True, text=True, timeout=240, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = tmp_path.glob("baton-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        archive.extractall(tmp_path / "site")
    tops = {name.split("/")[0] for name in names if not name.startswith("baton-")}
    assert tops == {"baton"}, tops
    assert "baton/services/gang/core/__init__.py" in names
    assert any(n.startswith("baton/proto/schemas/") and n.endswith(".json") for n in names)
    assert "baton/services/simcluster/data/philly-sample.csv" in names
    probe = (
        "import baton.services.gang.core as g, baton.proto.schema as s;"
        "print(g.__file__); print(len(list(s.SCHEMAS.glob('*.json'))))"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60, check=False, cwd=tmp_path, env=env)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    where, schemas = ran.stdout.split()
    assert where.startswith(str(tmp_path / "site")), where
    assert int(schemas) > 10, schemas
    helped = subprocess.run([sys.executable, "-m", "baton.services.cli", "--help"],
                            capture_output=True, text=True, timeout=60, check=False,
                            cwd=tmp_path, env=env)  # fmt: skip
    assert helped.returncode == 0 and "up" in helped.stdout, helped.stdout + helped.stderr
