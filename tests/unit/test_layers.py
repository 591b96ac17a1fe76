"""The layering in STYLE.md is a checked rule: run import-linter's contracts. The structure
drawing (``python -m tests.layers``) shows the same layers: proto at the bottom, libs
runtime -> bus -> runner, every service above the libs it uses, the CLI on top."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import layers

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold() -> None:
    binary = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    result = subprocess.run(
        [binary, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


SERVICES = [
    "actuator",
    "admission",
    "agent",
    "autoscaler",
    "balloon",
    "bandwidth",
    "bridge",
    "callout",
    "gang",
    "health",
    "reporter",
    "simcluster",
]


@pytest.fixture(scope="module")
def imports() -> dict[str, set[str]]:
    return layers.arrows()


def test_every_lib_and_service_is_a_box_tied_across_the_three_roots(
    imports: dict[str, set[str]],
) -> None:
    assert set(imports) == {
        "baton.proto",
        *(f"baton.libs.{lib}" for lib in ["bus", "kube", "runner", "runtime", "view"]),
        *(f"baton.services.{s}" for s in [*SERVICES, "cli"]),
    }
    # the arrows a tool that reads one top-level folder at a time misses
    assert "baton.libs.runner" in imports["baton.services.gang"]
    assert "baton.proto" in imports["baton.libs.bus"]
    assert all(imports[box] for box in imports if box != "baton.proto"), "a box is apart"


def test_the_floors_are_the_layers(imports: dict[str, set[str]]) -> None:
    floor = layers.floors(imports)
    assert floor["baton.proto"] == 1
    assert floor["baton.libs.runtime"] < floor["baton.libs.bus"] < floor["baton.libs.runner"]
    for service in SERVICES:
        box = f"baton.services.{service}"
        assert all(floor[box] > floor[lib] for lib in imports[box]), box
        assert not {b for b in imports[box] if b.startswith("baton.services.")}, box
    assert floor["baton.services.cli"] == max(floor.values())


def test_a_loop_between_boxes_is_named() -> None:
    with pytest.raises(ValueError, match="in a loop: a, b"):
        layers.floors({"a": {"b"}, "b": {"a"}, "c": set()})


def test_the_command_prints_the_floors_and_the_drawing() -> None:
    for argv, expected in (([], "floor 1\n  baton.proto  ->  nothing"), (["--dot"], "digraph")):
        shown = subprocess.run(
            [sys.executable, "-m", "tests.layers", *argv],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert expected in shown.stdout
    drawing = layers.dot({"a": {"b"}, "b": set()})
    assert '"a" -> "b";' in drawing and '{ rank=same; "b"; }' in drawing
