"""The bandwidth Deployment: no API access, a command and settings the service accepts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from baton.libs.runtime import SettingsError
from baton.libs.runtime.nkey import SEED_SETTING
from baton.libs.runtime.teams import load_teams
from baton.proto.teams import DEFAULT, TeamConfigError
from baton.services.bandwidth.main import load
from baton.services.cli.main import COMMANDS
from tests.support.nats import seed_file

pytestmark = pytest.mark.unit

BASE = Path(__file__).resolve().parents[2] / "deploy" / "base"


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((BASE / name).read_text()) if d]


def test_the_service_has_no_api_access_and_accepts_its_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment = next(d for d in documents("bandwidth.yaml") if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False  # no API access: NATS only
    (container,) = pod["containers"]
    assert container["args"][0] in COMMANDS
    teams = next(d for d in documents("config.yaml") if d["metadata"]["name"] == "baton-teams")
    (tmp_path / "teams.yaml").write_text(teams["data"]["teams.yaml"])
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert env.pop("BATON_BANDWIDTH_TEAMS_FILE") == "/etc/baton/teams.yaml"
    env[SEED_SETTING] = seed_file(tmp_path)  # mounted from a Secret in the cluster
    for key, value in {**env, "BATON_BANDWIDTH_TEAMS_FILE": str(tmp_path / "teams.yaml")}.items():
        monkeypatch.setenv(key, value)
    settings = load(None)  # raises naming the key if one is wrong
    assert settings.policy().capacity_bps == 10**10


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [("SATURATED", "2", "saturated: Expected float <= 1"),
     ("FLOOR", "1.5x", "is not a bandwidth quantity"),
     ("TIERS", '[{"name": "a"}, {"name": "a"}]', "tiers[1].name: 'a' is already a tier"),
     ("LIMITS_PER_ROUND", "-1", "limits_per_round: Expected int >= 0")],
)  # fmt: skip
def test_a_bad_setting_of_the_policy_names_its_key(
    key: str, value: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(f"BATON_BANDWIDTH_{key}", value)
    with pytest.raises(SettingsError) as caught:
        load(None)
    assert str(caught.value).startswith(f"BATON_BANDWIDTH_{key}"), caught.value
    assert said in str(caught.value)


def test_the_team_file_is_read_and_checked_as_admission_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One reader of admission's team file: both services take and refuse the same files,
    with the same error naming the file and the key."""
    bad = tmp_path / "teams.yaml"
    bad.write_text("teams:\n  - {name: a, namespaces: [x]}\n  - {name: b, namespaces: [x]}\n")
    with pytest.raises(TeamConfigError) as admission:
        load_teams(str(bad))
    monkeypatch.setenv("BATON_BANDWIDTH_TEAMS_FILE", str(bad))
    with pytest.raises(SettingsError) as bandwidth:
        load(None)
    said = f"{bad}: teams[1].namespaces[0]: namespace 'x' is already owned by team 'a'"
    assert str(admission.value) == said
    assert str(bandwidth.value) == f"BATON_BANDWIDTH_TEAMS_FILE={said}"
    missing = tmp_path / "none.yaml"
    with pytest.raises(TeamConfigError, match=f"^{missing}: "):
        load_teams(str(missing))
    assert load_teams("") == DEFAULT
