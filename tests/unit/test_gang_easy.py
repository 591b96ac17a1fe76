"""EASY backfill: a gang expected to end before the head can start may use the head's
reserved nodes; one that would delay the head, or has no estimate, may not."""

from __future__ import annotations

import msgspec
import pytest

from baton.proto import durations, keys
from baton.proto.k8s import Node, Taint
from baton.proto.placement import GangRestarted
from baton.services.gang import core
from baton.services.gang.core import estimates
from tests.support.builders import gang, node
from tests.unit.gang_helpers import apply, binds, feed, finish, make, tick, verdicts

pytestmark = pytest.mark.unit


def flat(count: int) -> list[Node]:
    return [node(f"n{i:03}", gpus=8).build() for i in range(count)]


def expecting(name: str, size: int, seconds: str | None, *, at: float, **kw: object) -> list:  # type: ignore[type-arg]
    group, members = gang(name, size, created_at=at, **kw)  # type: ignore[arg-type]
    if seconds is not None:
        notes = {**group.annotations, keys.EXPECTED_DURATION: seconds}
        group = msgspec.structs.replace(group, annotations=notes)
    return [group, *members]


def blocked_head(running: str | None, *, policy: core.Policy | None = None) -> core.State:
    """8 nodes; a 4-node gang runs from t=1 (expected to take ``running``); an 8-node head
    (created at 2) waits for it and reserves every node."""
    state = make(flat(8), policy=policy)
    feed(state, expecting("running", 4, running, at=0.0))
    apply(state, binds(tick(state, 1.0))[0], at=1.0)
    feed(state, expecting("head", 8, None, at=2.0, priority=5))
    assert binds(tick(state, 2.0)) == []
    return state


@pytest.mark.parametrize(
    ("case", "running", "small", "at", "backfills"),
    [
        ("ends before the head can start (t=1001)", "1000", "500", 3.0, True),
        ("ends exactly when the head can start", "1000", "998", 3.0, True),
        ("would delay the head", "1000", "2000", 3.0, False),
        ("no estimate: never on reserved nodes", "1000", None, 3.0, False),
        ("what blocks the head has no estimate: it may end now", None, "10", 3.0, False),
        ("what blocks the head overran its estimate: it may end now", "100", "10", 200.0, False),
        ("a Go-style duration", "1h", "30m", 3.0, True),
    ],
)
def test_backfill_on_the_heads_nodes_only_if_it_ends_before_the_head_starts(
    case: str, running: str | None, small: str | None, at: float, backfills: bool
) -> None:
    state = blocked_head(running)
    feed(state, expecting("small", 2, small, at=at), at=at)
    out = tick(state, at)
    assert [b.gang for b in binds(out)] == (["default/small"] if backfills else []), case
    if not backfills:
        (verdict,) = (v for v in verdicts(out) if v.gang == "default/small")
        assert verdict.blocked_by == "default/head"


def test_the_head_starts_on_time_after_a_backfill() -> None:
    state = blocked_head("1000")
    feed(state, expecting("small", 4, "500", at=3.0), at=3.0)
    (small,) = binds(tick(state, 3.0))
    apply(state, small, at=3.0)
    assert state.cluster.gangs["default/small"].backfilled
    finish(state, "default/small", at=503.0)
    assert binds(tick(state, 600.0)) == []  # the running gang has not ended yet
    finish(state, "default/running", at=1001.0)
    assert [b.gang for b in binds(tick(state, 1001.0))] == ["default/head"]


@pytest.mark.parametrize("loans", [True, False])
def test_a_head_that_could_start_takes_its_nodes_back_from_a_backfill(loans: bool) -> None:
    """The running gang ends long before its estimate: the head could start but for the
    gang backfilled on its nodes, which it takes back (whole, as preemption does)."""
    state = blocked_head("1000", policy=core.Policy(backfill_loans=loans))
    feed(state, expecting("small", 4, "900", at=3.0), at=3.0)
    apply(state, binds(tick(state, 3.0))[0], at=3.0)
    finish(state, "default/running", at=100.0)
    out = tick(state, 100.0)
    taken = [o for o in out if isinstance(o, GangRestarted)]
    if not loans:
        assert taken == [] and binds(out) == []  # the reservation waits for it to end
        return
    (restart,) = taken
    assert restart.gang == "default/small"
    assert restart.reason == "backfilled on reserved nodes, taken back for default/head"
    for key in sorted(state.cluster.gangs["default/small"].bound):
        feed(state, [state.cluster.pods[key]], at=101.0, op="delete")
    assert [b.gang for b in binds(tick(state, 101.0))] == ["default/head"]


def test_off_it_backfills_nothing_on_reserved_nodes() -> None:
    state = blocked_head("1000", policy=core.Policy(backfill_estimates=False))
    feed(state, expecting("small", 2, "500", at=3.0), at=3.0)
    assert binds(tick(state, 3.0)) == []


