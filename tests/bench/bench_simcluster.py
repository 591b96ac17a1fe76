"""simcluster's simulation at full scale: start time and memory at 7,500 nodes.

(1) ``baton sim --nodes 7500`` as a real process: seconds from spawn to its
``simcluster ready`` line (kubeconfig written, nodes served) and its resident memory
then, next to the floor of a process that only imports the same modules.
(2) In process: 100k bound pods through the simulated kubelets (admission against the
node's allocatable, Running with IPs and conditions): seconds until all run, and the
memory the pods and the kubelets' bookkeeping add; then again with the hardware feed
read (listed once, one watcher of every node drained as it goes), as when node agents
follow it. The API's own list and watch costs are in ``bench_simcluster_api``.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from baton.libs.runtime import tune_gc
from baton.services.simcluster.api.store import Store
from baton.services.simcluster.world.simulation import Simulation, build
from baton.services.simcluster.world.spec import Delays
from baton.services.simcluster.world.workload import Job, job_objects

NODES, PODS = 7_500, 100_000
ROOT = Path(__file__).parents[2]


def rss_mib(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def process_start() -> tuple[float, float, float, float]:
    """(seconds to ready, RSS MiB when ready, import-only seconds, import-only RSS MiB)."""
    with tempfile.TemporaryDirectory() as scratch:
        argv = [
            sys.executable,
            "-m",
            "baton.services.simcluster.main",
            "--nodes",
            str(NODES),
            "--listen",
            "127.0.0.1:0",
            "--kubeconfig",
            f"{scratch}/kubeconfig",
        ]
        start = time.perf_counter()
        proc = subprocess.Popen(
            argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            ready = time.perf_counter() - start
            assert line.startswith("simcluster ready"), line
            rss = rss_mib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(30)
    probe = (
        "import time, resource; t = time.perf_counter(); import baton.services.simcluster.main; "
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    floor = time.perf_counter() - start
    return ready, rss, floor, int(out[1]) / 1024


async def kubelets_at_scale(*, hardware: bool = False) -> tuple[float, float, float, float]:
    """(start seconds, start MiB, seconds for 100k pods to run, MiB they add); with
    ``hardware`` someone lists and watches the hardware feed all along."""
    tune_gc()  # as baton sim does
    gc.collect()
    before = rss_mib()
    t0 = time.perf_counter()
    store = Store(history=10_000)
    sim = build(store, nodes=NODES, delays=Delays(pod_start_s=0, termination_s=0))
    await sim.start()
    gc.freeze()
    started, start_mib = time.perf_counter() - t0, rss_mib() - before
    seen = [0]
    follower = asyncio.create_task(follow_hardware(sim, seen)) if hardware else None
    store.create("namespaces", {"metadata": {"name": "team-a"}})
    nodes = sim.node_names()
    pods = []
    for i in range(PODS):  # 13-14 pods a node: small CPU pods, so every one fits
        _, (pod,) = job_objects(Job(job_id=str(i), submit_s=0, gpus=1, duration_s=1e9, team="a"))
        pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1", "memory": "8Gi"}}
        pod["spec"]["nodeName"] = nodes[i % NODES]
        pods.append(pod)
    last = pods[-1]["metadata"]["name"]
    before = rss_mib()
    t0 = time.perf_counter()
    for pod in pods:
        store.create("pods", pod)
    while store.get("pods", "team-a", last).get("status", {}).get("phase") != "Running":  # noqa: ASYNC110
        await asyncio.sleep(0.05)  # start timers fire in order: the last one runs last
    phases = {p["status"]["phase"] for p in store.list("pods", namespace="team-a")[0]}
    assert phases == {"Running"}, phases
    if follower is not None:  # until the reader has every node's change
        sim.hardware.flush()
        while seen[0] < NODES:
            assert time.perf_counter() - t0 < 600, seen
            await asyncio.sleep(0.05)
        follower.cancel()
    elapsed = time.perf_counter() - t0
    del pods
    gc.collect()
    added = rss_mib() - before
    await sim.stop()
    return started, start_mib, elapsed, added


async def follow_hardware(sim: Simulation, seen: list[int]) -> None:
    """A reader of every node's hardware, as a fleet of agents would be."""
    rv, _ = sim.hardware.list()
    watcher = sim.hardware.watch(since=rv, node=None, capacity=10**7)
    try:
        while True:
            await watcher.wait(0.1)
            seen[0] += watcher.drain().count(b"\n")
    finally:
        sim.hardware.unwatch(watcher)


def main() -> None:
    ready, rss, floor_s, floor_mib = process_start()
    started, start_mib, elapsed, added = asyncio.run(kubelets_at_scale())
    _, _, hw_elapsed, hw_added = asyncio.run(kubelets_at_scale(hardware=True))
    print(f"## simcluster simulation at {NODES:,} nodes\n")
    print("| measurement | result |")
    print("|---|---|")
    print(
        f"| `baton sim --nodes {NODES}`: spawn to ready line | {ready:.2f} s, {rss:.0f} MiB RSS |"
    )
    print(
        f"| floor: a process that only imports simcluster | {floor_s:.2f} s, {floor_mib:.0f} MiB |"
    )
    print(
        f"| in process: Simulation.start() ({NODES:,} nodes + MachineDeployment) | "
        f"{started:.2f} s, +{start_mib:.0f} MiB |"
    )
    print(
        f"| {PODS:,} bound pods created until all admitted by kubelets | {elapsed:.2f} s "
        f"({PODS / elapsed:,.0f} pods/s), +{added:.0f} MiB |"
    )
    print(
        f"| the same with the hardware feed listed and watched (all nodes) | {hw_elapsed:.2f} s "
        f"({PODS / hw_elapsed:,.0f} pods/s), +{hw_added:.0f} MiB |"
    )


if __name__ == "__main__":
    main()
