"""The simulated backend: simcluster's simulated node hardware over HTTP.

Not the Kubernetes API: simcluster serves the hardware it simulates beside it::

    GET /sim/v1/hardware                               -> {"resourceVersion": "N", "items": [...]}
    GET /sim/v1/hardware?watch=1&resourceVersion=N     -> JSON lines {"type": "ADDED" |
        "MODIFIED" | "DELETED", "object": NodeHardware}; 410 when N is too old: list again

Each ``NodeHardware`` becomes the readings a real node's backends would make (GPUs,
disks and NICs, pods), and its kernel log lines go through the same parser as a real
node's (``kmsg``). Like ``/dev/kmsg`` read from now on, lines logged before the agent
first saw the node (or before it was powered on again) are not replayed. ``up`` false
is a powered-off node: a ``Power`` reading, and the core publishes nothing for it.
Unknown fields are ignored, so simcluster may add more.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Final, cast

import aiohttp
import msgspec
import structlog

from baton.proto.telemetry import Disk, GpuStatus, MigDevice, Nic, RecoveryAction
from baton.services.agent.core import kmsg
from baton.services.agent.core.readings import (
    AnyReading,
    GpuProcess,
    Gpus,
    GpuSample,
    Host,
    Pods,
    Power,
)

PATH: Final = "/sim/v1/hardware"
NAME: Final = "sim"
ACTIONS: Final = frozenset({"", "reset", "reboot", "drain"})

log = structlog.get_logger("baton.agent")
Emit = Callable[[str, AnyReading], None]


class SimProcess(msgspec.Struct, frozen=True, kw_only=True):
    pid: int
    used_mib: int = 0
    pod: str = ""


class SimGpu(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    uuid: str = ""
    bus_id: str = ""
    present: bool = True
    temperature_c: int | None = None
    ecc_volatile_sbe: int = 0
    ecc_volatile_dbe: int = 0
    ecc_aggregate_sbe: int = 0
    ecc_aggregate_dbe: int = 0
    retired_pages_pending: bool = False
    retired_pages: int = 0
    row_remap_pending: bool = False
    row_remap_failure: bool = False
    nvlink_errors: int = 0
    recovery_action: str = ""
    processes: tuple[SimProcess, ...] = ()
    pcie_root: str = ""
    numa_node: int | None = None
    mig_enabled: bool | None = None
    mig: tuple[MigDevice, ...] = ()  # its ``pod`` field is the simulation's: ignored


class SimLine(msgspec.Struct, frozen=True, kw_only=True):
    seq: int
    line: str


class NodeHardware(msgspec.Struct, frozen=True, kw_only=True):
    node: str
    up: bool = True
    expected_gpus: int = 0
    gpus: tuple[SimGpu, ...] = ()
    disks: tuple[Disk, ...] = ()
    nics: tuple[Nic, ...] = ()
    pods: tuple[str, ...] = ()
    kernel_log: tuple[SimLine, ...] = ()
    kernel_log_seq: int = 0


class _List(msgspec.Struct, kw_only=True):
    resourceVersion: str = ""  # the wire name
    items: list[msgspec.Raw] = []


class _Event(msgspec.Struct, kw_only=True):
    type: str
    object: msgspec.Raw


class Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


def gpu_sample(gpu: SimGpu) -> GpuSample:
    """A simulated GPU as NVML would read it: a GPU that is not present reads nothing."""
    bus = kmsg.bus_id(gpu.bus_id) or gpu.bus_id
    if not gpu.present:
        return GpuSample(
            status=GpuStatus(index=gpu.index, uuid=gpu.uuid, bus_id=bus, present=False,
                             pcie_root=gpu.pcie_root, numa_node=gpu.numa_node)
        )  # fmt: skip
    action = gpu.recovery_action
    known = action in ACTIONS
    status = GpuStatus(
        index=gpu.index, uuid=gpu.uuid, bus_id=bus, temperature_c=gpu.temperature_c,
        ecc_volatile_sbe=gpu.ecc_volatile_sbe, ecc_volatile_dbe=gpu.ecc_volatile_dbe,
        ecc_aggregate_sbe=gpu.ecc_aggregate_sbe, ecc_aggregate_dbe=gpu.ecc_aggregate_dbe,
        retired_pages=gpu.retired_pages, retired_pages_pending=gpu.retired_pages_pending,
        row_remap_pending=gpu.row_remap_pending, row_remap_failure=gpu.row_remap_failure,
        nvlink_errors=gpu.nvlink_errors,
        recovery_action=cast(RecoveryAction, action if known else ""),
        failed=() if known else ("recovery_action",), pcie_root=gpu.pcie_root,
        numa_node=gpu.numa_node, mig_enabled=gpu.mig_enabled, mig=gpu.mig,
    )  # fmt: skip
    processes = tuple(GpuProcess(pid=p.pid, used_mib=p.used_mib, pod=p.pod) for p in gpu.processes)
    return GpuSample(status=status, processes=processes)


def readings(doc: NodeHardware, *, at: float, since: int) -> list[AnyReading]:
    """What a node's backends would read from ``doc``; kernel lines after seq ``since``."""
    samples = tuple(gpu_sample(g) for g in doc.gpus)
    found = sum(1 for s in samples if s.status.present)
    records = [kmsg.Record(seq=x.seq, message=x.line) for x in doc.kernel_log if x.seq > since]
    return [
        Gpus(at=at, gpus=samples, expected=doc.expected_gpus, found=found),
        Host(at=at, disks=doc.disks, nics=doc.nics),
        Pods(at=at, running=frozenset(doc.pods)),
        *kmsg.xids(records, at=at),
    ]


