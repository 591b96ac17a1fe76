"""The simulated cluster behind the API: nodes, kubelets, cloud, faults, workload.

``Simulation(store, spec)`` follows the store's changes; ``await sim.start()`` creates
the pools' MachineDeployments and nodes; the fault methods are what tests (and
``running_sim``'s ``sim.cluster``) use; ``sim.replay(jobs, speed=...)`` submits a
workload in the background. ``await sim.stop()`` cancels every timer and task.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

import msgspec
import structlog

from services.simcluster import faults
from services.simcluster.calls import Admission
from services.simcluster.clock import Clock
from services.simcluster.cloud import Cloud
from services.simcluster.kubelet import Kubelets
from services.simcluster.resources import resource
from services.simcluster.spec import ClusterSpec, Delays, default_spec
from services.simcluster.store import ApiError, Store
from services.simcluster.workload import Job, job_objects

log = structlog.get_logger("simcluster")


def build(
    store: Store,
    *,
    nodes: int = 0,
    spec: ClusterSpec | None = None,
    speed: float = 1.0,
    delays: Delays | None = None,
) -> Simulation:
    """A Simulation of ``spec`` (default: ``nodes`` HGX-like nodes), not yet started.

    ``speed`` compresses simulated time (delays, durations); ``delays`` overrides the
    spec's.
    """
    spec = spec or default_spec(nodes)
    if delays is not None:
        spec = msgspec.structs.replace(spec, delays=delays)
    return Simulation(store, spec, clock=Clock(speed))


class Simulation:
    def __init__(self, store: Store, spec: ClusterSpec, *, clock: Clock | None = None) -> None:
        self.store = store
        self.spec = spec
        self.clock = clock or Clock()
        self.kubelets = Kubelets(store, clock=self.clock, delays=spec.delays)
        self.cloud = Cloud(store, spec=spec, clock=self.clock, load=self.kubelets.pod_count)
        self._tasks: set[asyncio.Task[None]] = set()
        self._running = False
        self.submitted = 0  # jobs the workload has created
        # The API server's admission hooks (webhooks), so workload pods are admitted
        # as if a user had created them: ``await hook("CREATE", resource, obj, None)``.
        self.admission: list[Admission] = []

    async def start(self) -> None:
        self._running = True
        self.store.add_listener(self._on_change)
        self.cloud.start()
        log.info("simulation started", nodes=len(self.kubelets.nodes), pools=len(self.spec.pools))

    async def stop(self) -> None:
        self._running = False
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.cloud.close()
        self.kubelets.close()

    def _on_change(self, event: str, res: str, obj: dict[str, Any]) -> None:
        if not self._running:
            return
        self.kubelets.on_change(event, res, obj)
        self.cloud.on_change(event, res, obj)

    # faults

    def node_not_ready(self, node: str) -> None:
        self._fault(node, faults.not_ready())

    def node_ready(self, node: str) -> None:
        self._fault(node, faults.ready())

    def gpu_fault(self, node: str, *, xid: int = 79, gpu: int = 0) -> None:
        self._fault(node, faults.gpu_fault(xid=xid, gpu=gpu))

    def gpu_heal(self, node: str) -> None:
        self._fault(node, faults.gpu_heal())

    def _fault(self, node: str, fault: faults.NodeFault) -> None:
        self.store.mutate("nodes", None, node, lambda n: faults.apply(n, fault))
        log.info("node fault", node=node, conditions=[c.type for c in fault.conditions])

    # inspection

    def node_names(self, pool: str | None = None) -> list[str]:
        pools = [self.cloud.pools[pool]] if pool else self.cloud.pools.values()
        return sorted(name for state in pools for name in state.nodes)

    def used(self, node: str) -> dict[str, int]:
        """Resources the node's non-terminal pods request."""
        return self.kubelets.used(node)

    # workload

    def replay(self, jobs: Iterable[Job], *, speed: float = 1.0) -> asyncio.Task[None]:
        """Submit ``jobs`` at ``submit_s / speed`` (simulated seconds), in the background."""
        task = asyncio.create_task(self._replay(jobs, speed=speed), name="simcluster-workload")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _replay(self, jobs: Iterable[Job], *, speed: float) -> None:
        gpus = max((p.gpus for p in self.spec.pools), default=8) or 8
        start = self.clock.now()
        namespaces: set[str] = set()
        for job in jobs:
            await self.clock.sleep_until(start + job.submit_s / speed)
            if job.namespace not in namespaces:
                self._ensure_namespace(job.namespace)
                namespaces.add(job.namespace)
            group, pods = job_objects(job, speed=speed, gpus_per_node=gpus)
            try:
                await self._create("podgroups", group)
                for pod in pods:
                    await self._create("pods", pod)
            except ApiError as exc:
                log.warning("job not submitted", job=job.job_id, error=str(exc))
                continue
            self.submitted += 1
        log.info("workload finished", jobs=self.submitted)

    async def _create(self, res: str, obj: dict[str, Any]) -> dict[str, Any]:
        for hook in self.admission:
            obj = await hook("CREATE", resource(res), obj, None)
        return self.store.create(res, obj)

    def _ensure_namespace(self, name: str) -> None:
        with contextlib.suppress(ApiError):
            self.store.create("namespaces", {"metadata": {"name": name}})
