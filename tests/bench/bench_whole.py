"""The whole control plane at size: ``baton up`` as a user starts it, measured from outside.

Starts ``baton up --nodes N --workload W --duration S`` (NATS, simcluster, every service,
the simulated agents, the status view: everything on this machine) and samples, every
``EVERY`` seconds, without adding load worth counting:

- progress, from the status lines ``baton up`` prints when its output is not a terminal:
  nodes still validating (a preflight) and GPUs allocated;
- CPU seconds and resident memory of every process under ``baton up`` (``/proc``);
- API requests by verb and resource (simcluster's ``apiserver_request_total``);
- messages per stream (each stream's last sequence: every message Baton put on the bus
  goes through a stream) with the operator's credentials from the endpoints file;
- lease changes and lost leases (the services' logs);
- whether the harness kept up with its trace (simcluster's ``/metrics``): jobs
  submitted, how late the replay is, the Job controller's queue.

Reports: seconds to every node validated and to 50% / 90% of GPUs allocated; per process
CPU seconds, CPU share over the last minute (the steady state once the cluster is full)
and peak RSS; API requests per second over the run and over the last minute; bus
messages per second per stream, likewise.

    python -m tests.bench whole                         # 1,500 nodes, synthetic, 6 minutes
    BATON_WHOLE_NODES=7500 BATON_WHOLE_SECONDS=420 BATON_WHOLE_LOAD=1.3 \
        BATON_WHOLE_SPEED=10 python -m tests.bench whole                      # just scale
    BATON_WHOLE_WORKLOAD=llm python -m tests.bench whole
    BATON_WHOLE_NODES=7500 BATON_WHOLE_WORKLOAD=steady BATON_WHOLE_SECONDS=600 \
        python -m tests.bench whole             # full, then nothing changes: the steady state
    BATON_WHOLE_NODES=1024 BATON_WHOLE_WORKLOAD=llm BATON_WHOLE_SPEED=600 \\
        BATON_WHOLE_RECORD=1 python -m tests.bench whole     # issue 20's LLM mix at 1,024
    BATON_WHOLE_NODES=7500 BATON_WHOLE_WORKLOAD=llm \\
        BATON_WHOLE_SPEED=150 python -m tests.bench whole   # the LLM mix at 7,500 (80 pods/s)

``BATON_WHOLE_SPEED`` is ``baton up --speed`` (trace time compression), ``BATON_WHOLE_DEVICES``
``baton up --devices`` (``dra``: GPUs through DRA claims), ``BATON_WHOLE_LOAD``
``baton up --load`` (above 1 the synthetic mix keeps a queue: the default 0.9 can never
fill the cluster). With
``BATON_WHOLE_RECORD=1`` the bench also reads the API every sample for gangs partly bound
(some members bound, fewer than all, none ended) in two samples running - the e2e LLM
test's rule - and before stopping records the bus (``baton replay --record``) and replays
it (``baton replay --compare``), printing the verdict, the GPUs allocated over the
whole run (every change counted for as long as it held) and where the rest went
(``tests/bench/allocation.py``: the 10 s samples of a share that swings by a thousand
GPUs in a second vary by a point or more from run to run). It prints GPUs allocated and
gangs waiting at every sample, and for the synthetic and LLM mixes what the trace
offers then (``offered``: the GPUs of the jobs submitted so far and not yet ended, had
each started the moment it came), the ceiling a perfect scheduler would reach.
``BATON_WHOLE_KEEP=DIR`` keeps ``baton up``'s store there (its ``logs/`` show what each
service did), and the recording as ``DIR/run.jsonl``.

Never part of the suite (timing belongs here); ``tests/e2e`` holds the functional
1,000-node check.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import nats
from prometheus_client.parser import text_string_to_metric_families

from baton.libs.bus.connection import auth_options
from baton.services.simcluster import main as simcluster
from baton.services.simcluster.world.spec import default_spec
from baton.services.simcluster.world.workload import SYNTHETIC_SHAPES, Job
from tests.bench import allocation
from tests.e2e.test_up_mix import partial, read
from tests.e2e.upping import endpoints_of

NODES = int(os.environ.get("BATON_WHOLE_NODES", "1500"))
WORKLOAD = os.environ.get("BATON_WHOLE_WORKLOAD", "synthetic")
SECONDS = float(os.environ.get("BATON_WHOLE_SECONDS", "360"))
EVERY = float(os.environ.get("BATON_WHOLE_EVERY", "10"))
SPEED = os.environ.get("BATON_WHOLE_SPEED", "")
LOAD = os.environ.get("BATON_WHOLE_LOAD", "")  # baton up --load: above 1 keeps a queue
DEVICES = os.environ.get("BATON_WHOLE_DEVICES", "")  # baton up --devices: plugin or dra
RECORD = os.environ.get("BATON_WHOLE_RECORD", "") == "1"
KEEP = os.environ.get("BATON_WHOLE_KEEP", "")  # a folder: baton up's store (logs) kept there
STEADY_S = 60.0  # the last minute: the steady state

_ALLOCATED = re.compile(r"nodes (\d+) \((\d+) ready\)\s+gpus (\d+)/(\d+) allocated")
_USED = re.compile(r"quota \d+\s+used (\d+)")  # a team's line (one team: baton up's default)
_WAITING = re.compile(r"gangs waiting (\d+)")
_VALIDATING = re.compile(r"validating (\d+)")
_LOGS = re.compile(r"logs in (\S+)")
_LAG = re.compile(r'baton_runner_lag_seconds\{service="([^"]*)"\} (\S+)')
OVER_S = 5.0  # the goal: no service behind its input by more than this, at any time
_API = re.compile(r'apiserver_request_total\{code="[^"]*",resource="([^"]*)",'
                  r'subresource="([^"]*)",verb="([^"]*)"\} (\S+)')  # fmt: skip
_SUBMITTED = "baton_simcluster_workload_jobs_submitted_total"
_BEHIND = "baton_simcluster_workload_behind_seconds"  # how late the replay is
_JOB_QUEUE = 'workqueue_depth{name="job"}'  # simcluster's Job controller: pods to make
_WORKLOAD = re.compile(
    r'^(baton_simcluster_workload_\w+|workqueue_depth\{name="\w+"\}) (\S+)$', re.M
)


Counts = dict[str, float] | dict[str, int]


@dataclass
class Sample:
    at: float
    cpu: dict[str, float]  # process -> CPU seconds so far
    rss: dict[str, float]  # process -> MiB
    api: dict[str, float]  # "VERB resource[/sub]" -> requests so far
    streams: dict[str, int]  # stream -> last sequence
    allocated: int = 0  # GPUs allocated, from the last status line
    waiting: int = 0  # gangs waiting, likewise
    used: int = 0  # GPUs admission counts against the team (admitted, bound or not)
    partial: frozenset[str] = frozenset()  # gangs partly bound (RECORD only)
    lag: dict[str, float] = field(default_factory=dict)  # service -> baton_runner_lag_seconds
    # service -> {le: batches}: every batch's lag so far (baton_runner_batch_lag_seconds)
    behind: dict[str, dict[float, float]] = field(default_factory=dict)
    # simcluster's workload: baton_simcluster_workload_* and workqueue_depth{name=...} -> value
    workload: dict[str, float] = field(default_factory=dict)


@dataclass
class Progress:
    nodes: int = 0
    validating: int = -1
    gpus: int = 0
    allocated: int = 0
    waiting: int = 0
    used: int = 0
    validated_at: float = 0.0
    half_at: float = 0.0
    ninety_at: float = 0.0
    logs: str = ""
    replay: str = ""  # RECORD: the verdict of baton replay --compare
    allocation: str = ""  # RECORD: the share allocated over time, from the recording
    lines: list[str] = field(default_factory=list)

    def read(self, line: str, at: float) -> None:
        self.lines = [*self.lines[-19:], line]  # the last words, if `baton up` ends early
        if m := _LOGS.search(line):
            self.logs = self.logs or m.group(1)
        if m := _ALLOCATED.search(line):
            self.nodes, _, self.allocated, self.gpus = map(int, m.groups())
            share = self.allocated / self.gpus if self.gpus else 0.0
            if share >= 0.5 and not self.half_at:
                self.half_at = at
            if share >= 0.9 and not self.ninety_at:
                self.ninety_at = at
        if m := _USED.search(line):
            self.used = int(m.group(1))
        if m := _WAITING.search(line):
            self.waiting = int(m.group(1))
        if line.startswith("health") and (m := _VALIDATING.search(line)):
            self.validating = int(m.group(1))
            if self.nodes >= NODES and self.validating == 0 and not self.validated_at:
                self.validated_at = at


def _children(root: int) -> dict[int, str]:
    """Every process under ``root``, by pid, named by what it runs."""
    parents: dict[int, int] = {}
    args: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError):
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
            args[int(entry.name)] = (entry / "cmdline").read_bytes().decode().split("\0")
    found: dict[int, str] = {root: "baton up"}
    grew = True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in found and pid not in found:
                found[pid] = _name(args.get(pid, []))
                grew = True
    return found


def _name(argv: list[str]) -> str:
    if argv and argv[0].endswith("nats-server"):
        return "nats-server"
    if "baton.services.cli" in argv:
        rest = argv[argv.index("baton.services.cli") + 1 :]
        return rest[0] if rest else "baton"
    return Path(argv[0]).name if argv else "?"


def _cpu_rss(pid: int) -> tuple[float, float]:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    return cpu, rss


def _api(url: str) -> tuple[dict[str, float], dict[str, float]]:
    """simcluster's requests ("VERB resource[/sub]" -> so far) and its workload's
    figures: jobs submitted, how late the replay is, each controller's queue."""
    body = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    out: dict[str, float] = defaultdict(float)
    for resource, sub, verb, value in _API.findall(body):
        out[f"{verb} {resource}{'/' + sub if sub else ''}"] += float(value)
    return out, {name: float(v) for name, v in _WORKLOAD.findall(body)}


