"""The golden replay test: the real bridge, gang and actuator on simcluster make decisions;
the bus's HISTORY is recorded; a fresh gang core fed the recording decides the same.

Scenario on 8 nodes of 8 GPUs: two gangs that cannot both fit (one waits, with an
unschedulable verdict, then runs), a small one beside them, then a long gang whose
node the health service drains (restarted whole, recreated, placed again).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import nats
import pytest

from baton.proto import subjects
from baton.services.cli import recording, replay
from baton.services.simcluster.world.workload import Job
from tests.pipeline import drain_as_health_does, running_services, until
from tests.support.nats import running_nats
from tests.support.sim import Sim, running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(180)]
C = "c1"
NS = "team-t1"


def pods(sim: Sim, job: str) -> list[dict[str, Any]]:
    objs, _ = sim.store.list("pods", namespace=NS, label_selector=f"sim.baton.io/job={job}")
    return list(objs)


def bound(sim: Sim, job: str) -> int:
    return sum(1 for p in pods(sim, job) if p["spec"].get("nodeName"))


def finished(sim: Sim, job: str) -> bool:
    phases = [p.get("status", {}).get("phase") for p in pods(sim, job)]
    return bool(phases) and all(phase in ("Succeeded", "Failed") for phase in phases)


async def history_settled(url: str) -> None:
    """Wait until HISTORY's sources run and have copied everything the sources hold.

    K8S keeps one message per object: one updated again before HISTORY's source
    starts is never copied, and a replay would start from a different cluster."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        deadline = time.monotonic() + 20
        while True:
            info = await js.stream_info(subjects.stream_name(C, "history"))
            if all(s.lag == 0 and s.active != -1 for s in info.sources or []):
                return
            assert time.monotonic() < deadline, "HISTORY never caught up with its sources"
            await asyncio.sleep(0.1)
    finally:
        await nc.close()


async def run_scenario(url: str, sim: Sim) -> None:
    async with running_services(url, sim):
        jobs = [
            Job(job_id="a", submit_s=0, gpus=32, duration_s=2.0, team="t1"),
            Job(job_id="b", submit_s=0, gpus=48, duration_s=2.0, team="t1"),
            Job(job_id="c", submit_s=0, gpus=8, duration_s=1.0, team="t1"),
        ]
        sim.cluster.replay(jobs)
        await until(lambda: all(finished(sim, j) for j in "abc"), within=60, what="a, b, c")
        sim.cluster.replay([Job(job_id="r", submit_s=0, gpus=16, duration_s=3600, team="t1")])
        await until(lambda: bound(sim, "r") == 2, within=30, what="r bound")
        old = {p["metadata"]["uid"] for p in pods(sim, "r")}
        drain_as_health_does(sim, sorted(p["spec"]["nodeName"] for p in pods(sim, "r"))[0])

        def replaced() -> bool:
            now = pods(sim, "r")
            fresh = {p["metadata"]["uid"] for p in now} - old
            return len(fresh) == len(now) == 2 and bound(sim, "r") == 2

        await until(replaced, within=60, what="r restarted and placed again")
        await asyncio.sleep(0.5)  # let the last results and pod updates land
    await history_settled(url)


async def test_replaying_a_recorded_session_reproduces_every_gang_decision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "session.jsonl"
    async with running_nats() as url, running_sim(nodes=8) as sim:
        await run_scenario(url, sim)
        with path.open("wb") as out:
            written = await recording.record(url, cluster=C, out=out)
    assert written > 0
    text = path.read_text()
    assert '"runner.tick.v1"' in text and '"placement.restarted.v1"' in text
    assert '"runner.started.v1"' in text

    code = replay.run(["--from", str(path), "--compare"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "compare: identical" in out
    assert replay.run(["--from", str(path)]) == 0  # the listing (--compare shows differences)
    out = capsys.readouterr().out
    expected = (
        *("placed team-t1/job-a", "placed team-t1/job-b", "unschedulable team-t1/job-"),
        *("restarted team-t1/job-r", "-> bind-gang", "-> recreate-pod"),
    )
    for what in expected:
        assert what in out, what
    assert "as the live runner fed them" in out

    # Without the recorded ticks, the same file does not replay: the ticks are inputs.
    no_ticks = tmp_path / "no-ticks.jsonl"
    no_ticks.write_text("".join(ln for ln in text.splitlines(True) if "runner.tick.v1" not in ln))
    assert replay.run(["--from", str(no_ticks), "--compare", "--quiet"]) == 1
    assert "DIVERGED at decision 1" in capsys.readouterr().out
