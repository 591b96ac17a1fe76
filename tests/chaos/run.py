"""The chaos run: Baton keeps its promises while its pieces die.

Every service runs as 2 replicas (processes, as ``baton <service>``), with NATS and a
simulated cluster that replays a generated job trace. NATS runs with auth on, the
configuration ``baton up`` generates: each service connects as its own nkey user, the
run itself as admin. For ``duration`` seconds:

- every ``every`` seconds a random replica of a random service is SIGKILLed and
  started again a second later (as Kubernetes would);
- once, NATS is SIGKILLed and restarted on the same store;
- once, the gang service's leader is paused (SIGSTOP) past its lease and resumed:
  it wakes up believing it leads, and must not act;
- once, a node's state claiming 1,000 GPUs is published on its subject with the
  run's (admin's) rights: every consumer must refuse it and keep the node's last good
  state, replicas restarted afterwards too (the over-allocation check counts pods the
  kubelet failed for want of room);
- once, forged actions (a create-pod body on gang's bind-gang subject, admission's
  taint at epoch 0 and ahead of its lease) are published: each must be refused naming
  why, and none applied (``forging``);
- once, a replica of admission whose clock runs 15 TTLs ahead joins: it must leave the
  healthy leader alone, and once it has led and died, a real replica must take over
  within 6 TTLs (``forging.skewed_replica``);
- once, the JetStream store fills up (NATS runs on a tmpfs of ``STORE_MIB`` in a mount
  namespace of its own; a filler takes every free byte): NATS's ``/healthz`` fails and
  the services say they are not ready; then the filler is removed and the run does what
  ``baton up`` does (``cli.store.Disabled``: once ``/healthz`` has failed ``DOWN_S``
  with room again, nats-server is restarted on the same store), and work resumes.

Then the trace ends, Baton settles, and the run checks, from the API and the streams:
no gang partly bound; no node over-allocated; every action answered (lost: 0), none
applied twice (the API saw no second bind of a pod: duplicates 0); every gang that
fits is placed; every dead letter has a reason; NATS refused nothing a service did
(no violation in its log: the generated rights suffice under faults too). It prints
what it did and how long each takeover took.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shlex
import shutil
import signal
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi

from baton.libs.bus import Bus
from baton.libs.runner.leasing import Held, leases_bucket
from baton.proto import k8s, keys, subjects
from baton.proto.actions import ActionResult, AnyAction
from baton.proto.deadletter import DeadLetter
from baton.services.cli.natsconfig import write_config
from baton.services.cli.processes import Child, baton, free_port, nats_server_binary, port_open
from baton.services.cli.stack import write_nats_auth
from baton.services.cli.store import Disabled
from tests.chaos import forging
from tests.pipeline import every

SERVICES = ("bridge", "actuator", "admission", "gang")
C = "c1"
STORE_MIB = 384  # the store's tmpfs: HISTORY reserves 256 MiB for a small cluster


@dataclass(frozen=True)
class Plan:
    duration: float = 240.0
    nodes: int = 32
    seed: int = 7
    every: float = 4.0
    replicas: int = 2
    ttl: float = 2.0  # lease TTL
    settle: float = 120.0  # after the chaos: at most this long for every job to be placed
    jobs: int = 0  # 0: about one job per second of chaos


@dataclass
class Report:
    plan: Plan
    kills: list[tuple[float, str, bool]] = field(default_factory=list)  # (t, replica, was leader)
    takeovers: dict[str, list[float]] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    checks: dict[str, tuple[bool, str]] = field(default_factory=dict)
    counts: dict[str, Any] = field(default_factory=dict)
    forged: list[forging.Forgery] = field(default_factory=list)
    skew: tuple[bool, float | None] | None = None  # (left the leader alone, takeover s)
    # (NATS unhealthy once full, the replicas not ready then, NATS healthy once freed)
    full_store: tuple[bool, list[str], bool] | None = None

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(ok for ok, _ in self.checks.values())

    def text(self) -> str:
        plan = self.plan
        lines = [
            f"chaos: {plan.duration:.0f} s, {plan.nodes} nodes, {plan.replicas} replicas of "
            f"{', '.join(SERVICES)}, seed {plan.seed}"
        ]
        lines.append(f"kills: {len(self.kills)} ({sum(1 for k in self.kills if k[2])} leaders)")
        lines += [f"  {e}" for e in self.events]
        for service, times in sorted(self.takeovers.items()):
            if times:
                ordered = sorted(times)
                median = ordered[len(ordered) // 2]
                lines.append(
                    f"takeover {service}: {len(times)} x, median {median:.2f} s, "
                    f"max {ordered[-1]:.2f} s"
                )
        lines += [f"{k}: {v}" for k, v in self.counts.items()]
        for name, (ok, detail) in self.checks.items():
            lines.append(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
        return "\n".join(lines)


def write_trace(path: Path, plan: Plan, rng: random.Random) -> int:
    """Jobs of 1-32 GPUs (whole nodes from 8) over the chaos, lasting 3-15 s each: about
    half the cluster busy, so every job can finish once the chaos ends."""
    jobs = plan.jobs or int(plan.duration)
    rows = ["job_id,submit_time,submit_s,num_gpus,duration_s,vc,user,status"]
    for i in range(jobs):
        gpus = rng.choice((1, 2, 4, 8, 8, 16, 16, 32))
        submit = plan.duration * i / jobs
        rows.append(f"c{i},,{submit:.1f},{gpus},{rng.uniform(3, 15):.1f},chaos,,")
    path.write_text("\n".join(rows) + "\n")
    return jobs


class Stack:
    def __init__(self, plan: Plan, run: Path) -> None:
        self.plan, self.run = plan, run
        self.logs = run / "logs"
        self.logs.mkdir(parents=True)
        self.nats_port = free_port()
        self.url = f"nats://127.0.0.1:{self.nats_port}"
        self.kubeconfig = run / "kubeconfig"
        config, self.seeds = write_nats_auth(C, run)  # as baton up: one nkey per service
        self.monitor = free_port()
        self.store = run / "js"
        self.store.mkdir()
        server = [nats_server_binary(), "-js", "-a", "127.0.0.1", "-p", str(self.nats_port),
                  "-m", str(self.monitor), "-sd", str(self.store),
                  "-c", str(_sized(config))]  # fmt: skip
        # one mount namespace for the run (the tmpfs outlives each nats-server in it); the
        # loop is the supervisor: a server that exits is started again 2 s later
        script = (f"mount -t tmpfs -o size={STORE_MIB}m none {self.store} && "
                  f"while true; do {shlex.join(server)}; sleep 2; done")  # fmt: skip
        self.nats = Child("nats", ["unshare", "-rm", "sh", "-c", script], self.logs / "nats.log")
        self.replicas: list[Child] = []
        self.sim: Child | None = None

    @property
    def store_seen(self) -> Path:
        """The store as its mount namespace has it (the tmpfs), from outside."""
        assert self.nats.process is not None
        return Path(f"/proc/{self.nats.process.pid}/root{self.store}")

    def server_pid(self) -> int:
        """The nats-server the namespace's loop runs now (0 while it waits to restart)."""
        assert self.nats.process is not None
        pid = self.nats.process.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return next((int(c) for c in children if "nats-server" in _argv0(int(c))), 0)

    def start(self, trace: Path) -> None:
        if shutil.which("unshare") is None:
            raise RuntimeError("the chaos run needs unshare (util-linux) for NATS's tmpfs store")
        self.nats.start()
        _wait(lambda: port_open(self.nats_port) or not self.nats.alive, 20, "nats")
        if not self.nats.alive:
            raise RuntimeError(f"nats (in its mount namespace) did not start:\n{self.nats.tail()}")
        argv = baton("sim", "--nodes", str(self.plan.nodes), "--listen")
        argv += [f"127.0.0.1:{free_port()}", "--kubeconfig", str(self.kubeconfig)]
        argv += ["--trace", str(trace), "--speed", "1"]
        self.sim = Child("simcluster", argv, self.logs / "simcluster.log")
        self.sim.start()
        _wait(self.kubeconfig.exists, 120, "simcluster")
        env = {"BATON_NATS_URL": self.url, "BATON_CLUSTER": C, "KUBECONFIG": str(self.kubeconfig),
               "BATON_LEASE_TTL_S": str(self.plan.ttl), "BATON_STOP_GRACE_S": "3",
               "BATON_GANG_REQUIRE_ADMISSION": "1", "BATON_GANG_CYCLE_INTERVAL": "0.2",
               "BATON_CLUSTER_NODES": str(self.plan.nodes)}  # HISTORY sized for it  # fmt: skip
        for service in SERVICES:
            for i in range(1, self.plan.replicas + 1):
                name = f"{service}-{i}"
                child_env = {**env, "BATON_OPS_PORT": str(free_port()),
                             "BATON_NATS_NKEY_SEED_FILE": self.seeds[service]}  # fmt: skip
                child = Child(name, baton(service), self.logs / f"{name}.log", child_env)
                child.start()
                self.replicas.append(child)

    def stop(self) -> None:
        for child in reversed(self.replicas):
            _resume(child)
            child.stop(grace=5)
        if self.sim is not None:
            self.sim.stop()
        if self.nats.alive and self.nats.process is not None:  # the loop and its server
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.nats.process.pid, signal.SIGTERM)
            self.nats.stop(grace=10)


