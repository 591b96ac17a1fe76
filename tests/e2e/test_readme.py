"""The README's commands, run as written (tests/readme.py lists which runs where).

Each runs through bash in a scratch directory that holds what a clone holds for it
(``deploy/``, ``.venv`` as this interpreter's environment), with that environment's
``bin`` first on PATH, as after ``. .venv/bin/activate``. A line ending in ``&`` is
started and left running until the scenario ends, once it is ready.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from baton.libs.runtime.ops import OPS_PORTS
from tests.pipeline import until_sync
from tests.readme import INSTALL, ROOT, scenario

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

VENV = Path(sys.executable).parent.parent
SERVICES = ("bridge", "actuator", "admission", "gang")


class Shell:
    """Runs README lines in ``cwd`` as a user's shell would, remembering ``export``s."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.env = {**os.environ, "PATH": f"{VENV / 'bin'}:{os.environ['PATH']}"}
        for key in [k for k in self.env if k.startswith("BATON_") or k == "KUBECONFIG"]:
            del self.env[key]
        self.background: list[subprocess.Popen[bytes]] = []
        (cwd / "deploy").symlink_to(ROOT / "deploy")
        (cwd / ".venv").symlink_to(VENV)

    def run(self, line: str, *, timeout: float = 120) -> str:
        if line.startswith("export "):
            for pair in line.removeprefix("export ").split():
                key, _, value = pair.partition("=")
                self.env[key] = value
            return ""
        done = self.attempt(line, timeout=timeout)
        assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    def attempt(self, line: str, *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", line], cwd=self.cwd, env=self.env, text=True,
                              capture_output=True, timeout=timeout, check=False)  # fmt: skip

    def start(self, line: str, log: str) -> subprocess.Popen[bytes]:
        with (self.cwd / log).open("wb") as out:
            process = subprocess.Popen(["bash", "-c", line], cwd=self.cwd, env=self.env,
                                       stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)  # fmt: skip
        self.background.append(process)
        return process

    def stop_all(self) -> None:
        for process in reversed(self.background):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in reversed(self.background):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[Shell]:
    sh = Shell(tmp_path)
    try:
        yield sh
    finally:
        sh.stop_all()


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def ready(port: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    return check


def metric(port: int, name: str) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            page = r.read().decode()
    except OSError:
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in page.splitlines()
               if line.startswith(name) and not line.startswith("#"))  # fmt: skip


def test_running_the_pieces_by_hand_then_tail_and_replay(shell: Shell) -> None:
    """Each service on its own default ops port, side by side; the webhook registered;
    the bus read with baton tail; the session recorded and replayed."""
    services = ("bridge", "actuator", "gang", "admission", "bandwidth", "health", "agent",
                "reporter")  # fmt: skip
    for port in (4222, 6443, 8443, *(OPS_PORTS[s] for s in services)):
        assert not port_open(port), f"port {port} is taken: the README's commands need it"
    waits: dict[str, tuple[Callable[[], bool], str]] = {
        "nats-server": (lambda: port_open(4222), "nats-server on 4222"),
        "baton sim ": (lambda: (shell.cwd / "kc").exists(), "simcluster's kubeconfig"),
        "baton bridge": (ready(OPS_PORTS["bridge"]), "the bridge's /readyz on 9105"),
        "baton actuator": (ready(OPS_PORTS["actuator"]), "the actuator's /readyz on 9106"),
        "baton gang": (ready(OPS_PORTS["gang"]), "gang's /readyz on 9107"),
        "baton reporter": (ready(OPS_PORTS["reporter"]), "the reporter's /readyz on 9113"),
        "BATON_ADMISSION": (ready(OPS_PORTS["admission"]), "admission's /readyz on 9108"),
        "baton bandwidth": (ready(OPS_PORTS["bandwidth"]), "bandwidth's /readyz on 9111"),
        "baton health": (ready(OPS_PORTS["health"]), "health's /readyz on 9109"),
        "baton agent": (ready(OPS_PORTS["agent"]), "the agent fleet's /readyz on 9119"),
    }
    tails: list[str] = []
    for line in scenario("by-hand"):
        if line.endswith("&"):
            command = line.removesuffix("&").strip()
            name = next(k for k in waits if k in command)
            process = shell.start(command, log=f"{name.split()[-1].lower()}.log")
            check, what = waits[name]
            until_sync(lambda c=check, p=process: c() or p.poll() is not None,  # type: ignore[misc]
                       within=120, what=what)  # fmt: skip
            assert process.poll() is None, f"{command} exited"
        elif line.startswith("baton tail"):
            tails.append(line)  # once there is something to read, below
        elif line.startswith("baton why"):
            tails.append(line)  # once the gang is on the bus, with the tails
        elif line.startswith("baton replay"):
            if line.endswith("--record run.jsonl"):
                _run_tails(shell, tails)
            _replay(shell, line)
        else:
            out = shell.run(line)
            if line.startswith("kubectl") and " get " in line:
                rows = out.splitlines()
                assert rows[0].startswith("NAME") and len(rows) > 1, out  # nodes in that rack
                assert all(r.startswith("gpu-") for r in rows[1:]), out
            if line.startswith("baton install-webhook"):
                assert "registered https://127.0.0.1:8443" in out
    assert (shell.cwd / "run.jsonl").stat().st_size > 0
    for line in scenario("by-hand", "docs/replay.md"):  # the same bus, recorded again
        _replay(shell, line)
    _a_node_passes_its_preflight(shell)


