"""The node agent against a real GPU: NVML as the driver answers it, and through NATS.

    python -m tests.bench gpu_node        # on a machine with an NVIDIA driver

What it reads and times, per GPU: which report fields the driver has (a field it does
not have is absent, not an error), which failed, one NVML poll of every GPU (the agent
polls every ``interval_s``), and a process using the GPU (PyTorch, where installed) as
the agent sees it; where the GPU sits (PCIe root, NUMA node) and its MIG mode and
instances, checked against ``nvidia-smi`` and sysfs read apart from the agent. Xid
events: whether the driver lets the agent wait for them. Then
the agent itself, ``baton agent --node <this host>``, against a nats-server started
here: the first ``GpuReport`` it publishes, taken off the bus and decoded. On a machine
without a driver it says why (the agent's own words) and measures nothing: the suite's
tests of the NVML decoding (tests/unit/test_agent_nvml.py) run everywhere.
"""

from __future__ import annotations

import asyncio
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from baton.libs.bus import Bus
from baton.proto import telemetry
from baton.proto.codec import decode
from baton.services.agent.core.readings import Gpus
from baton.services.agent.nvml import FIELDS, Nvml
from tests.support.nats import running_nats

ROOT = Path(__file__).resolve().parents[2]
POLLS = 50
REPORT_WITHIN_S = 60.0
# A process that holds 2 GiB of GPU memory and keeps the GPU busy until its stdin closes.
LOAD = """
import sys, torch
held = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
a = torch.randn(4096, 4096, device="cuda")
b = a @ a
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.read()
"""


def _gpus(nvml: Nvml) -> Gpus:
    readings = [r for r in nvml.poll(time.time()) if isinstance(r, Gpus)]
    return readings[-1]


def _fields(status: telemetry.GpuStatus) -> tuple[list[str], list[str]]:
    """The report's fields with a value, and those without: not supported by the driver,
    or (``recovery_action``, where "" is also "none asked for") nothing to say."""
    names = [*FIELDS, "temperature_c", "row_remap_banks_full"]
    had = [n for n in names if getattr(status, n) not in (None, "")]
    return had, [n for n in names if n not in had]


def _load() -> subprocess.Popen[str] | None:
    """A GPU process (PyTorch), or None where PyTorch is not installed or fails."""
    try:
        child = subprocess.Popen([sys.executable, "-c", LOAD], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)  # fmt: skip
    except OSError:
        return None
    assert child.stdout is not None
    if child.stdout.readline().strip() != "ready":
        child.kill()
        child.wait(timeout=30)
        return None
    return child


def _smi(*args: str) -> list[str]:
    """``nvidia-smi ARGS`` lines; [] where it is missing or fails."""
    try:
        done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return done.stdout.splitlines() if done.returncode == 0 else []


def devices(nvml: Nvml) -> None:
    """The agent's device report against what nvidia-smi and ``readlink -f`` say, read
    without the agent's code: UUIDs, PCIe roots, MIG mode and instances."""
    gpus = _gpus(nvml)
    smi = {}
    for line in _smi("--query-gpu=uuid,pci.bus_id,mig.mode.current", "--format=csv,noheader"):
        uuid, bus, mode = (part.strip() for part in line.split(","))
        smi[uuid] = (bus, mode)
    listed = _smi("-L")  # GPUs and, indented under each, its MIG instances
    mig_uuids = {m.group(1) for line in listed if (m := re.search(r"UUID: (MIG-[^)\s]+)", line))}
    print("\n| GPU | agent: PCIe root / NUMA | readlink -f | agent: MIG mode | nvidia-smi | "
          "agent: MIG instances | agree |\n|---|---|---|---|---|---|---|")  # fmt: skip
    for sample in gpus.gpus:
        st = sample.status
        bus, mode = smi.get(st.uuid, ("?", "?"))
        address = bus.lower()[4:] if len(bus) > 12 else bus.lower()  # 00000000:18:00.0
        path = os.path.realpath(f"/sys/bus/pci/devices/{address}")
        root = next(
            (p for p in path.split("/") if re.fullmatch(r"pci[0-9a-f]{4}:[0-9a-f]{2}", p)), ""
        )
        mine = {m.uuid for m in st.mig}
        agree = (st.uuid in smi and st.pcie_root == root
                 and (st.mig_enabled is True) == (mode == "Enabled")
                 and mine <= mig_uuids)  # fmt: skip
        print(f"| {st.index} | {st.pcie_root} / {st.numa_node} | {root} | {st.mig_enabled} | "
              f"{mode} | {', '.join(f'{m.profile} {m.uuid[:12]}…' for m in st.mig) or '-'} | "
              f"{'yes' if agree else '**no**'} |")  # fmt: skip
    print(
        f"\nnvidia-smi -L lists {len(mig_uuids)} MIG instance(s); the agent reports "
        f"{sum(len(s.status.mig) for s in gpus.gpus)}."
    )


