"""The rules tables: what each Xid, GPU field, node report and condition means, and that
the docs print the tables as they are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from baton.proto.health import HealthPolicy
from baton.proto.k8s import Condition
from baton.proto.telemetry import Disk, GpuReport, GpuStatus, Nic, NodeReport
from baton.services.health.core import rules, states

pytestmark = pytest.mark.unit
POLICY = HealthPolicy()

XIDS = [
    # xid, acts, drain, remedy
    (13, False, "grace", "reboot"),
    (31, False, "grace", "reboot"),
    (43, False, "grace", "reboot"),
    (48, True, "now", "reboot"),
    (63, True, "grace", "reboot"),
    (64, True, "grace", "replace"),
    (74, True, "now", "reboot"),
    (79, True, "now", "reboot"),
    (92, True, "grace", "reboot"),
    (94, True, "grace", "reboot"),
    (95, True, "now", "reboot"),
    (119, True, "now", "reboot"),
    (120, True, "now", "reboot"),
    (999, False, "grace", "reboot"),  # not in the catalog
]


@pytest.mark.parametrize(("xid", "acts", "drain", "remedy"), XIDS)
def test_xid_catalog(xid: int, acts: bool, drain: str, remedy: str) -> None:
    rule = rules.xid_rule(xid)
    assert (rule.acts, rule.drain, rule.remedy) == (acts, drain, remedy)
    assert rule.latched  # an Xid has no all-clear of its own


GPU_FIELDS: list[tuple[str, dict[str, Any]]] = [
    ("gpu-lost", {"present": False}),
    ("ecc-dbe", {"ecc_volatile_dbe": 1}),
    ("row-remap-failure", {"row_remap_failure": True}),
    ("row-remap-pending", {"row_remap_pending": True}),
    ("pages-pending", {"retired_pages_pending": True}),
    ("nvlink-errors", {"nvlink_errors": 101}),
    ("recovery-reboot", {"recovery_action": "reboot"}),
    ("recovery-reset", {"recovery_action": "drain-and-reset"}),
    ("zombie-memory", {"zombie_mib": 2048}),
]


@pytest.mark.parametrize(("rule", "fields"), GPU_FIELDS, ids=[r for r, _ in GPU_FIELDS])
def test_each_gpu_rule_reads_its_field(rule: str, fields: dict[str, Any]) -> None:
    report = GpuReport(node="n", at=0, gpus=(GpuStatus(index=0), GpuStatus(index=3, **fields)))
    found = rules.gpu_signals(report, POLICY)
    assert list(found) == [f"{rule}:3"]
    assert found[f"{rule}:3"][1].startswith("GPU 3: ")


def test_a_healthy_gpu_and_counts_under_their_thresholds_show_nothing() -> None:
    fine = GpuStatus(index=0, ecc_volatile_sbe=5000, ecc_volatile_dbe=0, nvlink_errors=100,
                     zombie_mib=1024, temperature_c=80)  # fmt: skip
    assert rules.gpu_signals(GpuReport(node="n", at=0, gpus=(fine,)), POLICY) == {}
    strict = HealthPolicy(nvlink_errors_max=0)
    assert list(rules.gpu_signals(GpuReport(node="n", at=0, gpus=(fine,)), strict)) == [
        "nvlink-errors:0"
    ]


def test_node_reports() -> None:
    report = NodeReport(
        node="n", at=0, gpus_expected=8, gpus_found=7,
        disks=(Disk(mount="/", used_ratio=0.97), Disk(mount="/raid", read_only=True),
               Disk(mount="/scratch", error="EACCES")),
        nics=(Nic(name="eth0", up=True), Nic(name="ib1", up=False)),
    )  # fmt: skip
    found = rules.node_signals(report, POLICY)
    assert sorted(found) == [
        "disk-error:/scratch", "disk-full:/", "disk-read-only:/raid", "gpu-count:", "nic-down:ib1"
    ]  # fmt: skip
    assert found["gpu-count:"][1] == "7 of 8 GPUs answer"
    assert rules.node_signals(NodeReport(node="n", at=0, gpus_found=8), POLICY) == {}


CONDITIONS = [
    ("Ready", "False", True),
    ("Ready", "Unknown", True),
    ("Ready", "True", False),
    ("DiskPressure", "True", True),
    ("DiskPressure", "False", False),
    ("KernelDeadlock", "True", True),
    ("GPUHealthy", "False", True),
    ("GPUHealthy", "True", False),
    ("SomeoneElsesCondition", "True", False),
]


@pytest.mark.parametrize(("kind", "status", "bad"), CONDITIONS)
def test_conditions(kind: str, status: str, bad: bool) -> None:
    found = rules.condition_signals((Condition(type=kind, status=status, reason="X"),))  # type: ignore[arg-type]
    assert (kind in found) == bad


def test_every_rule_name_is_unique_and_policy_overrides_durations() -> None:
    names = [r.name for r in rules.RULES.values()]
    assert len(names) == len(set(names))
    assert rules.CONDITIONS["Ready"].rule.after(HealthPolicy(after_s={"Ready": 30.0})) == 30.0
    assert rules.CONDITIONS["Ready"].rule.after(POLICY) == 120.0


def test_the_docs_print_the_tables_as_they_are() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "health.md").read_text()
    assert rules.markdown() in text, (
        "refresh docs/health.md: python -m baton.services.health.core.rules"
    )
    assert states.markdown() in text, (
        "refresh docs/health.md: python -m baton.services.health.core.states"
    )