def _replay(shell: Shell, line: str) -> None:
    """A ``baton replay`` line of the README or docs/replay.md: what it prints is about
    this session (the gang it names was placed in it), not an empty story."""
    out = shell.run(line, timeout=300)
    said, tail = out.splitlines(), out[-3000:]
    if "--record" in line:
        said_it = r"recorded [1-9][\d,]* events from c1 HISTORY into run\.jsonl\n"
        assert re.fullmatch(said_it, out), out
        return
    summary = re.search(r"^replayed [\d,]+ inputs .* -> ([\d,]+) decisions", out, re.M)
    assert summary is not None, tail
    decisions = int(summary.group(1).replace(",", ""))
    assert decisions > 0, tail
    if "--compare" in line:
        assert said[0].startswith(f"compare: identical ({decisions} decisions"), tail
    elif "--gang" in line:
        gang = line.split("--gang ")[1]
        assert any("  <- " in s and gang in s for s in said), tail  # its inputs
        assert any(f"  placed {gang}: " in s for s in said), tail  # and its placement
    elif "--service" in line:
        assert said[0] == "policy: as recorded by the live service (runner.started)", tail
    else:  # every gang decision, one line each
        assert any(re.search(r" L\d+  placed team-\S+: ", s) for s in said), tail


def _a_node_passes_its_preflight(shell: Shell) -> None:
    """Health's preflight pods get past the webhook: the namespace the README makes
    for them is one Baton's webhook leaves alone, so nodes leave validating."""

    def validated() -> bool:
        said = shell.attempt("kubectl get nodes -o json").stdout
        items = json.loads(said)["items"] if said.strip() else []
        return any(
            '"validated"' in (n["metadata"].get("annotations") or {}).get("baton.io/health", "")
            and "baton.io/preflight" not in {t["key"] for t in n["spec"].get("taints") or ()}
            for n in items
        )

    until_sync(validated, within=240, step=1, what="a node's first preflight passed")
    assert "preflight pod refused" not in shell.run("baton status")


def _run_tails(shell: Shell, tails: list[str]) -> None:
    gang = OPS_PORTS["gang"]
    until_sync(lambda: metric(gang, "baton_gang_decisions_total") >= 10, within=180,
               what="ten placement decisions to tail")  # fmt: skip
    for line in tails:
        if line.startswith("baton why"):
            out_text = shell.run(line)  # the gang, running or gone: its story
            assert out_text.startswith("gang team-a/job-s5"), out_text
            continue
        if "--json" in line:  # live until Ctrl-C: read a line, then stop it as a user does
            process = shell.start(line, log="tail.json")
            path = shell.cwd / "tail.json"
            until_sync(lambda p=path: p.stat().st_size > 0, within=120,  # type: ignore[misc]
                       what="a live action on baton tail")  # fmt: skip
            os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the terminal's whole process group
            assert process.wait(timeout=30) == 0
            first = path.read_text().splitlines()[0]
            assert json.loads(first)["type"].startswith("action.")
        else:
            out_text = shell.run(line)
            assert len(out_text.splitlines()) == (10 if "| head" in line else 5), out_text
            assert "Traceback" not in out_text