@pytest.mark.parametrize(
    ("case", "team", "other", "backfills"),
    [
        ("the namespace's runs, for a gang without a team label", None, None, True),
        ("the team label of its pods", "ml", "ml", True),
        ("another team's runs say nothing about it", "ml", "vision", False),
    ],
)
def test_a_learned_estimate_from_the_teams_completed_runs(
    case: str, team: str | None, other: str | None, backfills: bool
) -> None:
    """No annotation: the 90th percentile of the team's last runs of that size (learning
    is off by default: docs/gang.md)."""
    state = make(flat(8), policy=core.Policy(learn_estimates=True))
    labels = {"labels": {keys.TEAM: team}} if team else {}
    for i, took in enumerate((100.0, 120.0, 90.0, 110.0, 400.0)):
        feed(state, expecting(f"warm{i}", 2, None, at=0.0, **labels), at=0.0)
        apply(state, binds(tick(state, 0.0))[0], at=0.0)
        finish(state, f"default/warm{i}", at=took)
    runs = state.runs.seconds[(team or "default", "9-64")]
    assert runs == (100.0, 120.0, 90.0, 110.0, 400.0)
    feed(state, expecting("running", 4, "1000", at=500.0))
    apply(state, binds(tick(state, 500.0))[0], at=500.0)
    feed(state, expecting("head", 8, None, at=501.0, priority=5))
    tick(state, 501.0)
    mine = {"labels": {keys.TEAM: other}} if other else {}
    feed(state, expecting("small", 2, None, at=502.0, **mine), at=502.0)
    # p90 of 5 runs is the longest, 400 s: 502 + 400 <= 1500
    placed = [b.gang for b in binds(tick(state, 502.0))]
    assert placed == (["default/small"] if backfills else []), case


def test_without_learning_an_unannotated_gang_is_not_backfilled_on_reserved_nodes() -> None:
    state = make(flat(8))  # the defaults: only annotated estimates
    for i, took in enumerate((100.0, 120.0, 90.0, 110.0, 400.0)):
        feed(state, expecting(f"warm{i}", 2, None, at=0.0), at=0.0)
        apply(state, binds(tick(state, 0.0))[0], at=0.0)
        finish(state, f"default/warm{i}", at=took)
    feed(state, expecting("running", 4, "1000", at=500.0))
    apply(state, binds(tick(state, 500.0))[0], at=500.0)
    feed(state, expecting("head", 8, None, at=501.0, priority=5))
    tick(state, 501.0)
    feed(state, expecting("small", 2, None, at=502.0), at=502.0)
    assert [b.gang for b in binds(tick(state, 502.0))] == []


def test_a_gang_taken_off_by_a_restart_is_not_a_run() -> None:
    state = make(flat(8))
    feed(state, expecting("job", 2, None, at=0.0), at=0.0)
    (bind,) = binds(tick(state, 1.0))
    apply(state, bind, at=1.0)
    node_name = bind.bindings[0].node
    drained = msgspec.structs.replace(
        state.cluster.nodes[node_name].node,
        taints=(Taint(key=keys.DRAINING, value="", effect="NoExecute"),),
    )
    feed(state, [drained], at=50.0)
    assert state.cluster.gangs["default/job"].restarting
    for key in sorted(state.cluster.gangs["default/job"].bound):
        feed(state, [state.cluster.pods[key]], at=60.0, op="delete")
    assert state.runs.seconds == {}


def test_too_few_runs_learn_nothing() -> None:
    policy = core.Policy()
    runs = estimates.Runs()
    for took in (100.0, 100.0, 100.0, 100.0):
        runs.add("t", "1", took, keep=policy.estimate_history)
    assert runs.estimate("t", "1", policy) is None
    runs.add("t", "1", 300.0, keep=policy.estimate_history)
    assert runs.estimate("t", "1", policy) == 300.0
    assert runs.estimate("t", "1", core.Policy(estimate_percentile=50.0)) == 100.0
    for took in range(100):
        runs.add("t", "1", float(took), keep=3)
    assert runs.seconds[("t", "1")] == (97.0, 98.0, 99.0)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5400", 5400.0), ("90.5", 90.5), ("1h30m", 5400.0), ("1.5h", 5400.0),
     ("2h0m0s", 7200.0), ("500ms", 0.5)],
)  # fmt: skip
def test_expected_durations_parse(text: str, seconds: float) -> None:
    assert durations.parse(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5", "soon", "1h 30m", "1x", "nan", "inf", "h"])
def test_invalid_expected_durations_name_the_key(text: str) -> None:
    with pytest.raises(ValueError, match=keys.EXPECTED_DURATION):
        durations.parse(text)
    assert durations.seconds_or_none(text) is None


@pytest.mark.parametrize(
    ("setting", "value", "key"),
    [("estimate_percentile", 0.0, "ESTIMATE_PERCENTILE"),
     ("estimate_percentile", 101.0, "ESTIMATE_PERCENTILE"),
     ("estimate_samples", 0, "ESTIMATE_SAMPLES"),
     ("estimate_history", 2, "ESTIMATE_HISTORY")],
)  # fmt: skip
def test_estimate_settings_out_of_range_name_the_key(setting: str, value: float, key: str) -> None:
    from baton.proto.placement import GangPolicy
    from baton.services.gang.main import SPEC, Settings

    with pytest.raises(ValueError, match=f"BATON_GANG_{key} is out of range"):
        Settings(**{setting: value})  # type: ignore[arg-type]
    policy = SPEC.policy_of(Settings())
    assert isinstance(policy, GangPolicy)
    assert policy.backfill_estimates and policy.backfill_loans


def test_an_expected_duration_on_the_pods_counts_too() -> None:
    state = blocked_head("1000")
    group, members = gang("small", 2, created_at=3.0, annotations={keys.EXPECTED_DURATION: "8m20s"})
    feed(state, [group, *members], at=3.0)
    assert [b.gang for b in binds(tick(state, 3.0))] == ["default/small"]
