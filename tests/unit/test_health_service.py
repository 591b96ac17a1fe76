"""The health service's settings and its heartbeat bookkeeping (no I/O)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import yaml

from baton.libs.runtime import SettingsError, load_settings
from baton.libs.runtime.nkey import SEED_SETTING
from baton.proto.health import HealthPolicy, Heard, Silence
from baton.services.cli.main import COMMANDS
from baton.services.health.heartbeats import Beats, outgoing
from baton.services.health.main import PREFIX, SPEC, Settings
from tests.support.nats import seed_file

pytestmark = pytest.mark.unit


def test_every_policy_field_is_a_setting_with_the_same_default() -> None:
    settings = {f.name: f.default for f in msgspec.structs.fields(Settings)}
    for f in msgspec.structs.fields(HealthPolicy):
        assert f.name in settings, f"Settings lacks {f.name}"
        assert settings[f.name] == f.default, f.name
    assert SPEC.policy_of(Settings()) == HealthPolicy()


@pytest.mark.parametrize(
    ("key", "value"),
    [("CAP_RACK", "1.5"), ("MAX_TESTING", "0"), ("FLAP_COUNT", "1"), ("DRAIN_TIMEOUT_S", "1"),
     ("AFTER_S", '{"Ready": -1}')],
)  # fmt: skip
def test_a_bad_setting_names_its_key(key: str, value: str) -> None:
    with pytest.raises(SettingsError, match=key):
        load_settings(Settings, PREFIX, env={f"{PREFIX}{key}": value})


def test_settings_from_the_environment() -> None:
    env = {f"{PREFIX}AFTER_S": '{"Ready": 30}', f"{PREFIX}PREFLIGHT_COMMAND": "dcgmi,diag,-r,3"}
    settings = load_settings(Settings, PREFIX, env=env)
    policy = SPEC.policy_of(settings)
    assert isinstance(policy, HealthPolicy)
    assert policy.after_s == {"Ready": 30.0}
    assert policy.preflight_command == ("dcgmi", "diag", "-r", "3")


def test_the_spec_reads_what_the_issue_names() -> None:
    patterns = [i.pattern for i in SPEC.inputs]
    assert patterns[:5] == ["k8s.node.>", "k8s.pod.>", "telemetry.gpu.>", "telemetry.node.>",
                            "telemetry.xid.>"]  # fmt: skip
    assert "health.control" in patterns and "telemetry.heartbeat.>" not in patterns
    assert "k8s.resourceslice.>" in patterns  # DRA drivers' devices, against the reports


def test_a_node_goes_silent_once_and_is_heard_when_it_beats_again() -> None:
    beats = Beats(after_s=60.0)
    beats.beat("a", 100.0)
    beats.beat("b", 150.0)
    assert outgoing("c1", beats, 160.0) == []
    (silent,) = outgoing("c1", beats, 161.0)
    assert silent.subject == "baton.c1.health.silence.a"
    assert silent.event == Silence(node="a", at=161.0, last_beat=100.0, after_s=60.0)
    assert outgoing("c1", beats, 170.0) == []  # once
    beats.beat("a", 90.0)  # an older beat (redelivered) changes nothing
    assert outgoing("c1", beats, 171.0) == []
    beats.beat("a", 172.0)
    (heard,) = outgoing("c1", beats, 173.0)
    assert heard.subject == "baton.c1.health.heard.a"
    assert heard.event == Heard(node="a", at=173.0, last_beat=172.0)


def test_silence_is_counted_in_the_keep_alives_each_agent_announces() -> None:
    beats = Beats(after_s=30.0, beats=3.0)
    beats.beat("quiet", 100.0, every_s=60.0)  # a keep-alive a minute: silent after 180 s
    beats.beat("old", 100.0)  # an agent that says no period: silence_after_s
    (old,) = outgoing("c1", beats, 131.0)
    assert old.event == Silence(node="old", at=131.0, last_beat=100.0, after_s=30.0)
    assert outgoing("c1", beats, 280.0) == []  # idle but alive: two keep-alives missed at most
    (quiet,) = outgoing("c1", beats, 281.0)
    assert quiet.event == Silence(node="quiet", at=281.0, last_beat=100.0, after_s=180.0)


def test_the_manifest_runs_baton_health_with_settings_it_accepts(tmp_path: Path) -> None:
    base = Path(__file__).resolve().parents[2] / "deploy" / "base"
    docs = yaml.safe_load_all((base / "health.yaml").read_text())
    doc = next(d for d in docs if d and d["kind"] == "Deployment")
    pod = doc["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["health"] and "health" in COMMANDS
    assert pod["serviceAccountName"] == "baton-service"  # no API rights: the actuator writes
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env[SEED_SETTING] = seed_file(tmp_path)  # mounted from a Secret in the cluster
    settings = load_settings(Settings, PREFIX, env=env)  # raises naming a bad key
    assert settings.preflight_namespace == "baton-preflight"  # where baseline admits DCGM