def test_watching_it_with_prometheus_and_status(shell: Shell) -> None:
    lines = scenario("watching")
    up, rest = lines[0], lines[1:]
    process = shell.start(up, log="up.log")
    log = shell.cwd / "up.log"
    if shutil.which("prometheus") is None:  # as written, it says what is missing
        assert process.wait(timeout=120) == 2
        assert "no prometheus binary on PATH" in log.read_text()
        pytest.skip("prometheus not installed (apt-get install prometheus): checked the message")
    until_sync(lambda: (shell.cwd / "up.env").exists() or process.poll() is not None,
               within=120, what="baton up's endpoints file")  # fmt: skip
    assert process.poll() is None, log.read_text()[-3000:]
    env = dict(line.split("=", 1) for line in (shell.cwd / "up.env").read_text().splitlines())
    assert env["BATON_PROMETHEUS_URL"].startswith("http://127.0.0.1:")
    said: list[str] = []

    def status_shows_the_services() -> bool:  # exit 1 until a service made the streams
        said.append(shell.attempt("; ".join(rest)).stdout)  # one shell: the variables reach it
        shown = said[-1]
        return "\nteams\n" in shown and all(f"{s}:seen" in shown for s in SERVICES)

    until_sync(status_shows_the_services, within=120, step=1,
               what="baton status to list the teams and every service")  # fmt: skip
    assert said[-1].startswith("baton status"), said[-1]
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0, log.read_text()[-3000:]


def test_breaking_nodes_and_watching_baton_react(shell: Shell) -> None:
    """The Faults section: ``baton up --endpoints-file ep.env`` as its prose says, then
    its commands in a second shell, in order; between them, what a user would look at."""
    source, *rest = scenario("faults")
    process = shell.start("baton up --endpoints-file ep.env", log="up.log")
    log = shell.cwd / "up.log"
    until_sync(lambda: (shell.cwd / "ep.env").exists() or process.poll() is not None,
               within=120, what="baton up's endpoints file")  # fmt: skip
    assert process.poll() is None, log.read_text()[-3000:]
    (nodes_line,) = [line for line in rest if line.startswith("kubectl get nodes")]

    def nodes() -> dict[str, str]:
        out = shell.attempt(f"{source}; {nodes_line}").stdout.splitlines()[1:]
        rows = [row.split(None, 1) for row in out if row.strip()]
        return {row[0]: row[-1].strip() for row in rows}  # taints: "<none>" when none

    def validated() -> bool:  # every node passed its first preflight and is back in service
        said = shell.attempt(f"{source}; kubectl get nodes -o json").stdout
        items = json.loads(said)["items"] if said.strip() else []
        notes = [(n["metadata"].get("annotations") or {}).get("baton.io/health", "") for n in items]
        marks = [t["key"] for n in items for t in n["spec"].get("taints") or ()]
        health = {"baton.io/unhealthy", "baton.io/draining", "baton.io/preflight"}
        return (
            len(items) == 64
            and all('"validated"' in n for n in notes)
            and not (health & set(marks))
        )

    until_sync(validated, within=240, step=1, what="every node's first preflight")
    for line in rest:
        out = shell.run(f"{source}; {line}")  # one shell each time: the variables reach it
        if line.startswith("baton sim fault xid gpu-00003"):
            until_sync(lambda: "baton.io/unhealthy" in nodes()["gpu-00003"], within=60, step=1,
                       what="gpu-00003 quarantined")  # fmt: skip
        elif line.startswith("baton tail"):
            assert len(out.splitlines()) == 20 and "health.state.v1" in out, out
        elif line.startswith("kubectl label"):
            until_sync(lambda: nodes()["gpu-00003"] == "<none>", within=120, step=1,
                       what="gpu-00003 back in service after its preflight")  # fmt: skip
        elif line.startswith("baton health"):
            assert ("paused" if "pause" in line else "resumed") in out
    assert re.search(r"withheld [1-9]", log.read_text()), "the rails held nothing back"
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0, log.read_text()[-3000:]


def _reap(pid: int, *, within: float) -> int:
    """The child's wait status once it exits. When it has not within ``within`` (a
    failed test never sent Ctrl-C): SIGTERM, so that it stops its children as on
    Ctrl-C, and SIGKILL only when that is not done within 30 s more."""
    for sig, wait in ((signal.SIGTERM, within), (signal.SIGKILL, 30.0)):
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            time.sleep(0.1)
        os.kill(pid, sig)
    return os.waitpid(pid, 0)[1]


