"""The cloud provider behind each pool's Cluster API MachineDeployment.

``spec.replicas`` (patched directly or through ``/scale``) is the pool's wanted number
of machines. Growing creates machines: within the pool's cloud ``quota`` each is
provisioned and joins after ``provisioning_s`` plus or minus ``provisioning_spread_s``
(seeded), except a ``join_failure_share`` that never joins and a ``not_ready_share``
that joins NotReady; beyond the quota machines stay pending and the status says so
(``Ready`` False, reason ``QuotaExceeded``). Shrinking first drops pending machines,
then machines that never joined, then those still provisioning, then nodes annotated
``cluster.x-k8s.io/delete-machine`` (as Cluster API does for Machines), then those with
the fewest pods (the newest among equals). A node deleted through the API is replaced,
as a MachineSet replaces a lost Machine. ``status`` (replicas, readyReplicas, phase,
selector, conditions) follows.
"""

from __future__ import annotations

import asyncio
import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from baton.services.simcluster.api.store import ApiError, Store
from baton.services.simcluster.clock import Clock
from baton.services.simcluster.world import conditions, topology
from baton.services.simcluster.world.spec import ClusterSpec, Pool

log = structlog.get_logger("simcluster.cloud")
RES = "machinedeployments"
DELETE_MACHINE = "cluster.x-k8s.io/delete-machine"
Obj = dict[str, Any]


@dataclass(slots=True)
class PoolState:
    pool: Pool
    rng: random.Random
    nodes: dict[str, int] = field(default_factory=dict)  # name -> slot
    # slot -> its join timer; None: a machine that will never join
    provisioning: dict[int, asyncio.TimerHandle | None] = field(default_factory=dict)
    pending: int = 0  # machines waiting for quota
    not_ready: set[str] = field(default_factory=set)  # nodes whose Ready is not True
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

    @property
    def machines(self) -> int:
        return len(self.nodes) + len(self.provisioning) + self.pending

    def has_quota(self) -> bool:
        quota = self.pool.quota
        return quota is None or len(self.nodes) + len(self.provisioning) < quota


