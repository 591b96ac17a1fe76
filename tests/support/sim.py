"""An in-process simcluster for tests and benchmarks.

``async with running_sim(nodes=16) as sim:`` serves the Kubernetes API on a free
port of 127.0.0.1 and writes a kubeconfig for it; ``sim.url``, ``sim.kubeconfig``,
``sim.store`` (the in-process Store), ``sim.cluster`` (the Simulation, when ``nodes``
asks for one) and ``await sim.api_client()`` (a kubernetes_asyncio ApiClient from that
kubeconfig; the caller closes it). Everything is stopped on exit.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient

from baton.services.simcluster.api.calls import Settings
from baton.services.simcluster.api.kubeconfig import write_kubeconfig
from baton.services.simcluster.api.server import ApiServer
from baton.services.simcluster.api.store import Store
from baton.services.simcluster.world.simapi import SimApi
from baton.services.simcluster.world.simulation import build


@dataclass
class Sim:
    url: str
    kubeconfig: str
    store: Store
    server: ApiServer
    cluster: Any = None  # services.simcluster.simulation.Simulation when started

    async def api_client(self) -> ApiClient:
        client: ApiClient = await config.new_client_from_config(
            config_file=self.kubeconfig, persist_config=False
        )
        return client

    def metric(self, name: str, **labels: str) -> float:
        """The current value of one of the API server's own metrics (0 if never set)."""
        value = self.server.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


@contextlib.asynccontextmanager
async def running_sim(
    nodes: int = 0,
    *,
    history: int = 100_000,
    bookmark_seconds: float = 1.0,
    watch_queue: int = 100_000,
    **kw: Any,
) -> AsyncIterator[Sim]:
    """Serve a simcluster on 127.0.0.1 for the duration of the block."""
    store = Store(history=history)
    server = ApiServer(store, Settings(bookmark_seconds=bookmark_seconds, watch_queue=watch_queue))
    with tempfile.TemporaryDirectory(prefix="baton-sim-") as scratch:
        url = await server.start("127.0.0.1", 0)
        path = write_kubeconfig(Path(scratch) / "kubeconfig", url)
        sim = Sim(url=url, kubeconfig=str(path), store=store, server=server)
        try:
            if nodes or kw:  # kw: spec=, speed=, delays= (see simulation.build)
                sim.cluster = build(store, nodes=nodes, **kw)
                sim.cluster.admission = server.admission
                server.sim = SimApi(sim.cluster)
                await sim.cluster.start()
            yield sim
        finally:
            if sim.cluster is not None:
                await sim.cluster.stop()
            await server.stop()