def decode_node(raw: bytes | msgspec.Raw) -> NodeHardware | None:
    try:
        return msgspec.json.decode(raw, type=NodeHardware)
    except msgspec.ValidationError as exc:
        log.warning("bad simulated hardware document, skipped", error=str(exc))
        return None


class Tracker:
    """Turns documents into readings per node: power changes, and the kernel log seq
    each node's Xid readings start after (from the first sight or power-on: from now on)."""

    def __init__(self, nodes: Iterable[str] | None = None) -> None:
        self.nodes = frozenset(nodes) if nodes is not None else None  # None: every node
        self.up: dict[str, bool] = {}
        self._since: dict[str, int] = {}

    def apply(self, doc: NodeHardware, *, at: float, emit: Emit) -> None:
        if self.nodes is not None and doc.node not in self.nodes:
            return
        was = self.up.get(doc.node)
        if was is None or (doc.up and not was):
            self._since[doc.node] = doc.kernel_log_seq
        if doc.up != (True if was is None else was):
            emit(doc.node, Power(at=at, up=doc.up))
        self.up[doc.node] = doc.up
        if not doc.up:
            return
        since = self._since[doc.node]
        for reading in readings(doc, at=at, since=since):
            emit(doc.node, reading)
        self._since[doc.node] = max([since, *(x.seq for x in doc.kernel_log)])

    def delete(self, node: str, *, at: float, emit: Emit) -> None:
        """A node gone from the simulation: like powered off."""
        if self.up.pop(node, False):
            emit(node, Power(at=at, up=False))
        self._since.pop(node, None)

    def keep_only(self, nodes: set[str], *, at: float, emit: Emit) -> None:
        """After a list: nodes deleted while we were not watching."""
        for node in [n for n in self.up if n not in nodes]:
            self.delete(node, at=at, emit=emit)


class SimHardware:
    """Lists and watches ``/sim/v1/hardware``; emits each node's readings as they change."""

    name = NAME

    def __init__(
        self,
        url: str,
        *,
        nodes: Iterable[str] | None = None,
        clock: Callable[[], float],
        backoff_max_s: float = 30.0,
    ) -> None:
        self.url = url.rstrip("/") + PATH
        self.tracker = Tracker(nodes)
        self.clock = clock
        self.backoff_max_s = backoff_max_s
        self.synced = False  # listed at least once

    async def run(self, emit: Emit) -> None:
        """List, then watch; list again on 410 or when the watch ends; back off on errors."""
        delay, gone = 0.2, 0
        async with aiohttp.ClientSession() as session:
            while True:
                try:
                    version = await self.relist(session, emit)
                    await self.watch(session, version, emit)
                    delay, gone = 0.2, 0
                    continue  # the watch ended: list again
                except Gone:
                    gone += 1
                    log.info("simulated hardware watch too old, listing again", times=gone)
                    if gone == 1:
                        continue  # at once the first time; then back off
                except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
                    log.warning("simulated hardware unreachable", url=self.url, error=repr(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.backoff_max_s)

    async def relist(self, session: aiohttp.ClientSession, emit: Emit) -> str:
        version, docs = await self.list(session)
        at = self.clock()
        for doc in docs:
            self.tracker.apply(doc, at=at, emit=emit)
        self.tracker.keep_only({d.node for d in docs}, at=at, emit=emit)
        self.synced = True
        return version

    async def list(self, session: aiohttp.ClientSession) -> tuple[str, list[NodeHardware]]:
        async with session.get(self.url, timeout=aiohttp.ClientTimeout(total=60)) as resp:
            resp.raise_for_status()
            body = msgspec.json.decode(await resp.read(), type=_List)
        docs = [d for d in map(decode_node, body.items) if d is not None]
        return body.resourceVersion, docs

    async def watch(self, session: aiohttp.ClientSession, version: str, emit: Emit) -> None:
        params = {"watch": "1", "resourceVersion": version}
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
        async with session.get(self.url, params=params, timeout=timeout) as resp:
            if resp.status == 410:
                raise Gone
            resp.raise_for_status()
            async for line in _lines(resp):
                self._on_event(line, emit)

    def _on_event(self, line: bytes, emit: Emit) -> None:
        try:
            event = msgspec.json.decode(line, type=_Event)
        except msgspec.DecodeError as exc:
            log.warning("bad simulated hardware event, skipped", error=str(exc))
            return
        if event.type == "ERROR":
            with contextlib.suppress(msgspec.DecodeError):
                status = msgspec.json.decode(event.object)
                if isinstance(status, dict) and status.get("code") == 410:
                    raise Gone
            raise ValueError(f"simulated hardware watch error: {bytes(event.object)[:200]!r}")
        doc = decode_node(event.object)
        if doc is None:
            return
        at = self.clock()
        if event.type == "DELETED":
            self.tracker.delete(doc.node, at=at, emit=emit)
        else:
            self.tracker.apply(doc, at=at, emit=emit)


async def _lines(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """Newline-separated lines of a streamed body, whatever their length."""
    partial = b""
    async for chunk in resp.content.iter_any():
        *lines, partial = (partial + chunk).split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if partial.strip():
        yield partial
