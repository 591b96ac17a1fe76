"""`baton up` as a user runs it: every piece as its own process, the admission webhook
installed in the simulated API server, and work placed."""

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.nats import running_nats
from tests.support.sim import running_sim

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def test_baton_up_runs_the_synthetic_workload_to_completion(tmp_path: Path) -> None:
    endpoints = tmp_path / "endpoints.env"
    result = subprocess.run(
        [sys.executable, "-m", "baton.services.cli", "up", "--nodes", "16", "--workload",
         "synthetic", "--duration", "40", "--endpoints-file", str(endpoints),
         "--store", str(tmp_path / "jetstream")],  # keeps the run directory: its logs
        capture_output=True, text=True, timeout=170, check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]

    written = dict(line.split("=", 1) for line in endpoints.read_text().splitlines())
    assert re.match(r"nats://127\.0\.0\.1:\d+$", written["BATON_NATS_URL"])
    seed = Path(written["BATON_NATS_NKEY_SEED_FILE"])  # auth on: the admin's nkey
    assert seed.read_text().startswith("SU") and oct(seed.stat().st_mode & 0o777) == "0o600"
    assert written["BATON_CLUSTER"] == "c1"
    logs = re.search(r"logs in (\S+)", output)
    assert logs is not None, output[-3000:]
    refused = [line for line in (Path(logs[1]) / "nats.log").read_text().splitlines()
               if "Violation" in line]  # fmt: skip
    assert refused == []  # every service did its work within its generated NATS rights

    last = output.rsplit("baton up ", 1)[-1]  # the final status block
    assert re.search(r"nodes\s+16 \(16 ready", last), last
    phases = dict(re.findall(r"(pending|running|succeeded|failed) (\d+)", last))
    assert int(phases["running"]) + int(phases["succeeded"]) > 0, last
    assert int(phases["failed"]) == 0, last
    for service in ("bridge", "actuator", "admission", "gang", "bandwidth", "agent"):
        assert f"{service}:ok" in last, last
    assert re.search(r"egress\s+default \d+%", last), last  # each team's share and use
    assert "placement.placed.v1" in output  # decisions scrolled past as they happened
    assert "admission webhook registered" in output  # pods went through the real webhook
    assert "baton up: stopped" in output


async def test_baton_up_runs_against_an_existing_cluster_and_nats(tmp_path: Path) -> None:
    """--kubeconfig and --nats: no simcluster or nats-server of its own, no webhook install."""
    async with running_nats() as url, running_sim(nodes=8) as sim:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "baton.services.cli", "up", "--kubeconfig", str(sim.kubeconfig),
            "--nats", url, "--services", "bridge,gang,actuator", "--duration", "12",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    output = out.decode()
    assert process.returncode == 0, output[-3000:]
    last = output.rsplit("baton up ", 1)[-1]
    assert re.search(r"nodes\s+8 \(8 ready", last), last
    assert "services  bridge:ok  gang:ok  actuator:ok" in last  # none of its own nats/sim
    assert "webhook" not in output  # a real cluster's webhooks are the admin's to install


async def test_baton_up_removes_its_run_directory_unless_store_is_given(tmp_path: Path) -> None:
    async with running_nats() as url, running_sim(nodes=2) as sim:
        for extra in ([], ["--store", str(tmp_path / "js")]):
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "baton.services.cli", "up", "--kubeconfig",
                str(sim.kubeconfig), "--nats", url, "--services", "bridge", "--duration", "8",
                *extra, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
            out, _ = await asyncio.wait_for(process.communicate(), timeout=120)
            output = out.decode()
            assert process.returncode == 0, output[-3000:]
            logs = re.search(r"logs in (\S+)", output)
            assert logs is not None, output[-3000:]
            run_dir = Path(logs[1]).parent
            if extra:
                assert run_dir.is_dir() and f"kept {run_dir}" in output
            else:
                assert not run_dir.exists() and f"removed {run_dir}" in output


async def test_a_duration_shorter_than_start_up_still_ends_with_a_status(tmp_path: Path) -> None:
    """--duration 0: the first status is the last; no simcluster of its own to blame."""
    async with running_nats() as url, running_sim(nodes=2) as sim:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "baton.services.cli", "up", "--kubeconfig", str(sim.kubeconfig),
            "--nats", url, "--services", "bridge", "--duration", "0",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    output = out.decode()
    assert process.returncode == 0, output[-3000:]
    assert "Traceback" not in output and "services  bridge:" in output, output[-3000:]


async def test_a_recorded_baton_up_run_replays_identically_for_gang_and_admission(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Record what `baton up` did (HISTORY), then replay it into fresh cores: the same
    placements, verdicts, admissions and actions, from the same code path as live."""
    from baton.services.cli import recording, replay
    from baton.services.simcluster.world.workload import Job

    async with running_nats() as url, running_sim(nodes=8) as sim:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "baton.services.cli", "up", "--kubeconfig", str(sim.kubeconfig),
            "--nats", url, "--services", "bridge,gang,actuator,admission", "--duration", "30",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        assert process.stdout is not None
        every = "".join(f"(?=.* {name}:ok)" for name in ("bridge", "gang", "actuator", "admission"))
        started = await lines_until(
            process.stdout, f"^services{every}", within=90,
            what="every service ready (caught up: /readyz in the status block)",
        )  # fmt: skip
        jobs = [
            Job(job_id=f"r{i}", submit_s=i * 0.5, gpus=gpus, duration_s=4.0, team="t1")
            for i, gpus in enumerate((8, 16, 32, 8, 64, 16, 8, 32))
        ]
        sim.cluster.replay(jobs)
        out, _ = await asyncio.wait_for(process.communicate(), timeout=150)
        assert process.returncode == 0, (started + out.decode())[-3000:]
        path = tmp_path / "up.jsonl"
        with path.open("wb") as file:
            assert await recording.record(url, cluster="c1", out=file) > 0
    capsys.readouterr()
    for service in ("gang", "admission"):
        code = replay.run(["--from", str(path), "--service", service, "--compare", "--quiet"])
        captured = capsys.readouterr()
        text = captured.out
        assert code == 0, f"{service}:\n{text}\n{captured.err}"
        assert "compare: identical" in text, text
        checked = re.search(r"identical \((\d+) decisions", text)
        assert checked is not None and int(checked.group(1)) > 0, text


async def lines_until(
    stream: asyncio.StreamReader, pattern: str, *, what: str, within: float
) -> str:
    """What ``stream`` says up to the first line matching ``pattern``; fail naming
    ``what`` when it ends or ``within`` seconds pass first."""
    lines: list[str] = []
    why = f"timed out after {within}s"
    try:
        async with asyncio.timeout(within):
            while not lines or not re.search(pattern, lines[-1]):
                line = await stream.readline()
                if not line:
                    why = "the output ended"
                    break
                lines.append(line.decode())
            else:
                return "".join(lines)
    except TimeoutError:
        pass
    raise AssertionError(f"{why} waiting for {what}:\n{''.join(lines)[-3000:]}")
