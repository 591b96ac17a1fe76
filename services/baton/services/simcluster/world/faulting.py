"""Applying faults to the simulated cluster: choose the nodes, edit their hardware, make
each Node say what its hardware now says, and replay fault traces.

A GPU that NVIDIA's device plugin would call unhealthy (not present, uncorrectable ECC
errors, a failed row remap) leaves the Node's ``allocatable`` ``nvidia.com/gpu`` (its
``capacity`` stays), and comes back when healed, as on a real node; a nodefs over the
kubelet's eviction threshold sets ``DiskPressure``. Everything else a fault does is in
the hardware document only: noticing it is the node agent's and Baton's job.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

import structlog

from baton.services.simcluster.api.selectors import SelectorError
from baton.services.simcluster.api.store import ApiError, Store
from baton.services.simcluster.clock import Clock
from baton.services.simcluster.world import conditions, hardware, targets
from baton.services.simcluster.world.conditions import NodeFault
from baton.services.simcluster.world.fault_trace import TraceRow
from baton.services.simcluster.world.faults import KINDS, Fault, FaultError, check
from baton.services.simcluster.world.hardware_feed import HardwareFeed
from baton.services.simcluster.world.targets import Target
from baton.services.simcluster.world.topology import POOL_LABEL

log = structlog.get_logger("simcluster.faults")
GPU = "nvidia.com/gpu"


class UnknownNodes(FaultError):
    """Named nodes that do not exist (the API answers 404)."""


class Faults:
    def __init__(self, store: Store, feed: HardwareFeed, *, clock: Clock) -> None:
        self._store = store
        self._feed = feed
        self._clock = clock
        self._tasks: set[asyncio.Task[None]] = set()
        self._timers: set[asyncio.TimerHandle] = set()

    def apply(self, fault: Fault, target: Target, *, heal: bool = False) -> list[str]:
        """Inject (or heal) ``fault`` on the nodes ``target`` picks; returns their names.

        Every chosen node is checked first (its GPU, disk or NIC exists), so a bad fault
        changes nothing.
        """
        kind = KINDS[fault.kind]
        chosen = self.choose(target)
        for node in chosen:
            check(self._feed.machine(node), fault)
        for node in chosen:
            doc = self._feed.machine(node)
            (kind.heal if heal else kind.inject)(doc, fault)
            self._feed.touch(node)
            extra = kind.on_heal if heal else kind.on_inject
            self.sync_node(node, extra=extra(fault) if extra else None)
        log.info("fault healed" if heal else "fault injected", kind=fault.kind, nodes=len(chosen))
        return chosen

    def choose(self, target: Target) -> list[str]:
        if target.nodes:
            missing = [n for n in target.nodes if n not in self._feed]
            if missing:
                raise UnknownNodes(f"nodes not found: {', '.join(missing)}")
            return targets.choose(target, target.nodes)
        selector = ",".join(s for s in (target.selector, _pool(target.pool)) if s)
        try:
            found, _ = self._store.list("nodes", label_selector=selector)
        except SelectorError as exc:
            raise FaultError(f"selector: {exc}") from None
        names = [n["metadata"]["name"] for n in found if n["metadata"]["name"] in self._feed]
        return targets.choose(target, names)

    def sync_node(self, node: str, *, extra: NodeFault | None = None) -> None:
        """Write the Node's GPU allocatable and DiskPressure from its hardware (and ``extra``)."""
        doc = self._feed.machine(node)
        try:
            current = self._store.get("nodes", None, node)
        except ApiError:
            return
        status = current.get("status") or {}
        capacity = status.get("capacity") or {}
        gpus = int(capacity.get(GPU, 0) or 0)
        allocatable = str(max(0, gpus - hardware.unhealthy_gpus(doc)))
        pressure = hardware.disk_pressure(doc)
        stated = {c.get("type"): c.get("status") for c in status.get("conditions") or ()}
        same_gpus = not gpus or (status.get("allocatable") or {}).get(GPU) == allocatable
        same_disk = (stated.get("DiskPressure") == "True") == pressure
        if same_gpus and same_disk and extra is None:
            return

        def edit(obj: dict[str, Any]) -> None:
            if gpus:
                obj.setdefault("status", {}).setdefault("allocatable", {})[GPU] = allocatable
            if not same_disk:
                conditions.apply(obj, conditions.disk_pressure(pressure))
            if extra is not None:
                conditions.apply(obj, extra)

        self._store.mutate("nodes", None, node, edit)

    # fault traces

    def replay(self, rows: Iterable[TraceRow], *, speed: float = 1.0) -> asyncio.Task[None]:
        """Apply each row at ``time_s / speed`` (simulated seconds), healing it after its
        ``duration_s / speed`` (0: never), in the background."""
        task = asyncio.create_task(self._replay(list(rows), speed), name="simcluster-faults")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _replay(self, rows: list[TraceRow], speed: float) -> None:
        start = self._clock.now()
        for row in sorted(rows, key=lambda r: r.time_s):
            await self._clock.sleep_until(start + row.time_s / speed)
            try:
                chosen = self.apply(row.fault, row.target, heal=row.heal)
            except FaultError as exc:
                log.warning("trace fault not applied", line=row.line, error=str(exc))
                continue
            if row.duration_s > 0 and chosen and not row.heal:
                self._later(row.duration_s / speed, row.fault, targets.nodes(*chosen))
        log.info("fault trace finished", rows=len(rows))

    def _later(self, seconds: float, fault: Fault, target: Target) -> None:
        def heal() -> None:
            self._timers.discard(timer)
            try:
                self.apply(fault, target, heal=True)
            except FaultError as exc:  # e.g. the node was scaled away meanwhile
                log.info("trace heal skipped", kind=fault.kind, error=str(exc))

        timer = self._clock.call_later(seconds, heal)
        self._timers.add(timer)

    async def stop(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _pool(pool: str) -> str:
    return f"{POOL_LABEL}={pool}" if pool else ""
