"""An ApiClient for the cluster Baton runs against: a kubeconfig, else in-cluster."""

from __future__ import annotations

import os

from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration


async def api_client(kubeconfig: str = "", *, pool: int = 64) -> ApiClient:
    """From ``kubeconfig``, else ``$KUBECONFIG``, else the pod's service account."""
    configuration = Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG", "")
    if path:
        await kube_config.load_kube_config(config_file=path, client_configuration=configuration)
    else:
        kube_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = pool
    return ApiClient(configuration)
