"""The health rules, as tables the docs print: what each signal means for the node.

Every piece of evidence is a row of one table. A ``Rule`` says how long the signal
must hold before it counts (``after_s``; 0: at once), whether the job on the node is
already broken (``drain="now"``) or may checkpoint first (``"grace"``), what would fix
the node (``reboot`` or ``replace``), and whether the signal is *latched*: an event
(an Xid) has no "all clear" of its own, so it holds until the node passes a preflight.

| table | evidence from |
|---|---|
| ``XIDS`` | ``telemetry.xid`` (NVIDIA's Xid catalog, bucketed) |
| ``GPU_RULES`` | ``telemetry.gpu`` (what DCGM's health watches read: memory, PCIe, NVLink) |
| ``NODE_RULES`` | ``telemetry.node`` (GPU count, disks, NICs) |
| ``CONDITIONS`` | ``k8s.node`` conditions (the kubelet's and node-problem-detector's) |
| ``OTHER`` | heartbeats, preflight pods, flapping, state restored from the node |

``python -m baton.services.health.core.rules`` prints them as Markdown (``docs/health.md``). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from baton.proto.health import HealthPolicy, Remedy
from baton.proto.k8s import Condition
from baton.proto.telemetry import GpuReport, GpuStatus, NodeReport

Drain = Literal["now", "grace"]


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    meaning: str
    after_s: float = 0.0
    drain: Drain = "grace"
    remedy: Remedy = "reboot"
    latched: bool = False
    acts: bool = True  # False: recorded as evidence, no node action (application Xids)
    flaps: bool = False  # a link-like signal: flap_count episodes in flap_window_s count

    def after(self, policy: HealthPolicy) -> float:
        return policy.after_s.get(self.name, self.after_s)


# -- Xids: NVIDIA's catalog, bucketed -------------------------------------------


@dataclass(frozen=True, slots=True)
class Bucket:
    name: str
    xids: tuple[int, ...]
    meaning: str
    drain: Drain = "grace"
    remedy: Remedy = "reboot"
    acts: bool = True


BUCKETS: tuple[Bucket, ...] = (
    Bucket("application", (13, 31, 43, 45, 154),
           "the job's own fault (bad address, MMU fault, stopped channel), or a recovery-action "
           "notice read from the GPU report instead: no node action", acts=False),
    Bucket("memory-fatal", (48, 95), "uncorrectable ECC error: the job died", drain="now"),
    Bucket("memory", (63, 92, 94),
           "row remap pending, high single-bit rate, contained ECC: reset at the next drain"),
    Bucket("memory-failed", (64,), "row remapping failed: no spare rows left", remedy="replace"),
    Bucket("bus", (79,), "GPU has fallen off the bus", drain="now"),
    Bucket("nvlink", (74,), "NVLink error: collectives over the link fail", drain="now"),
    Bucket("gsp", (119, 120), "GPU System Processor timeout or error: the GPU hangs",
           drain="now"),
)  # fmt: skip


def _xid_rules() -> dict[int, tuple[Bucket, Rule]]:
    found: dict[int, tuple[Bucket, Rule]] = {}
    for bucket in BUCKETS:
        for xid in bucket.xids:
            rule = Rule(name=f"xid-{xid}", meaning=bucket.meaning, drain=bucket.drain,
                        remedy=bucket.remedy, latched=True, acts=bucket.acts)  # fmt: skip
            found[xid] = (bucket, rule)
    return found


XIDS = _xid_rules()
UNKNOWN_XID = Rule("xid-other", "an Xid not in the catalog: recorded, no node action",
                   latched=True, acts=False)  # fmt: skip


def xid_rule(xid: int) -> Rule:
    found = XIDS.get(xid)
    return found[1] if found is not None else UNKNOWN_XID


# -- GPU reports -------------------------------------------------------------------

GpuCheck = Callable[[GpuStatus, HealthPolicy], str]  # '' when fine, else what is wrong


@dataclass(frozen=True, slots=True)
class GpuRule:
    rule: Rule
    watch: str  # the DCGM health watch that reads the same thing
    check: GpuCheck


_RESET_ACTIONS = ("reset", "bus-reset", "drain", "drain-and-reset", "recover-imex-domain")

GPU_RULES: tuple[GpuRule, ...] = (
    GpuRule(Rule("gpu-lost", "the GPU does not answer (GPU_IS_LOST)", drain="now"), "PCIe",
            lambda g, p: "" if g.present else "not present"),
    GpuRule(Rule("ecc-dbe", "uncorrectable ECC errors since the driver loaded", drain="now"),
            "memory", lambda g, p: f"{g.ecc_volatile_dbe} uncorrectable ECC errors"
            if g.ecc_volatile_dbe else ""),
    GpuRule(Rule("row-remap-failure", "a row could not be remapped", remedy="replace"),
            "memory", lambda g, p: "row remapping failed" if g.row_remap_failure else ""),
    GpuRule(Rule("row-remap-pending", "a row remap waits for a GPU reset"), "memory",
            lambda g, p: "row remap pending" if g.row_remap_pending else ""),
    GpuRule(Rule("pages-pending", "a page retirement waits for a reboot (pre-Ampere)"),
            "memory", lambda g, p: "page retirement pending" if g.retired_pages_pending else ""),
    GpuRule(Rule("nvlink-errors", "NVLink CRC/replay/recovery errors over nvlink_errors_max"),
            "NVLink", lambda g, p: f"{g.nvlink_errors} NVLink errors"
            if (g.nvlink_errors or 0) > p.nvlink_errors_max else ""),
    GpuRule(Rule("recovery-reboot", "the driver asks for a node reboot", drain="now"),
            "driver", lambda g, p: f"driver asks: {g.recovery_action}"
            if g.recovery_action in ("reboot", "system-reboot") else ""),
    GpuRule(Rule("recovery-reset", "the driver asks for a GPU reset or drain"), "driver",
            lambda g, p: f"driver asks: {g.recovery_action}"
            if g.recovery_action in _RESET_ACTIONS else ""),
    GpuRule(Rule("zombie-memory", "memory held by processes of no pod over zombie_mib_max",
                 after_s=60.0), "memory",
            lambda g, p: f"{g.zombie_mib} MiB held by no pod"
            if (g.zombie_mib or 0) > p.zombie_mib_max else ""),
)  # fmt: skip


# -- node reports ----------------------------------------------------------------

NodeCheck = Callable[[NodeReport, HealthPolicy], list[tuple[str, str]]]  # (key, detail)


@dataclass(frozen=True, slots=True)
class NodeRule:
    rule: Rule
    check: NodeCheck


def _gpu_count(r: NodeReport, p: HealthPolicy) -> list[tuple[str, str]]:
    if r.gpus_expected is None or r.gpus_found is None or r.gpus_found >= r.gpus_expected:
        return []
    return [("", f"{r.gpus_found} of {r.gpus_expected} GPUs answer")]


NODE_RULES: tuple[NodeRule, ...] = (
    NodeRule(Rule("gpu-count", "fewer GPUs answer than the node should have", drain="now"),
             _gpu_count),
    NodeRule(Rule("disk-read-only", "a filesystem was remounted read-only"),
             lambda r, p: [(d.mount, f"{d.mount} read-only") for d in r.disks if d.read_only]),
    NodeRule(Rule("disk-full", "a disk over disk_full_ratio: checkpoints fail", after_s=60.0),
             lambda r, p: [(d.mount, f"{d.mount} {d.used_ratio:.0%} used") for d in r.disks
                           if d.used_ratio >= p.disk_full_ratio and not d.read_only]),
    NodeRule(Rule("disk-error", "a mount could not be read", after_s=300.0),
             lambda r, p: [(d.mount, f"{d.mount}: {d.error}") for d in r.disks if d.error]),
    NodeRule(Rule("nic-down", "a NIC lost its link", after_s=30.0, flaps=True),
             lambda r, p: [(n.name, f"NIC {n.name} down") for n in r.nics if not n.up]),
)  # fmt: skip


# -- node conditions ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConditionRule:
    rule: Rule
    bad: Literal["True", "False"]  # the status that is bad (Unknown counts as bad for Ready)
    source: str


CONDITIONS: dict[str, ConditionRule] = {
    c.rule.name: c
    for c in (
        ConditionRule(Rule("Ready", "the kubelet stopped posting Ready", after_s=120.0,
                           drain="now", flaps=True), "False", "kubelet"),
        ConditionRule(Rule("NetworkUnavailable", "the node's network is not set up",
                           after_s=60.0, flaps=True), "True", "kubelet"),
        ConditionRule(Rule("DiskPressure", "nodefs/imagefs over the eviction threshold",
                           after_s=120.0), "True", "kubelet"),
        ConditionRule(Rule("MemoryPressure", "memory over the eviction threshold",
                           after_s=300.0), "True", "kubelet"),
        ConditionRule(Rule("PIDPressure", "process ids nearly used up", after_s=300.0),
                      "True", "kubelet"),
        ConditionRule(Rule("KernelDeadlock", "a task hung in the kernel", drain="now"),
                      "True", "node-problem-detector"),
        ConditionRule(Rule("ReadonlyFilesystem", "the root filesystem went read-only"),
                      "True", "node-problem-detector"),
        ConditionRule(Rule("FrequentKubeletRestart", "the kubelet keeps restarting",
                           after_s=300.0), "True", "node-problem-detector"),
        ConditionRule(Rule("FrequentContainerdRestart", "containerd keeps restarting",
                           after_s=300.0), "True", "node-problem-detector"),
        ConditionRule(Rule("CorruptDockerOverlay2", "the overlay filesystem is corrupt"),
                      "True", "node-problem-detector"),
        ConditionRule(Rule("GPUHealthy", "a GPU health monitor marked a GPU bad", drain="now"),
                      "False", "GPU problem detector"),
    )
}  # fmt: skip


# -- the rest -------------------------------------------------------------------

HEARTBEAT = Rule("heartbeat", "the node's agent stopped beating (silence_beats keep-alives)")
PREFLIGHT = Rule("preflight", "a preflight check failed on the node", latched=True)
FLAPPING = Rule("flapping", "a signal went bad flap_count times within flap_window_s",
                latched=True)  # fmt: skip
RESTORED = Rule("restored", "evidence recorded on the node before a restart", latched=True)
DEVICES = Rule("devices-disagree", "a DRA driver publishes a device the agent does not see, "
               "or under another PCIe root", after_s=60.0)  # fmt: skip
OTHER: tuple[Rule, ...] = (HEARTBEAT, PREFLIGHT, FLAPPING, RESTORED, DEVICES)

RULES: dict[str, Rule] = {
    r.name: r
    for r in (
        *(rule for _, rule in XIDS.values()),
        UNKNOWN_XID,
        *(g.rule for g in GPU_RULES),
        *(n.rule for n in NODE_RULES),
        *(c.rule for c in CONDITIONS.values()),
        *OTHER,
    )
}


# -- evaluation: a report -> the signals it shows --------------------------------

Found = dict[str, tuple[Rule, str]]  # signal key -> (rule, detail)


def gpu_signals(report: GpuReport, policy: HealthPolicy) -> Found:
    found: Found = {}
    for gpu in report.gpus:
        where = f"GPU {gpu.index}" + (f" ({gpu.bus_id})" if gpu.bus_id else "")
        for row in GPU_RULES:
            detail = row.check(gpu, policy)
            if detail:
                found[f"{row.rule.name}:{gpu.index}"] = (row.rule, f"{where}: {detail}")
    return found


def node_signals(report: NodeReport, policy: HealthPolicy) -> Found:
    found: Found = {}
    for row in NODE_RULES:
        for key, detail in row.check(report, policy):
            found[f"{row.rule.name}:{key}"] = (row.rule, detail)
    return found


def condition_signals(conditions: tuple[Condition, ...]) -> Found:
    found: Found = {}
    for c in conditions:
        row = CONDITIONS.get(c.type)
        if row is None:
            continue
        bad = c.status == row.bad or (c.type == "Ready" and c.status == "Unknown")
        if bad:
            words = c.reason + (f": {c.message}" if c.message else "")
            found[row.rule.name] = (row.rule, f"{c.type}={c.status} {words}".strip())
    return found


# -- the tables in words ----------------------------------------------------------


def _rows(header: tuple[str, ...], rows: Iterator[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _yes(flag: bool) -> str:
    return "yes" if flag else "-"


def _secs(s: float) -> str:
    return "at once" if s == 0 else f"{s:g} s"


def markdown() -> str:
    xids = _rows(
        ("Xids", "bucket", "meaning", "node action", "drain", "remedy"),
        (
            (", ".join(map(str, b.xids)), b.name, b.meaning,
             "quarantine" if b.acts else "none", b.drain if b.acts else "-",
             b.remedy if b.acts else "-")
            for b in BUCKETS
        ),
    )  # fmt: skip
    gpus = _rows(
        ("rule", "DCGM watch", "meaning", "counts", "drain", "remedy"),
        ((g.rule.name, g.watch, g.rule.meaning, _secs(g.rule.after_s), g.rule.drain,
          g.rule.remedy) for g in GPU_RULES),
    )  # fmt: skip
    nodes = _rows(
        ("rule", "meaning", "counts", "flaps counted", "drain", "remedy"),
        ((n.rule.name, n.rule.meaning, _secs(n.rule.after_s), _yes(n.rule.flaps), n.rule.drain,
          n.rule.remedy) for n in NODE_RULES),
    )  # fmt: skip
    conditions = _rows(
        ("condition", "bad when", "set by", "counts after", "flaps counted", "drain", "remedy"),
        ((name, c.bad + (" or Unknown" if name == "Ready" else ""), c.source,
          _secs(c.rule.after_s), _yes(c.rule.flaps), c.rule.drain, c.rule.remedy)
         for name, c in CONDITIONS.items()),
    )  # fmt: skip
    other = _rows(
        ("rule", "meaning", "latched"), ((r.name, r.meaning, _yes(r.latched)) for r in OTHER)
    )
    parts = [("Xids", xids), ("GPU reports", gpus), ("Node reports", nodes),
             ("Node conditions", conditions), ("Other evidence", other)]  # fmt: skip
    return "\n\n".join(f"#### {title}\n\n{table}" for title, table in parts) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