def test_the_quickstart_demo_draws_a_full_screen_status(shell: Shell) -> None:
    """On a terminal: the alternate screen (the scrollback is not flooded), the endpoints
    on it, and the last status printed once after Ctrl-C."""
    (line,) = scenario("quickstart")
    assert line.startswith(INSTALL + " && ")  # the install is .ci/run's
    demo = line.removeprefix(INSTALL + " && ")
    pid, fd = pty.fork()
    if pid == 0:  # the child: a terminal of 120x40, as a user has
        os.chdir(shell.cwd)
        os.environ.update({"COLUMNS": "120", "LINES": "40", "TERM": "xterm-256color"})
        os.environ["PATH"] = shell.env["PATH"]
        os.execvp("bash", ["bash", "-c", f"exec {demo}"])
    seen = bytearray()
    deadline = time.monotonic() + 180

    def read(until: Callable[[], bool], what: str) -> None:
        while not until():
            assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{seen[-2000:]!r}"
            if select.select([fd], [], [], 0.5)[0]:
                with contextlib.suppress(OSError):  # EIO: the child closed the terminal
                    seen.extend(os.read(fd, 65536))

    try:
        read(lambda: b"placement.placed.v1" in seen, "a placement on the screen")
        assert b"\x1b[?1049h" in seen  # the alternate screen
        assert b"service ops" in seen and b"KUBECONFIG" in seen
        os.kill(pid, signal.SIGINT)
        read(lambda: b"baton up: stopped" in seen, "baton up to stop")
    finally:
        status = _reap(pid, within=30)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0
    after = bytes(seen).rsplit(b"\x1b[?1049l", 1)[1]  # left the alternate screen
    assert after.count(b"baton up ") == 1 and b"teams" in after  # the last status, once


def test_deploying_without_cert_manager_as_docs_deploy_says(shell: Shell) -> None:
    """docs/deploy.md's steps without a cluster: `baton admission --make-cert` runs as
    written; kubectl is a stand-in that records its arguments, and the test does what
    the cluster would: render the base, build the secret, apply both patches."""
    lines = scenario("without-cert-manager", "docs/deploy.md")
    real = shutil.which("kubectl")
    if real is None:
        pytest.skip("kubectl not installed: it renders deploy/ as a cluster would get it")
    stand_in = shell.cwd / "bin" / "kubectl"
    stand_in.parent.mkdir()
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    calls = shell.cwd / "calls.jsonl"
    shell.env.update(PATH=f"{stand_in.parent}:{shell.env['PATH']}", KUBECTL_CALLS=str(calls))
    for line in lines:
        shell.run(line)
    cert = (shell.cwd / "tls" / "tls.crt").read_bytes()
    recorded = [json.loads(c) for c in calls.read_text().splitlines()]
    assert [c[0] for c in recorded] == ["apply", "-n", "patch", "patch"]
    rendered = subprocess.run([real, "kustomize", str(ROOT / recorded[0][2])], check=True,
                              capture_output=True, text=True).stdout  # fmt: skip
    configs = {(d["kind"], d["metadata"]["name"]): d for d in yaml_docs(rendered)}
    secret = subprocess.run([real, *recorded[1], "--dry-run=client", "-o", "json"], check=True,
                            cwd=shell.cwd, capture_output=True, text=True).stdout  # fmt: skip
    data = json.loads(secret)
    assert (data["metadata"]["name"], data["metadata"]["namespace"]) == (
        "baton-admission-tls", "baton-system")  # fmt: skip
    assert base64.b64decode(data["data"]["tls.crt"]) == cert
    for call in recorded[2:]:
        config = configs[(KINDS[call[1]], call[2])]
        (op,) = json.loads(call[call.index("-p") + 1])
        assert op["op"] == "add" and op["path"] == "/webhooks/0/clientConfig/caBundle"
        assert "caBundle" not in config["webhooks"][0]["clientConfig"]  # the path can be added
        assert base64.b64decode(op["value"]) == cert


STAND_IN = """#!/usr/bin/env python3
import json, os, sys
open(os.environ["KUBECTL_CALLS"], "a").write(json.dumps(sys.argv[1:]) + "\\n")
"""
KINDS = {
    "mutatingwebhookconfiguration": "MutatingWebhookConfiguration",
    "validatingwebhookconfiguration": "ValidatingWebhookConfiguration",
}


def yaml_docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]
