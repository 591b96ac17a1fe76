"""A small HTTP server with simcluster's simulated-hardware endpoint, for agent tests until
simcluster serves it: ``GET /sim/v1/hardware`` (list) and ``?watch=1&resourceVersion=N``
(JSON lines; 410 when told to, as when N is older than the history kept).

    async with serving_hardware() as hw:
        hw.put(doc)            # ADDED or MODIFIED, a new resourceVersion
        hw.delete("gpu-1")     # DELETED
        hw.expire_watches()    # open watches end, and the next watch gets 410
        hw.error_410()         # an in-stream ERROR event with code 410 (Kubernetes style)
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

PATH = "/sim/v1/hardware"


class FakeHardware:
    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.events: list[tuple[int, dict[str, Any]]] = []  # (version, watch event)
        self.gone_next = False  # answer the next watch 410
        self.generation = 0  # bumped to end the open watches
        self.lists = 0
        self.watches = 0
        self.url = ""
        self._changed = asyncio.Event()
        self._closing = False

    def put(self, doc: dict[str, Any]) -> None:
        kind = "MODIFIED" if doc["node"] in self.docs else "ADDED"
        self.docs[doc["node"]] = copy.deepcopy(doc)
        self._push({"type": kind, "object": copy.deepcopy(doc)})

    def delete(self, node: str) -> None:
        self._push({"type": "DELETED", "object": self.docs.pop(node)})

    def error_410(self) -> None:
        self._push(
            {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
        )

    def expire_watches(self) -> None:
        self.gone_next = True
        self.generation += 1
        self._notify()

    def _push(self, event: dict[str, Any]) -> None:
        self.version += 1
        self.events.append((self.version, event))
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") == "1":
            return await self._watch(request, int(request.query.get("resourceVersion", "0")))
        self.lists += 1
        items = list(self.docs.values())
        return web.json_response({"resourceVersion": str(self.version), "items": items})

    async def _watch(self, request: web.Request, since: int) -> web.StreamResponse:
        self.watches += 1
        if self.gone_next:
            self.gone_next = False
            return web.json_response({"kind": "Status", "code": 410}, status=410)
        response = web.StreamResponse()
        response.content_type = "application/json"
        await response.prepare(request)
        generation = self.generation
        while not self._closing and self.generation == generation:
            changed = self._changed
            for version, event in [e for e in self.events if e[0] > since]:
                await response.write(json.dumps(event).encode() + b"\n")
                since = version
            await changed.wait()
        return response

    async def close(self) -> None:
        self._closing = True
        self._notify()


@contextlib.asynccontextmanager
async def serving_hardware() -> AsyncIterator[FakeHardware]:
    hardware = FakeHardware()
    app = web.Application()
    app.router.add_get(PATH, hardware.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    hardware.url = f"http://127.0.0.1:{port}"
    try:
        yield hardware
    finally:
        await hardware.close()
        await runner.cleanup()


XID_79 = (
    "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
)


def gpu_document(node: str, index: int) -> dict[str, Any]:
    counters = ("ecc_volatile_sbe", "ecc_volatile_dbe", "ecc_aggregate_sbe", "ecc_aggregate_dbe")
    return {
        "index": index,
        "uuid": f"GPU-{node}-{index}",
        "bus_id": f"00000000:{0x18 + 0x23 * index:02X}:00.0",  # GPU 1 is 0000:3b:00
        "present": True,
        "temperature_c": 40,
        **dict.fromkeys(counters, 0),
        "retired_pages_pending": False,
        "retired_pages": 0,
        "row_remap_pending": False,
        "row_remap_failure": False,
        "nvlink_errors": 0,
        "recovery_action": "",
        "processes": [],
    }


def node_document(node: str, *, gpus: int = 2, seq: int = 10, **overrides: Any) -> dict[str, Any]:
    """A healthy simulated node in simcluster's wire shape."""
    doc: dict[str, Any] = {
        "node": node,
        "up": True,
        "expected_gpus": gpus,
        "gpus": [gpu_document(node, i) for i in range(gpus)],
        "disks": [{"mount": "/", "used_ratio": 0.3, "read_only": False}],
        "nics": [{"name": "ib0", "up": True}, {"name": "eth0", "up": True}],
        "pods": [],
        "kernel_log": [{"seq": seq, "line": "nvidia-nvlink: Nvlink Core is being initialized"}],
        "kernel_log_seq": seq,
    }
    doc.update(overrides)
    return doc
