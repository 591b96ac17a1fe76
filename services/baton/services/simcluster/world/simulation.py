"""The simulated cluster behind the API: nodes, their hardware, kubelets, cloud, faults,
workload.

``Simulation(store, spec)`` follows the store's changes; ``await sim.start()`` creates
the pools' MachineDeployments and nodes; ``sim.inject(kind, nodes, **detail)`` and
``sim.heal(...)`` are the fault API tests (and ``running_sim``'s ``sim.cluster``) use;
``sim.replay(jobs, speed=...)`` submits a workload and ``sim.replay_faults(rows)`` a
fault trace in the background. ``await sim.stop()`` cancels every timer and task.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

import msgspec
import structlog

from baton.services.simcluster.api.calls import Admission
from baton.services.simcluster.api.resources import resource
from baton.services.simcluster.api.store import ApiError, Store
from baton.services.simcluster.clock import Clock
from baton.services.simcluster.world import controlling, dra, faults, quantities
from baton.services.simcluster.world.cloud import Cloud
from baton.services.simcluster.world.controlled import controlled_objects
from baton.services.simcluster.world.fault_trace import TraceRow
from baton.services.simcluster.world.faulting import Faults
from baton.services.simcluster.world.hardware import NodeHardware
from baton.services.simcluster.world.hardware_feed import HardwareFeed
from baton.services.simcluster.world.jobs import Jobs
from baton.services.simcluster.world.jobsets import JobSets
from baton.services.simcluster.world.kubelet import Kubelets
from baton.services.simcluster.world.mpijobs import MPIJobs
from baton.services.simcluster.world.spec import ClusterSpec, Delays, default_spec
from baton.services.simcluster.world.targets import Target
from baton.services.simcluster.world.workload import Job, job_objects

SUBMITS = ("pods", "controllers")  # how the workload submits its jobs

Nodes = str | Iterable[str] | Target  # a node, some nodes, or a Target

Created = tuple[str, dict[str, Any]]  # (resource, object) to create
log = structlog.get_logger("simcluster")


def build(
    store: Store,
    *,
    nodes: int = 0,
    spec: ClusterSpec | None = None,
    speed: float = 1.0,
    delays: Delays | None = None,
    hardware_history: int = 20_000,
) -> Simulation:
    """A Simulation of ``spec`` (default: ``nodes`` HGX-like nodes), not yet started.

    ``speed`` compresses simulated time (delays, durations); ``delays`` overrides the
    spec's; ``hardware_history`` is how many hardware changes a watch can resume from.
    """
    spec = spec or default_spec(nodes)
    if delays is not None:
        spec = msgspec.structs.replace(spec, delays=delays)
    return Simulation(
        store, spec, clock=Clock(speed), hardware=HardwareFeed(history=hardware_history)
    )


class Simulation:
    def __init__(
        self,
        store: Store,
        spec: ClusterSpec,
        *,
        clock: Clock | None = None,
        hardware: HardwareFeed | None = None,
    ) -> None:
        self.store = store
        self.spec = spec
        self.clock = clock or Clock()
        self.hardware = hardware or HardwareFeed()
        self.kubelets = Kubelets(
            store, clock=self.clock, delays=spec.delays, hardware=self.hardware
        )
        self.faults = Faults(store, self.hardware, clock=self.clock)
        self.cloud = Cloud(store, spec=spec, clock=self.clock, load=self.kubelets.pod_count)
        self._tasks: set[asyncio.Task[None]] = set()
        self._webhook_registered = asyncio.Event()  # a mutating webhook was registered
        self._templates: set[tuple[str, int, bool]] = set()  # claim templates made (dra.py)
        self._running = False
        self.submitted = 0  # jobs the workload has created
        self.behind_s = 0.0  # how late (wall seconds) the replay started its last job
        # The API server's admission hooks (webhooks), so workload pods are admitted
        # as if a user had created them: ``await hook("CREATE", resource, obj, None)``.
        self.admission: list[Admission] = []
        # Workload controllers (Job, JobSet, MPIJob), creating through ``self._create``.
        self.controllers = [
            kind(store, clock=self.clock, create=self._create)
            for kind in (Jobs, JobSets, MPIJobs, dra.Claims)
        ]

    async def start(self) -> None:
        self._running = True
        self.store.add_listener(self._on_change)
        if self.spec.devices == "dra":
            self._publish_devices()
        self.cloud.start()
        for controller in self.controllers:
            controller.start()
        log.info("simulation started", nodes=len(self.kubelets.nodes), pools=len(self.spec.pools))

    async def stop(self) -> None:
        self._running = False
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.faults.stop()
        for controller in self.controllers:
            await controller.stop()
        self.cloud.close()
        self.kubelets.close()
        self.hardware.close()

    def _on_change(self, event: str, res: str, obj: dict[str, Any]) -> None:
        if not self._running:
            return
        if res == "nodes" and event != "MODIFIED":
            self._on_node(event, obj)
        if res == "mutatingwebhookconfigurations" and event == "ADDED":
            self._webhook_registered.set()
        self.kubelets.on_change(event, res, obj)
        self.cloud.on_change(event, res, obj)
        controlling.route(self.controllers, event, res, obj)

    def _on_node(self, event: str, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        if event == "DELETED":
            self.hardware.remove(name)
            if self.spec.devices == "dra":
                self._unpublish(name)
            return
        capacity = quantities.parse_all((node.get("status") or {}).get("capacity"))
        gpus, nics = capacity.get("nvidia.com/gpu", 0), capacity.get("rdma/ib", 0)
        mig = (node["metadata"].get("labels") or {}).get(dra.MIG_CAPABLE_LABEL) == "true"
        self.hardware.add(name, gpus=gpus, nics=nics, mig=mig and self.spec.devices == "dra")
        if self.spec.devices == "dra":
            self._publish(node, gpus=gpus, nics=nics)

    # DRA drivers (devices: dra)

    def _publish_devices(self) -> None:
        for device_class in dra.device_classes():
            with contextlib.suppress(ApiError):  # kept from an earlier start
                self.store.create("deviceclasses", device_class)
        nodes, _ = self.store.list("nodes")
        for node in nodes:
            capacity = quantities.parse_all((node.get("status") or {}).get("capacity"))
            self._publish(node, gpus=capacity.get("nvidia.com/gpu", 0),
                          nics=capacity.get("rdma/ib", 0))  # fmt: skip

    def _publish(self, node: dict[str, Any], *, gpus: int, nics: int) -> None:
        labels = node["metadata"].get("labels") or {}
        product = labels.get("nvidia.com/gpu.product", "")
        memory = f"{labels.get('nvidia.com/gpu.memory', '81559')}Mi"
        mig = labels.get(dra.MIG_CAPABLE_LABEL) == "true"
        for piece in dra.node_slices(node["metadata"]["name"], gpus=gpus, nics=nics,
                                     product=product, memory=memory, mig=mig):  # fmt: skip
            with contextlib.suppress(ApiError):  # already published
                self.store.create("resourceslices", piece)

    def _unpublish(self, node: str) -> None:
        for name in dra.slice_names(node):
            with contextlib.suppress(ApiError):
                self.store.delete("resourceslices", None, name)

    # faults

    def inject(self, kind: str, nodes: Nodes, **detail: Any) -> list[str]:
        """Inject a fault (``faults.KINDS``) on ``nodes``; returns the nodes it hit.

        ``sim.inject("xid", "gpu-00001", xid=79, gpu=3)``,
        ``sim.inject("gpu-lost", Target(pool="gpu", share=0.1, seed=7))``.
        Raises ``faults.FaultError`` (unknown kind, Xid, GPU, node) before changing anything.
        """
        return self.faults.apply(faults.fault(kind, **detail), _target(nodes))

    def heal(self, kind: str, nodes: Nodes, **detail: Any) -> list[str]:
        """Heal ``kind`` on ``nodes`` (GPU kinds: every GPU unless ``gpu=`` is given)."""
        return self.faults.apply(faults.fault(kind, **detail), _target(nodes), heal=True)

    def replay_faults(self, rows: Iterable[TraceRow], *, speed: float = 1.0) -> asyncio.Task[None]:
        """Replay a fault trace (``fault_trace.parse``) in the background."""
        return self.faults.replay(rows, speed=speed)

    def node_not_ready(self, node: str) -> None:
        self.inject("node-notready", node)

    def node_ready(self, node: str) -> None:
        self.heal("node-notready", node)

    def gpu_fault(self, node: str, *, xid: int = 79, gpu: int = 0) -> None:
        self.inject("gpu-fault", node, xid=xid, gpu=gpu)

    def gpu_heal(self, node: str) -> None:
        self.heal("gpu-fault", node)

    def hardware_of(self, node: str) -> NodeHardware:
        """The node's hardware document as the agent would read it now (do not edit)."""
        return self.hardware.machine(node)

    # inspection

    def node_names(self, pool: str | None = None) -> list[str]:
        pools = [self.cloud.pools[pool]] if pool else self.cloud.pools.values()
        return sorted(name for state in pools for name in state.nodes)

    def used(self, node: str) -> dict[str, int]:
        """Resources the node's non-terminal pods request."""
        return self.kubelets.used(node)

    # workload

    def replay(
        self,
        jobs: Iterable[Job],
        *,
        speed: float = 1.0,
        submit: str = "pods",
        after_webhook: bool = False,
        submitters: int = 1,
    ) -> asyncio.Task[None]:
        """Submit ``jobs`` at ``submit_s / speed`` (simulated seconds), in the background:
        as PodGroups and bare pods (``submit="pods"``) or as the Jobs, JobSets and MPIJobs
        the controllers run (``"controllers"``, ``controlled.py``). ``after_webhook``: the
        trace's clock starts once a mutating webhook is registered, as users submit to a
        cluster Baton is installed in (jobs created before would skip its webhook, and
        reach its queue all at once, ordered by name within each second). ``submitters``:
        how many jobs are being created at once, as that many users would; each job starts
        in trace order and creates its objects in order, but a job's pods may reach the
        API after the next job's group (1: strictly one after another)."""
        if submit not in SUBMITS:
            raise ValueError(f"submit: expected one of {', '.join(SUBMITS)}, got {submit!r}")
        if submitters < 1:
            raise ValueError(f"submitters: expected >= 1, got {submitters}")
        replaying = self._replay(
            jobs, speed=speed, submit=submit, after_webhook=after_webhook, submitters=submitters
        )
        task = asyncio.create_task(replaying, name="simcluster-workload")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _replay(
        self,
        jobs: Iterable[Job],
        *,
        speed: float,
        submit: str,
        after_webhook: bool,
        submitters: int,
    ) -> None:
        gpus = max((p.gpus for p in self.spec.pools), default=8) or 8
        if after_webhook and not self._webhooks():
            log.info("workload waits for an admission webhook to be registered")
            await self._webhook_registered.wait()
        start = self.clock.now()
        namespaces: set[str] = set()
        free = asyncio.Semaphore(submitters)  # a submitter per permit
        for job in jobs:
            due = start + job.submit_s / speed
            await self.clock.sleep_until(due)
            if job.namespace not in namespaces:
                self._ensure_namespace(job.namespace)
                namespaces.add(job.namespace)
            if submit == "controllers":
                objects = controlled_objects(job, speed=speed, gpus_per_node=gpus)
            else:
                group, pods = job_objects(job, speed=speed, gpus_per_node=gpus)
                objects = [("podgroups", group), *(("pods", pod) for pod in pods)]
            if self.spec.devices == "dra":  # the pods claim their GPUs and NICs (dra.py)
                objects = self._claiming(job.namespace, objects)
            await free.acquire()
            self.behind_s = max(0.0, self.clock.now() - due) / self.clock.speed
            task = asyncio.create_task(self._submit(job, objects, free))
            self._tasks.add(task)  # stop() cancels it
            task.add_done_callback(self._tasks.discard)
        for _ in range(submitters):  # every submitter free again: every job answered
            await free.acquire()
        self.behind_s = 0.0
        log.info("workload finished", jobs=self.submitted)

    async def _submit(self, job: Job, objects: list[Created], free: asyncio.Semaphore) -> None:
        """Create one job's ``objects`` in order; a refused one ends the job, logged."""
        try:
            for res, obj in objects:
                await self._create(res, obj)
        except ApiError as exc:
            log.warning("job not submitted", job=job.job_id, error=str(exc))
        else:
            self.submitted += 1
        finally:
            free.release()

    def _claiming(self, namespace: str, objects: list[Created]) -> list[Created]:
        """``objects`` asking for GPUs through claims, with the templates they name made
        in ``namespace`` first (once each)."""
        out: list[Created] = []
        for res, obj in objects:
            claiming, used = dra.with_claims(obj)
            for gpus, paired in sorted(used):
                if (namespace, gpus, paired) not in self._templates:
                    self._templates.add((namespace, gpus, paired))
                    template = dra.claim_template(gpus, paired=paired)
                    out.append(("resourceclaimtemplates", {**template, "metadata": {
                        **template["metadata"], "namespace": namespace}}))  # fmt: skip
            out.append((res, claiming))
        return out

    def _webhooks(self) -> bool:
        try:
            return bool(self.store.list("mutatingwebhookconfigurations")[0])
        except ApiError:
            return False

    async def _create(self, res: str, obj: dict[str, Any]) -> dict[str, Any]:
        for hook in self.admission:
            obj = await hook("CREATE", resource(res), obj, None)
        return self.store.create(res, obj)

    def _ensure_namespace(self, name: str) -> None:
        with contextlib.suppress(ApiError):
            self.store.create("namespaces", {"metadata": {"name": name}})


def _target(nodes: Nodes) -> Target:
    if isinstance(nodes, Target):
        return nodes
    if isinstance(nodes, str):
        return Target(nodes=(nodes,))
    return Target(nodes=tuple(nodes))
