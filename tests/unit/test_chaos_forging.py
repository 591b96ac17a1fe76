"""The chaos run's trust checks can fail: a forged action applied, answered for another
reason, or found in the API fails them (``tests/chaos/forging.py``)."""

from __future__ import annotations

from types import SimpleNamespace as Obj
from typing import Any

import pytest

from baton.proto.actions import ActionResult
from tests.chaos import forging
from tests.chaos.run import Plan, Report, _trust_checks

pytestmark = pytest.mark.unit
FORGED = forging.forgeries("c1", node="gpu-0", namespace="default",
                           epochs={"gang": 7, "admission": 9})  # fmt: skip


def answered(outcome: str = "failed", **errors: str) -> dict[str, ActionResult]:
    return {
        f.body.id: ActionResult(action_id=f.body.id, action_type="x", by=f.body.by, at=0.0,
                                outcome=outcome,  # type: ignore[arg-type]
                                error=errors.get(f.body.id.replace("-", "_"), f"so {f.named}"))
        for f in FORGED
    }  # fmt: skip


def pod(name: str) -> Any:
    return Obj(metadata=Obj(name=name))


def node(*taints: str) -> Any:
    return Obj(metadata=Obj(name="gpu-0"), spec=Obj(taints=[Obj(key=k) for k in taints]))


def test_every_forgery_refused_naming_why_and_absent_passes() -> None:
    ok, said = forging.refused(FORGED, answered(), [pod("job-0")], [node("other")])
    assert ok, said
    assert {f.body.epoch for f in FORGED[1:]} == {0, 1009}  # epoch 0, and ahead of 9


@pytest.mark.parametrize(
    ("results", "pods", "taints"),
    [
        (answered(outcome="applied"), [], ()),  # the protection gone: applied
        (answered(chaos_epoch_zero="node not found"), [], ()),  # refused, not for its epoch
        ({}, [], ()),  # never answered
        (answered(), [pod(forging.FORGED_POD)], ()),  # the pod made all the same
        (answered(), [], (forging.FORGED_TAINT,)),  # the taint applied all the same
    ],
)
def test_a_forgery_applied_or_refused_for_another_reason_fails(
    results: dict[str, ActionResult], pods: list[Any], taints: tuple[str, ...]
) -> None:
    ok, said = forging.refused(FORGED, results, pods, [node(*taints)])
    assert not ok, said


@pytest.mark.parametrize(
    ("skew", "ok"),
    [
        ((True, 3.1), True),
        ((False, 3.1), False),  # it took the lease from a renewing leader
        ((True, 30.5), False),  # the takeover waited for its wall clock (15 TTLs)
        ((True, None), False),  # never taken over
    ],
)
def test_a_skewed_replica_that_steals_or_slows_a_takeover_fails(
    skew: tuple[bool, float | None], ok: bool
) -> None:
    report = Report(plan=Plan(ttl=2.0), skew=skew)
    _trust_checks(report, {}, [], [])
    ((passed, said),) = report.checks.values()
    assert passed is ok, said
