"""The cloud provider behind each pool's Cluster API MachineDeployment.

``spec.replicas`` (patched directly or through ``/scale``) is the pool's wanted size.
Growing provisions nodes that join Ready after ``provisioning_s``; shrinking first
cancels nodes still provisioning, then removes nodes annotated
``cluster.x-k8s.io/delete-machine`` (as Cluster API does for Machines), then those with
the fewest pods (the newest among equals). A node deleted through the API is replaced,
as a MachineSet replaces a lost Machine. ``status`` (replicas, readyReplicas, phase,
selector) follows.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from services.simcluster import topology
from services.simcluster.clock import Clock
from services.simcluster.spec import ClusterSpec, Pool
from services.simcluster.store import ApiError, Store

log = structlog.get_logger("simcluster.cloud")
RES = "machinedeployments"
DELETE_MACHINE = "cluster.x-k8s.io/delete-machine"
Obj = dict[str, Any]


@dataclass(slots=True)
class PoolState:
    pool: Pool
    nodes: dict[str, int] = field(default_factory=dict)  # name -> slot
    provisioning: dict[int, asyncio.TimerHandle] = field(default_factory=dict)  # slot -> timer
    desired: int = 0
    freed: list[int] = field(default_factory=list)  # heap of slots given back
    next_slot: int = 0

    def take_slot(self) -> int:
        """The lowest free slot, so the pool stays packed into its first racks."""
        if self.freed:
            return heapq.heappop(self.freed)
        self.next_slot += 1
        return self.next_slot - 1

    def give_back(self, slot: int) -> None:
        heapq.heappush(self.freed, slot)


class Cloud:
    def __init__(
        self, store: Store, *, spec: ClusterSpec, clock: Clock, load: Callable[[str], int]
    ) -> None:
        self._store = store
        self._spec = spec
        self._clock = clock
        self._load = load  # pods on a node, to prefer empty ones on scale-down
        self.pools = {p.name: PoolState(pool=p, desired=p.count) for p in spec.pools}
        self._owner: dict[str, str] = {}  # node -> pool
        self._ordinal = 0

    def start(self) -> None:
        """Create every pool's MachineDeployment and its initial nodes, Ready at once."""
        for state in self.pools.values():
            for _ in range(state.pool.count):
                self._join(state, state.take_slot())
            self._store.create(RES, topology.machine_deployment(self._spec, state.pool))
            self._publish(state)

    def close(self) -> None:
        for state in self.pools.values():
            for timer in state.provisioning.values():
                timer.cancel()
            state.provisioning.clear()

    # following the store

    def on_change(self, event: str, res: str, obj: Obj) -> None:
        if res == RES and event != "DELETED":
            state = self.pools.get(obj["metadata"]["name"])
            if state is not None and obj["metadata"].get("namespace") == topology.MD_NAMESPACE:
                state.desired = max(0, int(obj.get("spec", {}).get("replicas") or 0))
                self._reconcile(state)
        elif res == "nodes" and event == "DELETED":
            pool = self._owner.pop(obj["metadata"]["name"], None)
            if pool is not None:
                state = self.pools[pool]
                state.give_back(state.nodes.pop(obj["metadata"]["name"]))
                self._reconcile(state)

    def _reconcile(self, state: PoolState) -> None:
        have = len(state.nodes) + len(state.provisioning)
        for _ in range(state.desired - have):
            slot = state.take_slot()
            delay = self._spec.delays.provisioning_s
            state.provisioning[slot] = self._clock.call_later(delay, self._provisioned, state, slot)
            log.info("provisioning node", pool=state.pool.name, slot=slot)
        excess = have - state.desired
        for slot in sorted(state.provisioning, reverse=True)[: max(0, excess)]:
            state.provisioning.pop(slot).cancel()
            state.give_back(slot)
            excess -= 1
        if excess > 0:
            by_load = sorted(
                state.nodes, key=lambda n: (not self._marked(n), self._load(n), -state.nodes[n])
            )
            for name in by_load[:excess]:
                self._remove(state, name)
        self._publish(state)

    def _marked(self, node: str) -> bool:
        """Cluster API's ``delete-machine`` annotation (here on the node) goes first."""
        try:
            annotations = self._store.get("nodes", None, node)["metadata"].get("annotations")
        except ApiError:
            return False
        return DELETE_MACHINE in (annotations or {})

    def _provisioned(self, state: PoolState, slot: int) -> None:
        if state.provisioning.pop(slot, None) is None:
            return
        self._join(state, slot)
        self._publish(state)

    def _join(self, state: PoolState, slot: int) -> None:
        self._ordinal += 1
        node = topology.node_object(self._spec, pool=state.pool, slot=slot, ordinal=self._ordinal)
        name = node["metadata"]["name"]
        state.nodes[name] = slot
        self._owner[name] = state.pool.name
        self._store.create("nodes", node)

    def _remove(self, state: PoolState, name: str) -> None:
        state.give_back(state.nodes.pop(name))
        self._owner.pop(name, None)
        log.info("removing node", pool=state.pool.name, node=name, pods=self._load(name))
        try:
            self._store.delete("nodes", None, name)
        except ApiError:
            return

    def _publish(self, state: PoolState) -> None:
        """Write the MachineDeployment's status, if it changed."""
        ready = len(state.nodes)
        status = topology.deployment_status(
            self._spec,
            state.pool.name,
            replicas=ready + len(state.provisioning),
            ready=ready,
            desired=state.desired,
        )
        try:
            current = self._store.get(RES, topology.MD_NAMESPACE, state.pool.name)
        except ApiError:
            return
        status["observedGeneration"] = current["metadata"].get("generation", 1)
        if current.get("status") == status:
            return

        def write(md: Obj) -> None:
            md["status"] = status

        self._store.mutate(RES, topology.MD_NAMESPACE, state.pool.name, write)