async def _streams(env: dict[str, str]) -> dict[str, int]:
    options = auth_options(seed_file=env.get("BATON_NATS_NKEY_SEED_FILE", ""))
    # 1 and 0, not 0: nats-py reads max_reconnect_attempts=0 as "no limit" on the first
    # connect, so a sample after `baton up` died retried forever and the bench hung
    nc = await nats.connect(env["BATON_NATS_URL"], connect_timeout=5, allow_reconnect=False,
                            max_reconnect_attempts=1, reconnect_time_wait=0,
                            **options)  # fmt: skip
    try:
        infos = await nc.jetstream().streams_info()
        return {i.config.name or "?": i.state.last_seq for i in infos}
    finally:
        await nc.close()


def _sim_url(env: dict[str, str]) -> str:
    kubeconfig = Path(env.get("KUBECONFIG", "/nonexistent"))
    m = re.search(r"server: (\S+)", kubeconfig.read_text()) if kubeconfig.exists() else None
    return m.group(1) if m else ""


def _partial(env: dict[str, str]) -> frozenset[str]:
    """Gangs partly bound now, as the e2e LLM test reads them from the API."""
    return frozenset(partial(asyncio.run(read(env["KUBECONFIG"]))))


def _sample(root: int, env: dict[str, str], at: float, progress: Progress) -> Sample:
    cpu: dict[str, float] = defaultdict(float)
    rss: dict[str, float] = defaultdict(float)
    for pid, name in _children(root).items():
        with contextlib.suppress(OSError):
            c, r = _cpu_rss(pid)
            cpu[name] += c
            rss[name] += r
    api: dict[str, float] = {}
    workload: dict[str, float] = {}
    streams: dict[str, int] = {}
    with contextlib.suppress(Exception):  # not up yet, or going down: an empty sample
        api, workload = _api(_sim_url(env))
    with contextlib.suppress(Exception):
        streams = asyncio.run(_streams(env))
    lag: dict[str, float] = {}
    behind: dict[str, dict[float, float]] = defaultdict(dict)
    for pair in env.get("BATON_UP_OPS_PORTS", "").split(","):
        name, _, port = pair.partition(":")
        with contextlib.suppress(Exception):  # a service not up (yet): no figure
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
            lag |= {service: float(v) for service, v in _LAG.findall(text.decode())}
            for service, buckets in lag_buckets(text.decode()).items():
                behind[service] |= buckets
    found: frozenset[str] = frozenset()
    if RECORD:
        with contextlib.suppress(Exception):
            found = _partial(env)
    return Sample(at, dict(cpu), dict(rss), api, streams, progress.allocated,
                  progress.waiting, progress.used, found, lag, dict(behind), workload)  # fmt: skip


