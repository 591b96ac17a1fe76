"""Register admission's webhook with a simulated API server, as a cluster admin would with
deploy/base/admission.yaml: once the webhook serves, create (or update) both
configurations, their ``caBundle`` being the webhook's self-signed certificate.

``baton up`` does it for its own simcluster; ``baton install-webhook`` does it for
services run by hand or with Docker Compose (compose.yaml). ``baton up`` also creates
the namespace of Baton's own pods (deploy/base/namespace.yaml), where the health
service runs its preflight checks (``ensure_namespace``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import sys
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from baton.libs.kube import api_client
from baton.proto import keys
from baton.services.admission.registration import GROUP, VERSION, configurations


async def install_webhook(
    *, kubeconfig: Path, url: str, cert: Path, ready: Callable[[], Awaitable[bool]]
) -> str:
    """Wait for the webhook's certificate and ``ready``, then register both webhooks.

    Until then the simulated API server admits pods without the webhook, like a
    cluster before Baton is installed.
    """
    while not (cert.exists() and await ready()):  # noqa: ASYNC110, ASYNC240 - another process's
        await asyncio.sleep(0.2)
    api = await api_client(str(kubeconfig))
    try:
        custom = client.CustomObjectsApi(api)
        ca = cert.read_bytes()  # noqa: ASYNC240 - a small local file, once
        for plural, body in configurations(url, ca_pem=ca):
            try:
                await custom.create_cluster_custom_object(GROUP, VERSION, plural, body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                name = body["metadata"]["name"]  # registered before: point it here now
                old = await custom.get_cluster_custom_object(GROUP, VERSION, plural, name)
                body["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
                await custom.replace_cluster_custom_object(GROUP, VERSION, plural, name, body)
    finally:
        await api.close()
    return url


async def answers(url: str, cert: Path) -> bool:
    """The webhook accepts a TLS connection that trusts ``cert``."""
    parts = urllib.parse.urlsplit(url)
    try:
        context = ssl.create_default_context(cafile=str(cert))
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(parts.hostname, parts.port or 443, ssl=context), timeout=2
        )
    except (OSError, ssl.SSLError, TimeoutError):
        return False
    writer.close()
    return True


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="baton install-webhook", description=__doc__)
    p.add_argument(
        "--url", required=True, help="the webhook's base URL, e.g. https://admission:8443"
    )
    p.add_argument("--ca", type=Path, required=True, help="its certificate (self-signed: its CA)")
    p.add_argument("--kubeconfig", type=Path, default=os.environ.get("KUBECONFIG"))
    p.add_argument("--wait", type=float, default=300.0, help="seconds to wait for the webhook")
    args = p.parse_args(argv)
    if args.kubeconfig is None:
        p.error("--kubeconfig (or KUBECONFIG): the simulated cluster to register with")
    return args


def run(argv: list[str]) -> int:
    args = parse_args(argv)

    async def install() -> str:
        async def ready() -> bool:
            return await answers(args.url, args.ca)

        return await asyncio.wait_for(
            install_webhook(kubeconfig=args.kubeconfig, url=args.url, cert=args.ca, ready=ready),
            timeout=args.wait,
        )

    try:
        print(f"baton install-webhook: registered {asyncio.run(install())}")
    except TimeoutError:
        print(f"baton install-webhook: {args.url} did not answer within {args.wait:.0f}s "
              f"(with {args.ca})", file=sys.stderr)  # fmt: skip
        return 1
    return 0


PREFLIGHT_NAMESPACE = "baton-system"
# deploy/base/namespace.yaml's namespaces: baton up's simcluster has them, as a cluster
# Baton was installed in does, so deploy/'s manifests dry-run there (docs/deploy.md)
BATON_NAMESPACES = ("baton-system", "baton-agent", "baton-preflight")


async def ensure_namespace(kubeconfig: Path, name: str) -> None:
    """Baton's own namespace, labelled as deploy/base/namespace.yaml labels it: its pods
    (health's preflight checks, bound by nodeName) never go through Baton's webhook."""
    api = await api_client(str(kubeconfig))
    labels = {keys.WEBHOOK: keys.SKIP}
    try:
        core = client.CoreV1Api(api)
        body = client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels))
        try:
            await core.create_namespace(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            await core.patch_namespace(name, {"metadata": {"labels": labels}})  # already there
    finally:
        await api.close()
