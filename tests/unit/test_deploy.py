"""The manifests keep the API-load principle: one reader, one writer."""

from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

BASE = Path(__file__).resolve().parents[2] / "deploy" / "base"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


def documents() -> list[dict[str, Any]]:
    return [d for f in sorted(BASE.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


def roles() -> dict[str, list[dict[str, Any]]]:
    return {d["metadata"]["name"]: d["rules"] for d in documents() if d["kind"] == "ClusterRole"}


def test_kustomization_lists_every_manifest() -> None:
    listed = set(yaml.safe_load((BASE / "kustomization.yaml").read_text())["resources"])
    present = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


def test_only_the_bridge_watches() -> None:
    watchers = {
        name for name, rules in roles().items() if any("watch" in r["verbs"] for r in rules)
    }
    assert watchers == {"baton-bridge"}


def test_only_the_actuator_writes() -> None:
    writers = {
        name for name, rules in roles().items() if any(WRITE_VERBS & set(r["verbs"]) for r in rules)
    }
    assert writers == {"baton-actuator"}


def test_single_watcher_and_writer_run_one_replica() -> None:
    deployments = {d["metadata"]["name"]: d for d in documents() if d["kind"] == "Deployment"}
    for name in ("baton-bridge", "baton-actuator"):
        assert deployments[name]["spec"]["replicas"] == 1
        assert deployments[name]["spec"]["strategy"]["type"] == "Recreate"


def test_compose_runs_real_commands_with_flags_they_accept() -> None:
    from services.cli.main import COMMANDS
    from services.simcluster.main import parse_args

    compose = yaml.safe_load((BASE.parents[1] / "compose.yaml").read_text())
    commands = {
        name: service["command"]
        for name, service in compose["services"].items()
        if service.get("build") or service.get("image", "").startswith("baton")
    }
    assert set(commands) == {"sim", "bridge", "actuator", "gang", "admission"}
    for argv in commands.values():
        assert argv[0] in COMMANDS, argv
    parse_args(commands["sim"][1:])  # exits (SystemExit) on a flag baton sim does not take