def readings(nvml: Nvml) -> None:
    gpus = _gpus(nvml)
    print(f"{gpus.found} GPU(s) found on {platform.node()}\n")
    print("| GPU | uuid | bus | temperature | fields with a value | without | failed |")
    print("|---|---|---|---|---|---|---|")
    for sample in gpus.gpus:
        s = sample.status
        had, absent = _fields(s)
        failed = ", ".join(s.failed) or "-"
        print(f"| {s.index} | {s.uuid[:16]}… | {s.bus_id} | {s.temperature_c} C "
              f"| {', '.join(had)} | {', '.join(absent) or '-'} | {failed} |")  # fmt: skip
    print("\nValues read:", ", ".join(
        f"{k}={v}" for k, v in msgspec.structs.asdict(gpus.gpus[0].status).items()
        if k not in ("uuid", "bus_id") and v not in (None, "", ())))  # fmt: skip

    times = []
    for _ in range(POLLS):
        started = time.perf_counter()
        _gpus(nvml)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    print(f"\n| one NVML poll of every GPU ({POLLS} polls) | ms |\n|---|---|")
    print(f"| median | {statistics.median(times):.2f} |\n| p99 | {times[int(POLLS * 0.99)]:.2f} |")
    print(f"| per GPU, median | {statistics.median(times) / max(gpus.found or 1, 1):.2f} |\n")

    load = _load()
    if load is None:
        print("A GPU process: not tried (PyTorch not installed or failed to start)\n")
    else:
        try:
            seen = [(s.status.index, p) for s in _gpus(nvml).gpus for p in s.processes]
            mine = [f"GPU {i}: {p.used_mib} MiB" for i, p in seen if p.pid == load.pid]
            print(f"A GPU process (pid {load.pid}, 2 GiB held): the agent sees "
                  f"{'; '.join(mine) or 'nothing of it'}; all processes seen: "
                  f"{[(i, p.pid, p.used_mib) for i, p in seen]}\n")  # fmt: skip
        finally:
            load.communicate("", timeout=60)

    waited = nvml.wait_xids(timeout_ms=500, at=time.time)
    print("Xid events:", "the agent waits on NVML's event set (no Xid in 0.5 s)"
          if waited == [] else f"cannot be waited on here ({waited!r}); the kernel log "
          "remains the agent's source of Xids")  # fmt: skip


async def end_to_end(node: str) -> None:
    """``baton agent`` against a real nats-server: its first GpuReport off the bus."""
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster="c1", name="bench-gpu-node")
        try:
            await bus.ensure_streams()
            got: asyncio.Queue[bytes] = asyncio.Queue()

            async def take(msg: Any) -> None:
                await got.put(msg.data)

            await bus.nc.subscribe(telemetry.wildcard("c1", "gpu"), cb=take)
            env = {**os.environ, "BATON_AGENT_NATS_URL": url, "BATON_AGENT_SHAPE": "false",
                   "BATON_AGENT_INTERVAL_S": "1", "BATON_AGENT_OPS_PORT": "0"}  # fmt: skip
            started = time.monotonic()
            agent = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "baton.services.cli", "agent", "--node", node,
                env=env, cwd=ROOT, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            try:
                data = await asyncio.wait_for(got.get(), REPORT_WITHIN_S)
            except TimeoutError:
                agent.terminate()
                _, err = await agent.communicate()
                print(f"\nbaton agent: no GpuReport on the bus within {REPORT_WITHIN_S:.0f} s; "
                      f"its log:\n{err.decode()[-2000:]}")  # fmt: skip
                return
            took = time.monotonic() - started
            report: telemetry.GpuReport = decode(data, telemetry.GpuReport)
            agent.terminate()
            await agent.wait()
            print(f"\n`baton agent --node {node}` against nats-server: first GpuReport "
                  f"{took:.1f} s after start (process start included), {len(report.gpus)} "
                  f"GPU(s), {len(data)} bytes:\n\n    {data.decode()[:600]}")  # fmt: skip
        finally:
            await bus.close()


def main() -> None:
    nvml = Nvml(expected=None)
    _gpus(nvml)
    if nvml.reason:
        print(f"No GPU here, nothing measured: {nvml.reason}")
        return
    try:
        readings(nvml)
        devices(nvml)
    finally:
        nvml.close()
    asyncio.run(end_to_end(platform.node().lower().replace("_", "-") or "gpu-node"))


if __name__ == "__main__":
    main()
