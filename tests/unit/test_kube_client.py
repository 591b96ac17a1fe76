"""``api_client``: no per-request proxy and netrc lookups unless a proxy is set."""

from __future__ import annotations

from pathlib import Path

import pytest

from baton.libs.kube.client import PROXY_ENV, api_client

pytestmark = pytest.mark.unit

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.mark.parametrize("proxy", [None, "http://proxy:3128"])
async def test_the_environment_is_trusted_only_when_it_names_a_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proxy: str | None
) -> None:
    for name in PROXY_ENV:
        monkeypatch.delenv(name, raising=False)
    if proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy)
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    client = await api_client(str(path))
    try:
        assert client.rest_client.pool_manager.trust_env is bool(proxy)
    finally:
        await client.close()
