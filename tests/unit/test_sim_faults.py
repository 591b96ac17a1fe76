"""Choosing fault targets and reading fault traces: pure, seeded, errors named."""

from __future__ import annotations

import pytest

from baton.services.simcluster.world import fault_trace, targets
from baton.services.simcluster.world.faults import Fault
from baton.services.simcluster.world.targets import Target, TargetError

pytestmark = pytest.mark.unit
NODES = [f"gpu-{i:05d}" for i in range(1, 101)]


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("gpu-00012", Target(nodes=("gpu-00012",))),
        ("gpu-00012 gpu-00013;gpu-00014", Target(nodes=("gpu-00012", "gpu-00013", "gpu-00014"))),
        ("label:baton.io/rack=gpu-rack-003", Target(selector="baton.io/rack=gpu-rack-003", seed=9)),
        ("random:5", Target(count=5, seed=9)),
        ("random:5@h100", Target(count=5, pool="h100", seed=9)),
        ("share:0.1@a100", Target(share=0.1, pool="a100", seed=9)),
    ],
)
def test_target_text(text: str, target: Target) -> None:
    assert targets.parse(text, seed=9) == target


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "empty"), ("random:x", "not a number"), ("share:2", "0..1"), ("random:-1", ">= 0")],
)
def test_bad_target_text(text: str, message: str) -> None:
    with pytest.raises(TargetError, match=message):
        targets.parse(text)


def test_random_choices_are_seeded_and_sized() -> None:
    five = targets.choose(Target(count=5, seed=1), NODES)
    assert len(five) == 5 and set(five) <= set(NODES) and five == sorted(five)
    assert targets.choose(Target(count=5, seed=1), list(reversed(NODES))) == five
    assert targets.choose(Target(count=5, seed=2), NODES) != five
    assert len(targets.choose(Target(share=0.1, seed=1), NODES)) == 10
    assert len(targets.choose(Target(share=0.001, seed=1), NODES)) == 1  # > 0: at least one
    assert targets.choose(Target(share=0.0), NODES) == []
    assert len(targets.choose(Target(count=500), NODES)) == 100
    assert targets.choose(Target(), ["b", "a"]) == ["a", "b"]
    with pytest.raises(TargetError, match="not both"):
        Target(count=1, share=0.5)


TRACE = """time_s,node,kind,detail,duration_s
0,gpu-00001,xid,xid=79 gpu=3,600
30,random:2@gpu,nic-down,nic=ib2,0
60,label:baton.io/rack=gpu-rack-000,node-notready,,120
90,gpu-00001,gpu-heal,,0
"""


def test_a_fault_trace_reads_into_rows() -> None:
    rows = fault_trace.parse(TRACE.splitlines(), seed=100)
    assert [(r.line, r.time_s, r.fault.kind, r.duration_s, r.heal) for r in rows] == [
        (2, 0.0, "xid", 600.0, False),
        (3, 30.0, "nic-down", 0.0, False),
        (4, 60.0, "node-notready", 120.0, False),
        (5, 90.0, "gpu-fault", 0.0, True),
    ]
    assert rows[0].fault == Fault(kind="xid", xid=79, gpu=3)
    assert rows[0].target == Target(nodes=("gpu-00001",))
    assert rows[1].target == Target(count=2, pool="gpu", seed=103)  # seed + line number
    assert rows[2].target.selector == "baton.io/rack=gpu-rack-000"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("x,gpu-00001,xid,,0", "line 2: time_s: not a number: 'x'"),
        ("-1,gpu-00001,xid,,0", "line 2: time_s: negative"),
        ("0,gpu-00001,melt,,0", "line 2: kind: unknown fault 'melt'"),
        ("0,gpu-00001,xid,xid=7,0", "line 2: detail: xid: unknown Xid 7"),
        ("0,random:lots,xid,,0", "line 2: node: random: not a number"),
        ("0,gpu-00001,xid,,soon", "line 2: duration_s: not a number"),
    ],
)
def test_bad_trace_rows_name_line_and_column(row: str, message: str) -> None:
    with pytest.raises(fault_trace.TraceError, match=message):
        fault_trace.parse(["time_s,node,kind,detail,duration_s", row], source="f.csv")
    with pytest.raises(fault_trace.TraceError, match="missing columns duration_s"):
        fault_trace.parse(["time_s,node,kind,detail", "0,a,xid,"])