def _record(env: dict[str, str], into: Path) -> str:
    """``baton replay --record`` from the running bus, then ``--compare``: the verdict."""
    baton = [sys.executable, "-m", "baton.services.cli", "replay"]
    child = {**os.environ, **env}
    recorded = subprocess.run([*baton, "--record", str(into)], env=child, text=True,
                              capture_output=True, timeout=600)  # fmt: skip
    if recorded.returncode != 0:
        return f"record failed ({recorded.returncode}): {recorded.stderr.strip()[-400:]}"
    compared = subprocess.run([*baton, "--from", str(into), "--compare"], env=child, text=True,
                              capture_output=True, timeout=1800)  # fmt: skip
    lines = compared.stdout.strip().splitlines()
    return f"exit {compared.returncode}: " + " / ".join(lines[:1] + lines[-2:])


STEADY_SHARE = 0.97  # of the GPUs the steady workload asks for (whole gangs leave gaps)
STEADY_SEED = 7


def steady_trace(folder: Path, nodes: int) -> str:
    """``BATON_WHOLE_WORKLOAD=steady``: a Philly-format trace whose jobs (the synthetic
    mix's shapes and teams) are all submitted at once, ask for ``STEADY_SHARE`` of the
    GPUs, and never end. Once they run nothing changes: the last minute is the steady
    state of a full cluster (issue 21's "when nothing changes")."""
    rng = random.Random(STEADY_SEED)
    weights = [w for w, _, _ in SYNTHETIC_SHAPES]
    cluster = sum(p.count * p.gpus for p in default_spec(nodes).pools)  # as baton up makes it
    left = int(STEADY_SHARE * cluster)
    rows = ["job_id,submit_s,num_gpus,duration_s,vc"]
    while left > 0:
        _, pods, per_pod = rng.choices(SYNTHETIC_SHAPES, weights)[0]
        gpus = pods * per_pod
        if gpus > left:
            continue  # a smaller one comes (a 1-GPU job is the likeliest)
        rows.append(f"steady{len(rows)},0,{gpus},1000000000,{rng.choice('abc')}")
        left -= gpus
    path = folder / "steady.csv"
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def run() -> tuple[Progress, list[Sample]]:
    progress = Progress()
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory(prefix="bench-whole-") as tmp:
        endpoints = Path(tmp) / "up.env"
        store = Path(KEEP) if KEEP else Path(tmp) / "store"
        argv = [
            sys.executable,
            "-m",
            "baton.services.cli",
            "up",
            "--nodes",
            str(NODES),
            "--workload",
            steady_trace(Path(tmp), NODES) if WORKLOAD == "steady" else WORKLOAD,
            "--duration",
            # stopped by the bench after its last sample (RECORD: after recording): a
            # sample taken while `baton up` stopped its services found none of them
            str(SECONDS + 900 if RECORD else SECONDS + 120),
            "--endpoints-file",
            str(endpoints),
            "--store",
            str(store),
            *(["--speed", SPEED] if SPEED else []),
            *(["--load", LOAD] if LOAD else []),
            *(["--devices", DEVICES] if DEVICES else []),
        ]  # --store: baton up keeps its run directory (the logs) for the lease count
        started = time.monotonic()
        up = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert up.stdout is not None
        stdout = up.stdout

        def reading() -> None:
            for line in stdout:
                progress.read(line.strip(), time.monotonic() - started)

        reader = threading.Thread(target=reading, daemon=True)
        reader.start()
        try:
            while up.poll() is None:
                time.sleep(EVERY)
                if up.poll() is None:
                    at = time.monotonic() - started
                    samples.append(_sample(up.pid, endpoints_of(endpoints), at, progress))
                    if RECORD and at >= SECONDS:
                        into = Path(KEEP or tmp) / "run.jsonl"  # kept with the store
                        progress.replay = _record(endpoints_of(endpoints), into)
                        with contextlib.suppress(Exception):  # the verdict says what failed
                            said = allocation.summary(str(into), progress.gpus)
                            progress.allocation = said.replace("\n", "; ")
                    if at >= SECONDS:
                        break
        finally:
            if up.poll() is None:
                up.terminate()
            up.wait(timeout=120)
            reader.join(timeout=10)
    if up.returncode not in (0, -15) and (time.monotonic() - started) < SECONDS:
        print(f"baton up ended early (exit {up.returncode}); its last lines:", file=sys.stderr)
        print("\n".join(progress.lines), file=sys.stderr)
    return progress, samples


