from __future__ import annotations

import pytest

from baton.libs.runtime import SettingsError
from baton.services.bridge.main import Settings, settings_from

pytestmark = pytest.mark.unit


def test_defaults_and_common_keys() -> None:
    settings = settings_from(
        {"BATON_NATS_URL": "nats://n:4222", "BATON_CLUSTER": "prod", "KUBECONFIG": "/k"}
    )
    assert settings == Settings(nats_url="nats://n:4222", cluster="prod", kubeconfig="/k")


def test_bridge_keys_win_and_convert() -> None:
    env = {"BATON_BRIDGE_PAGE_SIZE": "1000", "BATON_BRIDGE_KUBECONFIG": "/mine", "KUBECONFIG": "/k"}
    settings = settings_from(env)
    assert settings.page_size == 1000 and settings.kubeconfig == "/mine"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"BATON_BRIDGE_PAGE_SIZE": "many"}, "BATON_BRIDGE_PAGE_SIZE"),
        ({"BATON_BRIDGE_PAGE_SIZ": "10"}, "BATON_BRIDGE_PAGE_SIZ"),
        ({"BATON_OPS_PORT": "http"}, "BATON_OPS_PORT"),
        ({"BATON_BRIDGE_TOMBSTONE_TTL": "soon"}, "BATON_BRIDGE_TOMBSTONE_TTL"),
        ({"BATON_BRIDGE_PAGE_SIZE": "0"}, "BATON_BRIDGE_PAGE_SIZE must be at least 1"),
    ],
)
def test_bad_settings_name_the_key(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        settings_from(env)