class Cloud:
    def __init__(
        self, store: Store, *, spec: ClusterSpec, clock: Clock, load: Callable[[str], int]
    ) -> None:
        self._store = store
        self._spec = spec
        self._clock = clock
        self._load = load  # pods on a node, to prefer empty ones on scale-down
        self.pools = {
            p.name: PoolState(pool=p, rng=random.Random(f"{spec.seed}/{p.name}"), desired=p.count)
            for p in spec.pools
        }
        self._owner: dict[str, str] = {}  # node -> pool
        self._ordinal = 0

    def start(self) -> None:
        """Create every pool's MachineDeployment and its initial nodes, Ready at once (the
        cluster as it stands; quota still applies, join failures do not)."""
        for state in self.pools.values():
            for _ in range(state.pool.count):
                if state.has_quota():
                    self._join(state, state.take_slot())
                else:
                    state.pending += 1
            self._store.create(RES, topology.machine_deployment(self._spec, state.pool))
            self._publish(state)

    def close(self) -> None:
        for state in self.pools.values():
            for timer in state.provisioning.values():
                if timer is not None:
                    timer.cancel()
            state.provisioning.clear()

    # following the store

    def on_change(self, event: str, res: str, obj: Obj) -> None:
        if res == RES and event != "DELETED":
            state = self.pools.get(obj["metadata"]["name"])
            if state is not None and obj["metadata"].get("namespace") == topology.MD_NAMESPACE:
                state.desired = max(0, int(obj.get("spec", {}).get("replicas") or 0))
                self._reconcile(state)
        elif res == "nodes":
            pool = self._owner.get(obj["metadata"]["name"])
            if pool is not None:
                self._on_node(self.pools[pool], event, obj)

    def _on_node(self, state: PoolState, event: str, node: Obj) -> None:
        name = node["metadata"]["name"]
        if event == "DELETED":
            del self._owner[name]
            state.not_ready.discard(name)
            state.give_back(state.nodes.pop(name))
            self._reconcile(state)
            return
        was = name in state.not_ready
        if conditions.is_ready(node):
            state.not_ready.discard(name)
        else:
            state.not_ready.add(name)
        if was != (name in state.not_ready):
            self._publish(state)

    def _reconcile(self, state: PoolState) -> None:
        state.pending += max(0, state.desired - state.machines)
        self._shrink(state, state.machines - state.desired)
        while state.pending and state.has_quota():
            state.pending -= 1
            self._provision(state)
        self._publish(state)

    def _shrink(self, state: PoolState, excess: int) -> None:
        dropped = min(excess, state.pending)
        state.pending -= dropped
        excess -= dropped
        # machines that never joined, then the latest still provisioning
        order = sorted(state.provisioning, key=lambda s: (state.provisioning[s] is not None, -s))
        for slot in order[: max(0, excess)]:
            timer = state.provisioning.pop(slot)
            if timer is not None:
                timer.cancel()
            state.give_back(slot)
            excess -= 1
        if excess > 0:
            by_load = sorted(
                state.nodes, key=lambda n: (not self._marked(n), self._load(n), -state.nodes[n])
            )
            for name in by_load[:excess]:
                self._remove(state, name)

    def _provision(self, state: PoolState) -> None:
        """Start one machine: its join delay and fate are drawn now, in a fixed order."""
        pool, slot = state.pool, state.take_slot()
        base = (
            self._spec.delays.provisioning_s if pool.provisioning_s is None else pool.provisioning_s
        )
        spread = pool.provisioning_spread_s
        delay = max(0.0, base + state.rng.uniform(-spread, spread))
        never = state.rng.random() < pool.join_failure_share
        not_ready = state.rng.random() < pool.not_ready_share
        if never:
            state.provisioning[slot] = None
            log.info("machine will not join", pool=pool.name, slot=slot)
            return
        state.provisioning[slot] = self._clock.call_later(
            delay, self._provisioned, state, slot, not_ready
        )
        log.info("provisioning node", pool=pool.name, slot=slot, seconds=round(delay, 1))

    def _marked(self, node: str) -> bool:
        """Cluster API's ``delete-machine`` annotation (here on the node) goes first."""
        try:
            annotations = self._store.get("nodes", None, node)["metadata"].get("annotations")
        except ApiError:
            return False
        return DELETE_MACHINE in (annotations or {})

    def _provisioned(self, state: PoolState, slot: int, not_ready: bool) -> None:
        if state.provisioning.pop(slot, None) is None:
            return
        self._join(state, slot, not_ready=not_ready)
        self._publish(state)

    def _join(self, state: PoolState, slot: int, *, not_ready: bool = False) -> None:
        self._ordinal += 1
        node = topology.node_object(self._spec, pool=state.pool, slot=slot, ordinal=self._ordinal)
        if not_ready:
            conditions.apply(node, conditions.joined_not_ready())
        name = node["metadata"]["name"]
        state.nodes[name] = slot
        self._owner[name] = state.pool.name
        self._store.create("nodes", node)

    def _remove(self, state: PoolState, name: str) -> None:
        state.give_back(state.nodes.pop(name))
        state.not_ready.discard(name)
        self._owner.pop(name, None)
        log.info("removing node", pool=state.pool.name, node=name, pods=self._load(name))
        try:
            self._store.delete("nodes", None, name)
        except ApiError:
            return

    def _publish(self, state: PoolState) -> None:
        """Write the MachineDeployment's status, if it changed."""
        status = topology.deployment_status(
            self._spec,
            state.pool.name,
            replicas=state.machines,
            ready=len(state.nodes) - len(state.not_ready),
            desired=state.desired,
            pending=state.pending,
            quota=state.pool.quota,
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