def _sized(config: Path) -> Path:
    """``config`` with JetStream's limit set: on a small disk nats-server would let
    JetStream reserve only 75% of it (``cli.store``), less than HISTORY's reservation."""
    lines = config.read_text().splitlines()
    body = json.loads("\n".join(line for line in lines if not line.startswith("#")))
    body["jetstream"] = {"max_file_store": 1024**3}
    sized = config.with_name("nats-sized.conf")
    write_config(sized, body)
    return sized


def _argv0(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    return ""


def _wait(check: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start within {within:.0f} s")
        time.sleep(0.1)


def _resumed(child: Child) -> bool:
    return child.process is not None


def _resume(child: Child) -> None:
    if child.process is not None and child.alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.process.pid, signal.SIGCONT)


async def leaders(bus: Bus) -> dict[str, Held]:
    """The current lease value of every service (who leads, at which epoch)."""
    found: dict[str, Held] = {}
    with contextlib.suppress(Exception):
        kv = await leases_bucket(bus)
        for service in SERVICES:
            with contextlib.suppress(Exception):
                entry = await kv.get(service)
                if entry.value:
                    found[service] = msgspec.json.decode(entry.value, type=Held)
    return found


def pid_of(held: Held | None) -> int:
    if held is None:
        return 0
    parts = held.holder.split("/")
    return int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else 0


async def chaos(plan: Plan, *, keep: Path | None = None) -> Report:
    rng = random.Random(plan.seed)
    report = Report(plan=plan, takeovers={s: [] for s in SERVICES})
    with tempfile.TemporaryDirectory(prefix="baton-chaos-") as scratch:
        run = (keep or Path(scratch)).absolute()  # store_seen: /proc/PID/root + it
        run.mkdir(parents=True, exist_ok=True)
        trace = run / "trace.csv"
        report.counts["jobs"] = write_trace(trace, plan, rng)
        stack = Stack(plan, run)
        try:
            stack.start(trace)
            bus = await Bus.connect(stack.url, cluster=C, name="chaos",
                                    seed_file=stack.seeds["admin"])  # fmt: skip
            bus.nodes = plan.nodes  # HISTORY sized for the cluster, as the services size it
            try:
                await bus.ensure_streams()
                await _until_led(bus, within=60)
                await _rampage(stack, bus, rng, report)
                await _settle(stack, bus, report)
                await check(stack, bus, report)
            finally:
                await bus.close()
        finally:
            stack.stop()
    return report


async def _until_led(bus: Bus, *, within: float) -> None:
    deadline = time.monotonic() + within
    while len(await leaders(bus)) < len(SERVICES):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no leader for {set(SERVICES) - set(await leaders(bus))}")
        await asyncio.sleep(0.2)


async def _rampage(stack: Stack, bus: Bus, rng: random.Random, report: Report) -> None:
    plan = stack.plan
    began = time.monotonic()
    nats_at, pause_at = plan.duration / 3, 2 * plan.duration / 3
    full_at = 5 * plan.duration / 6
    forge_at = plan.duration / 6
    actions_at, skew_at = plan.duration / 4, plan.duration / 2
    next_kill = plan.every
    pending: list[tuple[float, Child]] = []  # (restart at, child)
    while (now := time.monotonic() - began) < plan.duration:
        for at, child in list(pending):
            if now >= at:
                child.start()
                pending.remove((at, child))
        waiting = {id(c) for _, c in pending}
        for child in stack.replicas:  # a replica that ended by itself (lost its lease) restarts
            if not child.alive and id(child) not in waiting and _resumed(child):
                report.events.append(f"{now:6.1f} s: {child.name} exited "
                                     f"{child.exit_code()}; restarted")  # fmt: skip
                child.start()
        if now >= next_kill:
            next_kill += plan.every
            victim = rng.choice([c for c in stack.replicas if c.alive])
            await _kill(victim, bus, report, now)
            pending.append((now + 1.0, victim))
        if nats_at and now >= nats_at:
            nats_at = 0
            await _restart_nats(stack, report, now)
        if pause_at and now >= pause_at:
            pause_at = 0
            await _pause_leader(stack, bus, report, now)
        if forge_at and now >= forge_at:
            forge_at = 0
            await _forge_node(bus, report, now)
        if actions_at and now >= actions_at:
            actions_at = 0
            await _forge_actions(bus, report, now)
        if skew_at and now >= skew_at:
            skew_at = 0
            await _skew(stack, bus, report, now)
        if full_at and now >= full_at:
            full_at = 0
            await _fill_store(stack, report, now)
        await asyncio.sleep(0.1)
    for _, child in pending:
        child.start()
    if full_at:  # a takeover waited past its time (each kill waits up to 30 s for one)
        await _fill_store(stack, report, time.monotonic() - began)


async def _kill(victim: Child, bus: Bus, report: Report, now: float) -> None:
    service = victim.name.rsplit("-", 1)[0]
    before = (await leaders(bus)).get(service)
    leader = victim.process is not None and pid_of(before) == victim.process.pid
    assert victim.process is not None
    os.kill(victim.process.pid, signal.SIGKILL)
    victim.process.wait()
    report.kills.append((now, victim.name, leader))
    if leader and before is not None:
        took = await _takeover(bus, service, before, within=30)
        if took is not None:
            report.takeovers[service].append(took)


async def _takeover(bus: Bus, service: str, before: Held, *, within: float) -> float | None:
    began = time.monotonic()
    while time.monotonic() - began < within:
        now = (await leaders(bus)).get(service)
        if now is not None and now.epoch and now.epoch != before.epoch:
            return time.monotonic() - began
        await asyncio.sleep(0.05)
    return None


async def _restart_nats(stack: Stack, report: Report, now: float) -> None:
    began = time.monotonic()
    os.kill(stack.server_pid(), signal.SIGKILL)  # the namespace's loop starts it 2 s later
    await asyncio.sleep(0.5)
    await asyncio.to_thread(_wait, lambda: port_open(stack.nats_port), 20, "nats")
    report.events.append(f"{now:6.1f} s: NATS killed, back after {time.monotonic() - began:.1f} s")


async def _fill_store(stack: Stack, report: Report, now: float) -> None:
    """Fill the store to the last byte; once NATS says it is unhealthy, free it and
    restart nats-server as ``baton up`` would (``Disabled``); wait until it is healthy."""
    began = time.monotonic()
    filler = stack.store_seen / "filler"
    _fill(filler)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
        unhealthy = await _until_async(lambda: _healthy(http, stack.monitor), False, within=60)
        unready: set[str] = set()  # each replica asks JetStream every 5 s (storage.Watch)
        for _ in range(24):
            unready |= set(await _unready(http, stack))
            if len(unready) >= sum(c.alive for c in stack.replicas):
                break
            await asyncio.sleep(0.5)
        filler.unlink()
        disabled = Disabled(stack.store_seen)  # the tmpfs's free space, as baton up reads its store
        while not await disabled.check(http, monitor=stack.monitor, now=time.monotonic()):
            if time.monotonic() - began > 180:
                break
            await asyncio.sleep(0.5)
        restarted = time.monotonic() - began
        with contextlib.suppress(ProcessLookupError):
            os.kill(stack.server_pid(), signal.SIGTERM)  # baton up's restart_nats
        healthy = await _until_async(lambda: _healthy(http, stack.monitor), True, within=90)
    report.full_store = (unhealthy, sorted(unready), healthy)
    report.events.append(
        f"{now:6.1f} s: JetStream store filled; NATS unhealthy: {unhealthy}, replicas not "
        f"ready: {', '.join(sorted(unready)) or 'none'}; freed, nats-server restarted after "
        f"{restarted:.0f} s, healthy again: {healthy} ({time.monotonic() - began:.0f} s in all)"
    )


def _fill(path: Path) -> None:
    """Take every free byte of ``path``'s file system (a file of the free space, then
    4 KiB blocks until there is no room: what nats-server writes next fails)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        with contextlib.suppress(OSError):
            os.posix_fallocate(fd, 0, max(1, shutil.disk_usage(path.parent).free - 65536))
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0" * 4096):
                pass
    finally:
        os.close(fd)


async def _healthy(http: aiohttp.ClientSession, monitor: int) -> bool:
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        async with http.get(f"http://127.0.0.1:{monitor}/healthz") as response:
            return response.status == 200
    return False


async def _unready(http: aiohttp.ClientSession, stack: Stack) -> list[str]:
    """The live replicas whose ``/readyz`` does not answer 200."""
    found = []
    for child in stack.replicas:
        if child.alive:
            url = f"http://127.0.0.1:{child.env['BATON_OPS_PORT']}/readyz"
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with http.get(url) as response:
                    if response.status == 200:
                        continue
            found.append(child.name)
    return found


async def _until_async(check: Any, wanted: bool, *, within: float) -> bool:
    """Whether ``await check()`` became ``wanted`` within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await check() == wanted:
            return True
        await asyncio.sleep(0.5)
    return False


async def _forge_node(bus: Bus, report: Report, now: float) -> None:
    """A node's state beyond what it can hold, on its real subject (as anyone with the
    bridge's rights could publish it)."""
    nodes = await bus.snapshot(subjects.wildcard(C, subjects.K8S, "node", ">"), k8s.NodeEvent)
    real = next((e for e in nodes if e.op == "upsert"), None)
    if real is None:
        report.events.append(f"{now:6.1f} s: no node to forge")
        return
    node = msgspec.structs.replace(real.node, allocatable={**real.node.allocatable, keys.GPU: 1000})
    forged = k8s.NodeEvent(op="upsert", at=real.at, node=node)
    await bus.publish(subjects.subject(C, subjects.K8S, "node", node.name), forged)
    report.events.append(f"{now:6.1f} s: forged node {node.name} with 1000 GPUs on its subject")


async def _forge_actions(bus: Bus, report: Report, now: float) -> None:
    nodes = await bus.snapshot(subjects.wildcard(C, subjects.K8S, "node", ">"), k8s.NodeEvent)
    node = next((e.node.name for e in nodes if e.op == "upsert"), "")
    epochs = {service: held.epoch for service, held in (await leaders(bus)).items()}
    report.forged = forging.forgeries(C, node=node, namespace="default", epochs=epochs)
    await forging.forge(bus, report.forged)
    report.events.append(f"{now:6.1f} s: forged {len(report.forged)} actions (kind, epochs)")


async def _skew(stack: Stack, bus: Bus, report: Report, now: float) -> None:
    pids = [c.process.pid for c in stack.replicas
            if c.name.startswith("admission-") and c.process and c.alive]  # fmt: skip
    report.skew = await forging.skewed_replica(
        bus, service="admission", ttl=stack.plan.ttl, pids=pids, events=report.events, now=now
    )


async def _pause_leader(stack: Stack, bus: Bus, report: Report, now: float) -> None:
    held = (await leaders(bus)).get("gang")
    pid = pid_of(held)
    child = next((c for c in stack.replicas if c.process and c.process.pid == pid), None)
    if child is None or held is None:
        report.events.append(f"{now:6.1f} s: no gang leader to pause")
        return
    os.kill(pid, signal.SIGSTOP)
    took = await _takeover(bus, "gang", held, within=30)
    await asyncio.sleep(stack.plan.ttl)
    os.kill(pid, signal.SIGCONT)
    report.events.append(
        f"{now:6.1f} s: paused gang leader {child.name} (epoch {held.epoch}) past its lease; "
        f"standby took over in {took if took is None else round(took, 2)} s; resumed it"
    )


async def _settle(stack: Stack, bus: Bus, report: Report) -> None:
    """Everything back up; then wait until no pod waits for a node (every gang placed)."""
    for child in stack.replicas:
        _resume(child)
        if not child.alive:
            child.start()
    await _until_led(bus, within=60)
    began = time.monotonic()
    client: ApiClient = await config.new_client_from_config(config_file=str(stack.kubeconfig))
    try:
        while time.monotonic() - began < stack.plan.settle:
            pods = (await CoreV1Api(client).list_pod_for_all_namespaces()).items
            if not any(not p.spec.node_name and p.status.phase == "Pending" for p in pods):
                break
            await asyncio.sleep(1.0)
    finally:
        await client.close()
    report.counts["settled in"] = f"{time.monotonic() - began:.0f} s"


async def check(stack: Stack, bus: Bus, report: Report) -> None:
    client: ApiClient = await config.new_client_from_config(config_file=str(stack.kubeconfig))
    try:
        pods = (await CoreV1Api(client).list_pod_for_all_namespaces()).items
        nodes = (await CoreV1Api(client).list_node()).items
        groups = await CustomObjectsApi(client).list_cluster_custom_object(
            "scheduling.x-k8s.io", "v1alpha1", "podgroups"
        )
        report.checks["no gang partly bound"] = _partial(pods, groups["items"])
        report.checks["no node over-allocated"] = _overallocated(pods, nodes)
        report.checks["every gang placed once the chaos ends"] = _all_placed(pods)
        async with aiohttp.ClientSession() as http:
            server = client.configuration.host
            async with http.get(f"{server}/metrics") as resp:
                metrics = await resp.text()
    finally:
        await client.close()
    actions = await every(bus, subjects.wildcard(C, "action", ">"), AnyAction)
    results = await every(bus, subjects.wildcard(C, "result", ">"), ActionResult)
    answered = {r.action_id for r in results}
    _trust_checks(report, {r.action_id: r for r in results}, pods, nodes)
    lost = [a.id for a in actions if a.id not in answered]
    outcomes = Counter(r.outcome for r in results)
    report.counts["actions"] = len({a.id for a in actions})
    report.counts["outcomes"] = dict(outcomes)
    report.checks["every action answered (lost: 0)"] = (not lost, f"lost {len(lost)}: {lost[:5]}")
    twice = _binding_conflicts(metrics)
    report.checks["no pod bound twice (duplicates: 0)"] = (twice == 0, f"{twice} second binds")
    letters = await every(bus, subjects.wildcard(C, subjects.DEADLETTER, ">"), DeadLetter)
    silent = [d for d in letters if not d.reason]
    report.counts["dead letters"] = len(letters)
    report.checks["every dead letter has a reason"] = (not silent, f"{len(silent)} without")
    refused = _violations(stack.logs / "nats.log")
    said = f"{len(refused)} refusals: {refused[:3]}"
    report.checks["NATS refused no service (auth on)"] = (not refused, said)


def _trust_checks(
    report: Report, results: dict[str, ActionResult], pods: list[Any], nodes: list[Any]
) -> None:
    if report.forged:
        report.checks["forged kinds and epochs refused, none applied"] = forging.refused(
            report.forged, results, pods, nodes
        )
    if report.skew is not None:
        alone, took = report.skew
        bound = forging.TAKEOVER_TTLS * report.plan.ttl
        ok = alone and took is not None and took <= bound
        report.checks["a skewed replica neither steals a lease nor slows a takeover"] = (
            ok, f"left the leader alone: {alone}; takeover after it died: {took} s (<= {bound} s)"
        )  # fmt: skip
    if report.full_store is not None:
        unhealthy, unready, healthy = report.full_store
        report.checks["a full store is seen (not ready) and, freed, works again by itself"] = (
            unhealthy and bool(unready) and healthy,
            f"NATS unhealthy when full: {unhealthy}; replicas not ready then: {len(unready)}; "
            f"healthy once freed: {healthy}",
        )


def _violations(log: Path) -> list[str]:
    """The permission violations and failed logins nats-server logged."""
    signs = ("violation", "authentication error", "authorization error")
    lines = log.read_text(errors="replace").splitlines()
    return [line for line in lines if any(s in line.lower() for s in signs)]


def _partial(pods: list[Any], groups: list[dict[str, Any]]) -> tuple[bool, str]:
    bound: Counter[str] = Counter()
    for pod in pods:
        group = (pod.metadata.labels or {}).get(keys.POD_GROUP)
        if group and pod.spec.node_name and pod.status.phase not in ("Succeeded", "Failed"):
            bound[f"{pod.metadata.namespace}/{group}"] += 1
    partial = []
    for group in groups:
        key = f"{group['metadata']['namespace']}/{group['metadata']['name']}"
        need = int(group.get("spec", {}).get("minMember", 1))
        if 0 < bound[key] < need:
            partial.append(f"{key} {bound[key]}/{need}")
    return not partial, f"{len(partial)} partial of {len(groups)} gangs: {partial[:5]}"


def _gpus(obj: Any) -> int:
    total = 0
    for container in obj.spec.containers or []:
        requests = (container.resources.requests or {}) if container.resources else {}
        total += int(requests.get(keys.GPU, 0))
    return total


def _overallocated(pods: list[Any], nodes: list[Any]) -> tuple[bool, str]:
    """Nodes whose bound, unfinished pods want more GPUs than they have, and pods bound
    where they did not fit: the kubelet failed those (``OutOf<resource>``), so they are
    no longer counted on the node, but each was an over-allocation all the same."""
    used: Counter[str] = Counter()
    refused = []
    for pod in pods:
        if pod.spec.node_name and pod.status.phase not in ("Succeeded", "Failed"):
            used[pod.spec.node_name] += _gpus(pod)
        if pod.status.phase == "Failed" and (pod.status.reason or "").startswith("OutOf"):
            refused.append(f"{pod.metadata.namespace}/{pod.metadata.name} on "
                           f"{pod.spec.node_name} ({pod.status.reason})")  # fmt: skip
    over = []
    for node in nodes:
        have = int((node.status.allocatable or {}).get(keys.GPU, 0))
        if used[node.metadata.name] > have:
            over.append(f"{node.metadata.name} {used[node.metadata.name]}/{have}")
    return not over and not refused, (
        f"{len(over)} of {len(nodes)} nodes: {over[:5]}; "
        f"{len(refused)} pods refused by the kubelet: {refused[:5]}"
    )


def _all_placed(pods: list[Any]) -> tuple[bool, str]:
    """The trace fits the cluster (half of it busy at most): once the chaos ends, no pod
    may still wait for a node."""
    waiting = sorted(
        f"{p.metadata.namespace}/{p.metadata.name}{_why(p)}"
        for p in pods
        if not p.spec.node_name and p.status.phase == "Pending"
    )
    return not waiting, f"{len(waiting)} pods still waiting: {waiting[:5]}"


def _why(pod: Any) -> str:
    """What the pod's PodScheduled condition says it waits for (Baton's reporter writes
    it), so a failed run names the cause, not only the pod."""
    for condition in pod.status.conditions or []:
        if condition.type == "PodScheduled" and condition.message:
            return f" ({condition.message})"
    return " (no PodScheduled condition)"


def _binding_conflicts(metrics: str) -> int:
    total = 0
    for line in metrics.splitlines():
        if (
            line.startswith("apiserver_request_total{")
            and 'subresource="binding"' in line
            and ('code="409"' in line)
        ):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total
