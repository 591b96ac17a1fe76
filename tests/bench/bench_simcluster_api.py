"""simcluster API at full scale: 7,500 nodes and 100k pods.

Measures (1) time and resident memory to load the objects into the Store, (2) a full
LIST of 100k pods over HTTP (time, bytes), next to a raw msgspec encode of the same
dicts as the floor, and (3) watch event throughput to 4 HTTP watchers running in a
separate process (so their parsing does not share the server's event loop).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from typing import Any

import aiohttp
import msgspec

from baton.services.simcluster.api.server import ApiServer
from baton.services.simcluster.api.store import Store

NODES, PODS, WATCHERS, EVENTS = 7_500, 100_000, 4, 20_000

_WATCHER = r"""
import asyncio, sys, time, aiohttp
async def one(session, url, want):
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=None)) as resp:
        got = 0
        async for _ in resp.content:
            got += 1
            if got == want:
                return time.perf_counter()
async def main(url, want, n):
    async with aiohttp.ClientSession() as s:
        tasks = [asyncio.create_task(one(s, url, want)) for _ in range(n)]
        await asyncio.sleep(1.0)
        print("ready", flush=True)
        sys.stdin.readline()
        start = time.perf_counter()
        ends = await asyncio.gather(*tasks)
        print(max(ends) - start, flush=True)
asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def node(i: int) -> dict[str, Any]:
    gpus = {"cpu": "192", "memory": "2Ti", "nvidia.com/gpu": "8", "rdma/ib": "8"}
    return {
        "metadata": {
            "name": f"gpu-{i:05}",
            "labels": {
                "topology.kubernetes.io/zone": f"zone-{i // 2500}",
                "baton.io/block": f"b{i // 256}",
                "baton.io/rack": f"r{i // 32}",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "kubernetes.io/hostname": f"gpu-{i:05}",
            },
        },
        "spec": {"providerID": f"sim://gpu-{i:05}"},
        "status": {
            "capacity": gpus,
            "allocatable": gpus,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [{"type": "InternalIP", "address": f"10.{i // 65536}.0.1"}],
        },
    }


def pod(i: int) -> dict[str, Any]:
    job = i // 8
    return {
        "metadata": {
            "name": f"job{job}-w-{i % 8}",
            "namespace": f"team-{job % 20}",
            "labels": {
                "scheduling.x-k8s.io/pod-group": f"job{job}",
                "baton.io/team": f"team-{job % 20}",
            },
            "annotations": {"sim.baton.io/duration-seconds": "3600"},
        },
        "spec": {
            "schedulerName": "baton",
            "nodeName": f"gpu-{(i // 8) % NODES:05}",
            "containers": [
                {
                    "name": "main",
                    "image": "registry/train:1",
                    "resources": {
                        "limits": {"nvidia.com/gpu": "8"},
                        "requests": {"cpu": "96", "memory": "1Ti"},
                    },
                }
            ],
            "tolerations": [{"key": f"team-{job % 20}", "operator": "Exists"}],
        },
        "status": {"phase": "Running"},
    }


def load(store: Store) -> list[tuple[str, str]]:
    for t in range(20):
        store.create("namespaces", {"metadata": {"name": f"team-{t}"}})
    for i in range(NODES):
        store.create("nodes", node(i))
    for i in range(PODS):
        store.create("pods", pod(i))
    return [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in store.list("pods")[0]]


async def full_list(url: str) -> tuple[float, int, int]:
    async with aiohttp.ClientSession() as session:
        start = time.perf_counter()
        async with session.get(f"{url}/api/v1/pods") as resp:
            body = await resp.read()
        elapsed = time.perf_counter() - start
    return elapsed, len(body), len(msgspec.json.decode(body)["items"])


async def watch_throughput(url: str, store: Store, keys: list[tuple[str, str]]) -> float:
    rv = store.rv
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _WATCHER,
        f"{url}/api/v1/pods?watch=1&resourceVersion={rv}",
        str(EVENTS),
        str(WATCHERS),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdin is not None
    await proc.stdout.readline()  # "ready": all watches are open
    while len(store.watchers()) < WATCHERS:  # noqa: ASYNC110 - the store has no event for it
        await asyncio.sleep(0.05)
    proc.stdin.write(b"go\n")
    await proc.stdin.drain()
    for n in range(EVENTS):
        ns, name = keys[n % len(keys)]
        store.mutate("pods", ns, name, lambda p, n=n: p["metadata"]["labels"].update(tick=str(n)))
        if n % 500 == 0:
            await asyncio.sleep(0)
    seconds = float((await proc.stdout.readline()).decode())
    await proc.wait()
    return seconds


async def run() -> list[tuple[str, str]]:
    base = rss_mib()
    started = time.perf_counter()
    store = Store(history=EVENTS * 2)
    keys = load(store)
    load_s, mem = time.perf_counter() - started, rss_mib() - base
    objs = [o for o, _ in store.entries("pods", None)]
    t = time.perf_counter()
    raw = msgspec.json.encode(objs)
    encode_s = time.perf_counter() - t
    server = ApiServer(store)
    url = await server.start("127.0.0.1", 0)
    try:
        list_s, size, count = await full_list(url)
        assert count == PODS
        watch_s = await watch_throughput(url, store, keys)
    finally:
        await server.stop()
    return [
        ("load 7,500 nodes + 100k pods into the Store", f"{load_s:.1f} s, +{mem:.0f} MiB RSS"),
        ("full LIST of 100k pods over HTTP", f"{list_s:.2f} s, {size / 2**20:.0f} MiB"),
        (
            "raw baseline: msgspec encode of the same 100k dicts",
            f"{encode_s:.2f} s, {len(raw) / 2**20:.0f} MiB",
        ),
        (
            f"watch: {EVENTS:,} changes to {WATCHERS} HTTP watchers",
            f"{watch_s:.2f} s, {EVENTS * WATCHERS / watch_s:,.0f} events/s delivered",
        ),
    ]


def main() -> None:
    rows = asyncio.run(run())
    print(f"pid {os.getpid()}, Python {sys.version.split()[0]}\n")
    print("| measurement | result |\n|---|---|")
    for what, result in rows:
        print(f"| {what} | {result} |")


if __name__ == "__main__":
    main()
