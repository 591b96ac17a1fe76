"""What an operator looks at, on a running `baton up` (every piece its own process):
every service's /metrics follows the naming rules, `baton status` prints the teams and
services from the bus, and `baton up --prometheus` runs a real Prometheus that
scrapes them all and loads the alert rules (skipped where Prometheus is not installed)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from baton.services.cli.stack import SERVICES
from tests.metrics_rules import problems
from tests.pipeline import until_sync

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TEAMS = {
    "teams": [
        {"name": "a", "namespaces": ["team-a"], "pools": ["gpu"], "lend": True},
        {"name": "b", "namespaces": ["team-b"], "borrow": {"gpus": 64}},
        {"name": "c", "namespaces": ["team-c"], "borrow": {"gpus": 32}},
    ]
}
PROMETHEUS = shutil.which("prometheus") is not None


@dataclass
class Up:
    env: dict[str, str]  # what --endpoints-file wrote
    ops: dict[str, int]
    sim: str  # simcluster's base URL
    process: subprocess.Popen[str]


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
        return body.decode()


def scrape(url: str) -> str | None:
    try:
        return get(url)
    except OSError:
        return None


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    tmp = tmp_path_factory.mktemp("up")
    teams, endpoints = tmp / "teams.yaml", tmp / "endpoints.env"
    teams.write_text(yaml.safe_dump(TEAMS))
    argv = [sys.executable, "-m", "baton.services.cli", "up", "--nodes", "16", "--workload",
            "synthetic", "--teams", str(teams), "--endpoints-file", str(endpoints),
            "--duration", "240", *(["--prometheus"] if PROMETHEUS else [])]  # fmt: skip
    log = (tmp / "up.log").open("w")
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        until_sync(lambda: endpoints.exists() or process.poll() is not None,
                   within=120, what="baton up to write its endpoints")  # fmt: skip
        assert process.poll() is None, (tmp / "up.log").read_text()[-3000:]
        env = dict(line.split("=", 1) for line in endpoints.read_text().splitlines())
        ops = {name: int(port) for name, _, port in
               (item.partition(":") for item in env["BATON_UP_OPS_PORTS"].split(","))}  # fmt: skip
        kubeconfig = yaml.safe_load(Path(env["KUBECONFIG"]).read_text())
        sim = kubeconfig["clusters"][0]["cluster"]["server"]
        yield Up(env=env, ops=ops, sim=sim, process=process)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
            log.close()
    output = (tmp / "up.log").read_text()
    assert process.returncode == 0, output[-3000:]


def test_every_service_exposes_metrics_by_the_naming_rules(up: Up) -> None:
    assert set(up.ops) == set(SERVICES)
    pages = {name: f"http://127.0.0.1:{port}/metrics" for name, port in up.ops.items()}
    pages["simcluster"] = f"{up.sim}/metrics"
    gang = pages["gang"]

    def placed_something() -> bool:
        page = scrape(gang) or ""
        return any(line.startswith("baton_gang_wait_seconds_count{") and not line.endswith(" 0.0")
                   for line in page.splitlines())  # fmt: skip

    until_sync(placed_something, within=120, what="the gang service to place a gang")
    found = []
    for service, url in pages.items():
        page = scrape(url)
        assert page is not None, f"{service}: {url} does not answer"
        found += problems(page, service=service)
    assert found == [], "\n".join(found)
    admission = scrape(pages["admission"]) or ""
    assert 'baton_admission_quota_gpus{team="a"}' in admission
    rack = 'baton_gang_rack_gpus{rack="gpu-rack-000",state="allocated"}'
    until_sync(lambda: rack in (scrape(gang) or ""), within=30, what="GPUs per rack (every 2 s)")


def test_baton_status_prints_teams_and_services_from_the_bus(up: Up) -> None:
    wanted = ("BATON_NATS_URL", "BATON_NATS_NKEY_SEED_FILE")  # as the README says
    env = {**os.environ, **{k: up.env[k] for k in wanted}}
    runs: list[subprocess.CompletedProcess[str]] = []

    def status_has_teams() -> bool:  # run first in its module, the teams may not be out yet
        runs.append(subprocess.run([sys.executable, "-m", "baton.services.cli", "status"],
                                   env=env, capture_output=True, text=True, timeout=60,
                                   check=False))  # fmt: skip
        if "no Baton streams" in runs[-1].stderr:
            return False  # the actuator, their owner, has not made them yet: ask again
        return runs[-1].returncode != 0 or "\n  a  quota" in runs[-1].stdout

    until_sync(status_has_teams, within=90, what="baton status to print team a's quota")
    done = runs[-1]
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    teams = [line.split()[0] for line in lines[lines.index("teams") + 1 :][:3]]
    assert teams == ["a", "b", "c"], done.stdout
    assert any(line.startswith("  a  quota 128  used ") for line in lines), done.stdout
    for service in SERVICES:
        assert f"{service}:seen" in done.stdout, done.stdout
    assert "nodes 16 (16 ready)" in done.stdout


@pytest.mark.skipif(not PROMETHEUS, reason="prometheus not installed (apt-get install prometheus)")
def test_prometheus_scrapes_every_service_and_loads_the_rules(up: Up) -> None:
    base = up.env["BATON_PROMETHEUS_URL"]
    jobs = {f"baton-{s}" for s in (*SERVICES, "simcluster")}

    def targets_up() -> bool:
        page = scrape(f"{base}/api/v1/targets")
        if page is None:
            return False
        active = json.loads(page)["data"]["activeTargets"]
        return {t["labels"]["job"] for t in active if t["health"] == "up"} == jobs

    until_sync(targets_up, within=90, what="Prometheus to scrape every service")

    def query(expr: str) -> list[dict[str, Any]]:
        url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        result: list[dict[str, Any]] = json.loads(get(url))["data"]["result"]
        return result

    services = {r["metric"]["service"] for r in query("baton_build_info")}
    assert services == {*SERVICES, "simcluster"}
    assert query("baton_runner_caught_up == 1"), "no runner reports it caught up"
    groups = json.loads(get(f"{base}/api/v1/rules"))["data"]["groups"]
    assert {g["name"] for g in groups} >= {"baton-services", "baton-scheduling"}
