"""`baton up` as a user runs it: every piece as its own process, the admission webhook
installed in the simulated API server, and work placed."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def test_baton_up_runs_the_synthetic_workload_to_completion(tmp_path: Path) -> None:
    endpoints = tmp_path / "endpoints.env"
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "up", "--nodes", "16", "--workload", "synthetic",
         "--duration", "40", "--endpoints-file", str(endpoints)],
        capture_output=True, text=True, timeout=170, check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]

    written = dict(line.split("=", 1) for line in endpoints.read_text().splitlines())
    assert written["BATON_NATS_URL"].startswith("nats://127.0.0.1:")
    assert written["BATON_CLUSTER"] == "c1"

    last = output.rsplit("baton up ", 1)[-1]  # the final status block
    assert re.search(r"nodes\s+16 \(16 ready", last), last
    phases = dict(re.findall(r"(pending|running|succeeded|failed) (\d+)", last))
    assert int(phases["running"]) + int(phases["succeeded"]) > 0, last
    assert int(phases["failed"]) == 0, last
    for service in ("bridge", "actuator", "admission", "gang"):
        assert f"{service}:ok" in last, last
    assert "placement.placed.v1" in output  # decisions scrolled past as they happened
    assert "admission webhook registered" in output  # pods went through the real webhook
    assert "baton up: stopped" in output