def _leases(logs: str) -> tuple[int, int]:
    acquired = lost = 0
    for path in Path(logs).glob("*.log") if logs else []:
        with contextlib.suppress(OSError):
            text = path.read_text(errors="replace")
            acquired += text.count('"lease acquired"')
            lost += text.count('"lease lost"')
    return acquired, lost


def _rates(first: Counts, last: Counts, seconds: float) -> dict[str, float]:
    return {k: (v - first.get(k, 0)) / seconds for k, v in last.items() if seconds > 0}


def _at(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds else "not reached"


def report(progress: Progress, samples: list[Sample]) -> None:
    flags = "".join(f" --{k} {v}" for k, v in (("speed", SPEED), ("load", LOAD)) if v)
    print(f"`baton up --nodes {NODES} --workload {WORKLOAD}{flags}` for {SECONDS:.0f} s, "
          f"sampled every {EVERY:.0f} s\n")  # fmt: skip
    print("| milestone | since start |\n|---|---|")
    print(f"| every node validated | {_at(progress.validated_at)} |")
    print(f"| 50% of GPUs allocated | {_at(progress.half_at)} |")
    print(f"| 90% of GPUs allocated | {_at(progress.ninety_at)} |")
    submitted = [int(s.workload.get(_SUBMITTED, 0)) for s in samples]
    jobs = trace_jobs(max(submitted, default=0))
    asked = [offered(jobs, n) for n in submitted]
    if jobs:
        offers_at = next((s.at for s, n in zip(samples, asked, strict=True)
                          if n >= 0.9 * (progress.gpus or 1)), 0.0)  # fmt: skip
        print(f"| the trace offers 90% (every job started on arrival) | {_at(offers_at)} |")
    print(f"| at the end | {progress.allocated}/{progress.gpus} GPUs allocated, "
          f"{max(progress.validating, 0)} nodes validating |")  # fmt: skip
    acquired, lost = _leases(progress.logs)
    print(f"| leases | {acquired} acquired, {lost} lost |")
    if RECORD:
        broken = set().union(*(a.partial & b.partial for a, b in itertools.pairwise(samples)))
        print(f"| gangs partly bound in two samples running | {len(broken)} "
              f"{sorted(broken)[:5] if broken else ''} |")  # fmt: skip
        print(f"| baton replay --compare | {progress.replay or 'not run'} |")
        print(f"| GPUs allocated over time (the recording) | {progress.allocation or '-'} |")
    print()
    _timeline(progress, samples, asked if jobs else [])
    if len(samples) < 2:
        print("(fewer than two samples: nothing to rate)")
        return
    last = samples[-1]
    steady = next((s for s in samples if s.at >= last.at - STEADY_S), samples[0])
    window = last.at - steady.at
    first = samples[0]
    steady_cpu = _rates(steady.cpu, last.cpu, window)
    peak = {name: max(s.rss.get(name, 0.0) for s in samples) for name in last.rss}
    print("| process | CPU s | CPU, last minute (cores) | peak RSS MiB |\n|---|---|---|---|")
    for name in sorted(last.cpu, key=lambda n: -last.cpu[n]):
        print(f"| {name} | {last.cpu[name]:.0f} | {steady_cpu.get(name, 0.0):.2f} "
              f"| {peak[name]:.0f} |")  # fmt: skip
    baton = sum(v for k, v in steady_cpu.items() if k not in ("nats-server", "sim"))
    print(f"| Baton's own (not nats-server, not simcluster) | | {baton:.2f} | |\n")
    _lags(samples)
    _table("API requests", first.api, steady.api, last.api, window)
    _table("bus messages (stream)", first.streams, steady.streams, last.streams, window)


def _lags(samples: list[Sample]) -> None:
    """Each runner's lag: at each sample (``baton_runner_lag_seconds``), the largest and
    the last; and over every batch of the run (``baton_runner_batch_lag_seconds``), how
    many were more than ``OVER_S`` behind and the bucket of the worst, so "no service
    behind its input by more than 5 s at any time" is read off every batch, not samples."""
    names = sorted({name for s in samples for name in s.lag})
    if not names:
        return
    print(f"| runner | lag, largest sampled (s) | at (s) | lag, last (s) "
          f"| batches over {OVER_S:.0f} s / all | worst batch (s) |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for name in names:
        seen = [(s.lag[name], s.at) for s in samples if name in s.lag]
        worst, at = max(seen)
        over, total, within = behind(next((s.behind[name] for s in reversed(samples)
                                           if name in s.behind), {}))  # fmt: skip
        print(f"| {name} | {worst:.1f} | {at:.0f} | {seen[-1][0]:.1f} | {over:.0f} / {total:.0f} "
              f"| {within} |")  # fmt: skip
    print()


def lag_buckets(metrics: str) -> dict[str, dict[float, float]]:
    """``{service: {le: batches}}`` from a /metrics page (prometheus_client's parser)."""
    found: dict[str, dict[float, float]] = defaultdict(dict)
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == "baton_runner_batch_lag_seconds_bucket":
                found[sample.labels["service"]][float(sample.labels["le"])] = sample.value
    return dict(found)


def behind(buckets: dict[float, float]) -> tuple[float, float, str]:
    """(batches over ``OVER_S``, all batches, the worst one's bucket) from a histogram's
    cumulative buckets (``{le: count}``, ``inf`` the total)."""
    total = buckets.get(float("inf"), 0.0)
    over = total - buckets.get(OVER_S, total)
    bounds = sorted(buckets)
    top = next((i for i, le in enumerate(bounds) if buckets[le] >= total), 0)
    low = f"{bounds[top - 1]:g}" if top > 0 else "0"
    high = f"{bounds[top]:g}" if bounds else "-"
    return over, total, f"{low}-{high}" if total else "-"


def trace_jobs(
    count: int, *, workload: str = WORKLOAD, nodes: int = NODES, load: str = LOAD
) -> list[Job]:
    """The first ``count`` jobs simcluster replays for ``workload`` (synthetic, llm), in
    order ([] for a trace file): the synthetic mix never ends."""
    if workload not in ("synthetic", "llm"):
        return []
    argv = ["--nodes", str(nodes), "--trace", workload, *(["--load", load] if load else [])]
    return list(itertools.islice(simcluster.jobs(simcluster.parse_args(argv)), count))


def offered(jobs: list[Job], submitted: int) -> int:
    """GPUs the trace asks for once its first ``submitted`` jobs are in: those of them
    not finished by the last one's submit time, had each started the moment it came.
    What a perfect scheduler could have allocated; the workload, not Baton, caps the
    share allocated below it."""
    came = jobs[:submitted]
    if not came:
        return 0
    now = came[-1].submit_s
    return sum(j.gpus for j in came if j.submit_s + j.duration_s > now)


def _timeline(progress: Progress, samples: list[Sample], asked: list[int]) -> None:
    """Per sample; ``asked``: what the trace offered at each ([]: not known)."""
    total = progress.gpus or 1
    print(
        "| s | GPUs allocated | offered by the trace | admitted (team's quota used) "
        "| gangs waiting | partly bound | jobs submitted (replay behind, s) "
        "| Job controller's queue |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for i, s in enumerate(samples):
        w = s.workload
        ask = f"{asked[i]} ({asked[i] / total:.0%})" if asked else "-"
        submitted = f"{w.get(_SUBMITTED, 0):.0f} ({w.get(_BEHIND, 0):.1f})" if w else "-"
        print(f"| {s.at:.0f} | {s.allocated} ({s.allocated / total:.1%}) | {ask} | {s.used} "
              f"| {s.waiting} | {len(s.partial)} | {submitted} "
              f"| {w.get(_JOB_QUEUE, 0):.0f} |")  # fmt: skip
    full = [s for s in samples if progress.ninety_at and s.at >= progress.ninety_at]
    if full:  # once the cluster first filled: the steady state
        shares = [s.allocated / total for s in full]
        print(f"\nFrom {progress.ninety_at:.0f} s (90% first reached) on, {len(full)} samples: "
              f"mean {sum(shares) / len(shares):.1%}, min {min(shares):.1%}")  # fmt: skip
    print()


def _table(title: str, first: Counts, steady: Counts, last: Counts, window: float) -> None:
    print(f"| {title} | total | per s, last minute |\n|---|---|---|")
    steady_rate = _rates(steady, last, window)
    for key in sorted(last, key=lambda k: -(last[k] - first.get(k, 0))):
        print(f"| {key} | {last[key]:.0f} | {steady_rate.get(key, 0.0):.1f} |")
    print(f"| all | {sum(last.values()):.0f} | {sum(steady_rate.values()):.1f} |\n")


def main() -> None:
    progress, samples = run()
    report(progress, samples)


if __name__ == "__main__":
    main()
