"""load_settings: env and file into one frozen struct; every error names the bad key."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import pytest

from baton.libs.runtime import SettingsError, load_settings
from baton.libs.runtime.settings import policy_from

pytestmark = pytest.mark.unit


class GangSettings(msgspec.Struct, frozen=True, kw_only=True):
    nats_url: str = "nats://127.0.0.1:4222"
    cluster: str = "c1"
    dry_run: bool = False
    max_gangs: int = 10
    racks: tuple[str, ...] = ()
    weights: dict[str, float] = {}
    token: str


def load(env: dict[str, str], file: Path | None = None) -> GangSettings:
    return load_settings(GangSettings, prefix="BATON_GANG_", file=file, env=env)


def test_env_values_are_converted_and_common_keys_shared() -> None:
    settings = load(
        {
            "BATON_GANG_TOKEN": "t",
            "BATON_GANG_MAX_GANGS": "32",
            "BATON_DRY_RUN": "true",
            "BATON_CLUSTER": "c9",
            "BATON_GANG_RACKS": "r1, r2",
            "BATON_GANG_WEIGHTS": '{"team-a": 2}',
            "BATON_OTHER_THING": "ignored: another service's setting",
        }
    )
    assert settings == GangSettings(
        token="t", max_gangs=32, dry_run=True, cluster="c9", racks=("r1", "r2"),
        weights={"team-a": 2.0},
    )  # fmt: skip


def test_the_service_prefix_wins_over_the_common_one() -> None:
    settings = load({"BATON_GANG_TOKEN": "t", "BATON_CLUSTER": "c9", "BATON_GANG_CLUSTER": "c2"})
    assert settings.cluster == "c2"


def test_a_bad_value_names_the_key_and_the_value() -> None:
    with pytest.raises(SettingsError) as err:
        load({"BATON_GANG_TOKEN": "t", "BATON_GANG_MAX_GANGS": "abc"})
    assert str(err.value) == "BATON_GANG_MAX_GANGS: expected int, got 'abc'"


def test_an_unknown_key_is_refused_by_name() -> None:
    with pytest.raises(SettingsError, match=r"^BATON_GANG_MAX_GNAGS: unknown setting"):
        load({"BATON_GANG_TOKEN": "t", "BATON_GANG_MAX_GNAGS": "3"})


def test_a_missing_required_setting_is_named() -> None:
    with pytest.raises(SettingsError, match=r"^BATON_GANG_TOKEN: required, not set$"):
        load({})


def test_file_gives_defaults_and_env_overrides(tmp_path: Path) -> None:
    file = tmp_path / "gang.yaml"
    file.write_text("token: from-file\nmax_gangs: 5\nracks: [a, b]\n")
    settings = load({"BATON_GANG_MAX_GANGS": "6"}, file)
    assert (settings.token, settings.max_gangs, settings.racks) == ("from-file", 6, ("a", "b"))


def test_file_errors_name_the_file_and_key(tmp_path: Path) -> None:
    file = tmp_path / "gang.json"
    file.write_text('{"token": "t", "max_gangz": 5}')
    with pytest.raises(SettingsError, match=r"gang.json: max_gangz: unknown setting"):
        load({}, file)
    file.write_text('{"token": "t", "max_gangs": "lots"}')
    with pytest.raises(SettingsError, match=r"gang.json: max_gangs: expected int, got 'lots'"):
        load({}, file)
    with pytest.raises(SettingsError, match=r"cannot read settings file"):
        load({}, tmp_path / "missing.yaml")


def test_the_result_is_the_frozen_struct() -> None:
    settings = load({"BATON_GANG_TOKEN": "t"})
    with pytest.raises(AttributeError):
        settings.token = "x"  # type: ignore[misc]


class Knobs(msgspec.Struct, frozen=True, kw_only=True):
    max_gangs: int = 1
    racks: tuple[str, ...] = ("r0",)
    share: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.5
    rate_bps: int = 0


def test_a_policy_takes_the_settings_of_its_field_names() -> None:
    settings = load({"BATON_GANG_TOKEN": "t", "BATON_GANG_MAX_GANGS": "7",
                     "BATON_GANG_RACKS": "a,b"})  # fmt: skip
    assert policy_from(settings, Knobs) == Knobs(max_gangs=7, racks=("a", "b"))
    assert policy_from(settings, Knobs, share=0.25, rate_bps=10) == Knobs(
        max_gangs=7, racks=("a", "b"), share=0.25, rate_bps=10
    )


def test_a_policy_value_out_of_range_names_its_field() -> None:
    settings = load({"BATON_GANG_TOKEN": "t"})
    with pytest.raises(ValueError, match=r"^share: Expected float <= 1"):
        policy_from(settings, Knobs, share=2.0)

    class Bad(ValueError):
        pass

    with pytest.raises(Bad, match=r"^share:"):
        policy_from(settings, Knobs, share=-1.0, error=Bad)
