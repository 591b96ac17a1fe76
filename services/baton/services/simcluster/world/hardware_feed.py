"""Every node's simulated hardware, and its change feed (list + watch, like a resource).

Kept small for 7,500 nodes and 100k pods: a node's :class:`NodeHardware` is built on
first use (``machine(name)``: a fault, a preflight check, a reader); until then the
feed only knows its shape and which GPUs its pods hold, and a document built later
shows those pods. Nothing is encoded until someone lists or watches: from then on
whoever edits a document calls :meth:`touch`, and edits are coalesced and published at
most every ``flush_s`` (real seconds) on the event loop, or at once before a list.
Each published change takes the feed's next resourceVersion (its own counter, apart
from the Kubernetes store's) and is kept in a ring of ``history`` changes: a watch from
a version older than the ring gets 410 Expired, as the pod watch does. Watchers follow
every node or one (``node=``), so a node's agent does not pay for the other 7,499.
Pod binding never waits on this: ``touch`` is at most a dict insert.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from baton.services.simcluster.api.history import Change, Ring, Watcher
from baton.services.simcluster.world import hardware
from baton.services.simcluster.world.hardware import GpuProcess, MigDevice, NodeHardware

_encode = msgspec.json.Encoder().encode
RES = "hardware"
BUSY_C, IDLE_C = 67, 34  # GPU temperature with and without a process


def event_line(event_type: str, rv: int, raw: bytes) -> bytes:
    """``{"type": ..., "object": NodeHardware, "resourceVersion": "N"}`` and a newline."""
    return (
        b'{"type":"'
        + event_type.encode()
        + b'","object":'
        + raw
        + b',"resourceVersion":"'
        + str(rv).encode()
        + b'"}\n'
    )


@dataclass(slots=True)
class _Change(Change):
    """A ring entry whose watch line is built only if a watcher wants it."""

    def line(self) -> bytes:
        if self._line is None:
            self._line = event_line(self.type, self.rv, self.raw)
        return self._line


class HardwareFeed:
    def __init__(self, *, history: int = 10_000, flush_s: float = 0.05) -> None:
        self.rv = 0
        self.ring = Ring(history)
        self._shape: dict[str, tuple[int, int, bool]] = {}  # node -> (GPUs, IB NICs, MIG)
        self._docs: dict[str, NodeHardware] = {}  # the nodes built so far
        self._holders: dict[str, dict[str, list[int]]] = {}  # node -> pod -> GPU indices
        self._migs: dict[str, dict[str, list[tuple[int, int]]]] = {}  # -> (GPU, slice)
        self._raw: dict[str, bytes] = {}  # last published encoding of each node
        self._dirty: dict[str, str] = {}  # node -> event type waiting to be published
        self._live = False  # someone has listed or watched: publish changes
        self._everyone: set[Watcher] = set()
        self._by_node: dict[str, set[Watcher]] = {}
        self._flush_s = flush_s
        self._timer: asyncio.TimerHandle | None = None

    # nodes

    def add(self, node: str, *, gpus: int, nics: int, mig: bool = False) -> None:
        """A node joined: healthy hardware with ``gpus`` GPUs (in MIG mode with ``mig``)
        and ``nics`` IB ports."""
        self._shape[node] = (gpus, nics, mig)
        self._docs.pop(node, None)
        self._mark(node, "ADDED")

    def remove(self, node: str) -> None:
        if node not in self._shape:
            return
        if self._live and node in self._raw:
            self.machine(node)  # the DELETED event carries the last document
            self._mark(node, "DELETED")
        else:
            self._dirty.pop(node, None)
            self._forget(node)

    def machine(self, node: str) -> NodeHardware:
        """The node's document to read or edit (call :meth:`touch` after editing)."""
        doc = self._docs.get(node)
        if doc is None:
            gpus, nics, mig = self._shape[node]  # KeyError: no such node
            doc = self._docs[node] = hardware.healthy(node, gpus=gpus, nics=nics, mig=mig)
            for pod, indices in self._holders.get(node, {}).items():
                self._run(doc, pod, indices)
            for pod, parts in self._migs.get(node, {}).items():
                self._partition(doc, pod, parts)
        return doc

    def __contains__(self, node: object) -> bool:
        return node in self._shape

    def touch(self, node: str) -> None:
        if node in self._shape:
            self._mark(node, "MODIFIED")

    # pods running on a node (the kubelet tells us)

    def pod_started(
        self,
        node: str,
        pod: str,
        *,
        gpus: int,
        on: Sequence[int] = (),
        mig: Sequence[tuple[int, int]] = (),
    ) -> None:
        """``pod`` runs on ``node``: listed, and one process on each GPU it holds: ``on``
        (the GPUs its DRA claims were given), else ``gpus`` of them, healthy GPUs first,
        as the device plugin allocates only healthy ones. ``mig``: the (GPU, memory
        slice) of each MIG device its claims were given, an instance made for it (the
        DRA driver creates it when it prepares the claim; a MIG device's processes are
        not modelled)."""
        if node not in self._shape:
            return
        holders = self._holders.setdefault(node, {})
        held = {i for indices in holders.values() for i in indices}
        doc = self._docs.get(node)
        if on:
            free = list(on)
        elif doc is None:  # not built: every GPU is healthy
            free = [i for i in range(self._shape[node][0]) if i not in held]
        else:
            gpus_free = [g for g in doc.gpus if g.index not in held]
            free = [g.index for g in sorted(gpus_free, key=lambda g: bool(hardware.gpu_problem(g)))]
        holders[pod] = free[:gpus]
        if mig:
            self._migs.setdefault(node, {})[pod] = list(mig)
        if doc is not None:
            self._run(doc, pod, holders[pod])
            self._partition(doc, pod, mig)
            self.touch(node)

    def pod_stopped(self, node: str, pod: str) -> None:
        indices = self._holders.get(node, {}).pop(pod, None)
        parts = self._migs.get(node, {}).pop(pod, None)
        doc = self._docs.get(node)
        if indices is None or doc is None:
            return
        for gpu in doc.gpus:
            if parts:
                gpu.mig = [m for m in gpu.mig if m.pod != pod]
            if gpu.index in indices:
                gpu.processes = [p for p in gpu.processes if p.pod != pod]
                gpu.temperature_c = BUSY_C if gpu.processes else IDLE_C
        doc.pods = [p for p in doc.pods if p != pod]
        self.touch(node)

    def gpus_of(self, node: str, pod: str) -> list[int]:
        return list(self._holders.get(node, {}).get(pod, ()))

    @staticmethod
    def _run(doc: NodeHardware, pod: str, indices: list[int]) -> None:
        doc.pods.append(pod)
        for gpu in doc.gpus:
            if gpu.index in indices:
                pid = hardware.next_pid(doc)
                gpu.processes.append(GpuProcess(pid=pid, used_mib=hardware.USED_MIB, pod=pod))
                gpu.temperature_c = BUSY_C

    @staticmethod
    def _partition(doc: NodeHardware, pod: str, parts: Sequence[tuple[int, int]]) -> None:
        for index, slot in parts:
            gpu = next((g for g in doc.gpus if g.index == index), None)
            if gpu is not None:
                uuid = hardware.mig_uuid(gpu.uuid, slot)
                gpu.mig.append(MigDevice(uuid=uuid, gpu_instance=slot, pod=pod))

    # publishing

    def _mark(self, node: str, event_type: str) -> None:
        if not self._live:
            return  # nobody reads yet: the first list builds everything as it is then
        first = self._dirty.get(node)
        if first == "ADDED" and event_type == "MODIFIED":
            return  # not yet published: still an ADDED
        if first == "ADDED" and event_type == "DELETED":
            del self._dirty[node]  # never seen, never gone
            self._forget(node)
            return
        self._dirty[node] = event_type
        if self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop (unit tests): published at the next flush()
            self._timer = loop.call_later(self._flush_s, self.flush)

    def _go_live(self) -> None:
        """The first reader: every node as it is now, at one resourceVersion."""
        self._live = True
        self.rv += 1
        for node in self._shape:
            self._raw[node] = _encode(self.machine(node))
        self.ring.evicted_upto = self.rv  # nothing before this version can be replayed

    def flush(self) -> None:
        """Publish every pending change now, in node order."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._dirty = self._dirty, {}
        for node in sorted(pending):
            self._publish(node, pending[node])

    def _publish(self, node: str, event_type: str) -> None:
        raw = _encode(self.machine(node))
        self.rv += 1
        change = _Change(self.rv, event_type, RES, node, {}, raw)
        self.ring.append(change)
        if event_type == "DELETED":
            self._forget(node)
        else:
            self._raw[node] = raw
        for watcher in (*self._everyone, *self._by_node.get(node, ())):
            watcher.offer(change)

    def _forget(self, node: str) -> None:
        self._shape.pop(node, None)
        self._docs.pop(node, None)
        self._raw.pop(node, None)
        self._holders.pop(node, None)
        self._migs.pop(node, None)

    # reading

    def list(self, node: str | None = None) -> tuple[int, list[bytes]]:
        """(resourceVersion, each node's document) after publishing what is pending."""
        if not self._live:
            self._go_live()
        self.flush()
        if node is None:
            return self.rv, [self._raw[n] for n in sorted(self._raw)]
        return self.rv, [self._raw[node]] if node in self._raw else []

    def watch(self, *, since: int, node: str | None, capacity: int) -> Watcher:
        """Changes after ``since`` (Expired when the ring no longer has them all), then live."""
        if not self._live:
            self._go_live()
        self.flush()
        watcher = Watcher(res=RES, namespace=node, predicate=None, capacity=2**62)
        for change in self.ring.since(since):
            watcher.offer(change)
        watcher.capacity = capacity
        watcher.last_rv = max(since, watcher.last_rv)
        (self._by_node.setdefault(node, set()) if node else self._everyone).add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        watcher.close()
        self._everyone.discard(watcher)
        if watcher.namespace:
            self._by_node.get(watcher.namespace, set()).discard(watcher)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for watcher in [*self._everyone, *(w for ws in self._by_node.values() for w in ws)]:
            self.unwatch(watcher)
