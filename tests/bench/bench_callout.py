"""Time to let one agent in through the NATS auth callout, next to an nkey user's
connect on the same server in the same run (the raw baseline).

One connect = ``nats.connect`` + a flush (the server has answered CONNECT and PING)
+ close, sequential. With a token: the server's request to ``baton callout``, its
TokenReview against simcluster over HTTP, the signed answer. The callout runs in this
process (its own event loop task), simcluster too.
``python -m tests.bench callout`` (``BATON_BENCH_CALLOUT_N`` sets the connects).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import nats
from kubernetes_asyncio.client import CoreV1Api

from baton.libs.runner import access
from baton.libs.runtime.nkey import account_pair, new_account_seed
from baton.services.callout import main as callout
from baton.services.cli.natsconfig import seed_path, specs, write_credentials
from tests.support.nats import running_nats
from tests.support.sim import running_sim

N = int(os.environ.get("BATON_BENCH_CALLOUT_N", "200"))
NS, SA, C = "baton-agent", "baton-agent", "bench"


async def connects(url: str, n: int, **options: Any) -> list[float]:
    took = []
    for _ in range(n):
        started = time.perf_counter()
        nc = await nats.connect(url, allow_reconnect=False, **options)
        await nc.flush()
        took.append(time.perf_counter() - started)
        await nc.close()
    return took


def row(what: str, took: list[float]) -> str:
    ms = sorted(t * 1000 for t in took)
    p95 = ms[int(0.95 * (len(ms) - 1))]
    return f"| {what} | {len(ms)} | {statistics.median(ms):.2f} | {p95:.2f} | {ms[-1]:.2f} |"


async def run() -> None:
    with tempfile.TemporaryDirectory(prefix="baton-bench-callout-") as scratch:
        folder = Path(scratch)
        found = access.users(specs(), C, callout=True)
        write_credentials(folder / "creds", found)
        issuer = new_account_seed()
        (folder / "issuer").write_text(issuer)
        key = account_pair(issuer).public_key.decode()
        config = access.server_config(found, host="127.0.0.1", store_dir=None,
                                      callout_issuer=key)  # fmt: skip
        (folder / "nats.conf").write_text(json.dumps(config))
        async with running_sim() as sim, running_nats(config=folder / "nats.conf") as url:
            client = await sim.api_client()
            core = CoreV1Api(client)
            await core.create_namespace({"metadata": {"name": NS}})
            await core.create_node({"metadata": {"name": "gpu-0"}})
            pod = {"metadata": {"name": "agent-0", "namespace": NS},
                   "spec": {"nodeName": "gpu-0", "serviceAccountName": SA,
                            "containers": [{"name": "agent", "image": "baton"}]}}  # fmt: skip
            await core.create_namespaced_pod(NS, pod)
            bound = {"kind": "Pod", "apiVersion": "v1", "name": "agent-0"}
            body = {"spec": {"audiences": ["nats"], "expirationSeconds": 3600,
                             "boundObjectRef": bound}}  # fmt: skip
            token = (await core.create_namespaced_service_account_token(SA, NS, body)).status.token
            settings = callout.Settings(
                nats_url=url, cluster=C, ops_port=0, issuer_seed_file=str(folder / "issuer"),
                nats_nkey_seed_file=str(seed_path(folder / "creds", access.CALLOUT)),
                kubeconfig=sim.kubeconfig, namespace=NS, service_account=SA,
            )  # fmt: skip
            ready = asyncio.Event()
            task = asyncio.create_task(callout.serve(settings, ready=ready))
            await asyncio.wait_for(ready.wait(), 10)
            seed = str(seed_path(folder / "creds", "bandwidth"))
            measured: list[tuple[str, dict[str, Any]]] = [
                ("nkey user (raw baseline)", {"nkeys_seed": seed}),
                ("agent token via the callout", {"token": token}),
            ]
            print("| connect | n | median ms | p95 ms | max ms |\n|---|---|---|---|---|")
            for what, options in measured:
                await connects(url, 10, **options)  # warm up
                print(row(what, await connects(url, N, **options)))
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()


def main() -> None:
    asyncio.run(run())


if __name__ == "__main__":
    main()
