"""``baton up`` installs admission's webhook into its own simcluster, as a cluster
admin would with deploy/base/admission.yaml: once the webhook serves, register it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from kubernetes_asyncio import client

from libs.kube import api_client
from services.admission.registration import GROUP, VERSION, configurations


async def install_webhook(
    *, kubeconfig: Path, port: int, tls_dir: Path, ready: Callable[[], Awaitable[bool]]
) -> str:
    """Wait for admission's self-signed cert and readiness, then register both webhooks.

    Until then the simulated API server admits pods without the webhook, like a
    cluster before Baton is installed.
    """
    cert = tls_dir / "tls.crt"
    while not (cert.exists() and await ready()):  # noqa: ASYNC110 - polling another process
        await asyncio.sleep(0.2)
    api = await api_client(str(kubeconfig))
    try:
        custom = client.CustomObjectsApi(api)
        for plural, body in configurations(f"https://127.0.0.1:{port}", ca_pem=cert.read_bytes()):
            await custom.create_cluster_custom_object(GROUP, VERSION, plural, body)
    finally:
        await api.close()
    return f"https://127.0.0.1:{port}"
