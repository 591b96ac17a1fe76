"""The actuator's core for what Baton tells users: the latest status per object only,
Events aggregated into series, and budgets that drop a storm instead of queueing it."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from baton.proto.actions import (
    GroupStatus,
    ObjectRef,
    PodRef,
    RecordEvent,
    SetGroupStatus,
    SetPodCondition,
    SetTaint,
    SetTeamStatus,
    StatusCondition,
    TeamStatus,
)
from baton.proto.k8s import Taint
from baton.services.actuator import core
from baton.services.actuator.core import Apply, Arrived, Finished, Limits, Report, Settle, WakeAt
from baton.services.actuator.core.eventing import EventLimits, EventWrite
from baton.services.actuator.reporting import event_body

pytestmark = pytest.mark.unit


def status(id_: str, phase: str, name: str = "job") -> SetGroupStatus:
    return SetGroupStatus(id=id_, by="reporter", at=0.0, priority="status", namespace="ml",
                          name=name, status=GroupStatus(phase=phase))  # fmt: skip


def event(id_: str, *, pod: str = "p0", note: str = "no room") -> RecordEvent:
    return RecordEvent(
        id=id_, by="reporter", at=0.0, priority="status", reason="FailedScheduling",
        regarding=ObjectRef(kind="Pod", name=pod, namespace="ml", uid=f"u-{pod}"), note=note,
        event_type="Warning",
    )  # fmt: skip


def of(outputs: tuple[Any, ...], kind: type) -> list[Any]:
    return [o for o in outputs if isinstance(o, kind)]


def arrive(state: core.State, action: Any, ticket: int, now: float) -> tuple[Any, ...]:
    return core.step(state, Arrived(action=action, ticket=ticket), now)[1]


def test_a_newer_status_replaces_the_one_still_queued() -> None:
    state = core.initial(Limits(qps=0, concurrency=1), now=0.0)
    taint = SetTaint(id="busy", by="health", at=0.0, node="n1", taint=Taint(key="k"))
    arrive(state, taint, 1, 0.0)  # holds the only slot
    arrive(state, status("s1", "Pending"), 2, 0.0)
    out = arrive(state, status("s2", "Scheduled"), 3, 0.0)
    (stale,) = of(out, Report)
    assert (stale.result.action_id, stale.result.outcome) == ("s1", "stale")
    assert "superseded by s2" in stale.result.error
    assert of(out, Settle)[0].tickets == (2,)
    other = arrive(state, status("t1", "Pending", name="other"), 4, 0.0)
    assert of(other, Report) == []  # another PodGroup: both are kept
    out = core.step(state, Finished(action_id="busy", outcome="applied"), 1.0)[1]
    assert [a.action.id for a in of(out, Apply)] == ["s2"]


def test_a_newer_team_status_replaces_the_one_still_queued() -> None:
    state = core.initial(Limits(qps=0, concurrency=1), now=0.0)
    taint = SetTaint(id="busy", by="health", at=0.0, node="n1", taint=Taint(key="k"))
    arrive(state, taint, 1, 0.0)  # holds the only slot

    def team(id_: str, name: str, waiting: int) -> SetTeamStatus:
        return SetTeamStatus(id=id_, by="admission", at=0.0, priority="status", team=name,
                             status=TeamStatus(waiting=waiting))  # fmt: skip

    arrive(state, team("a1", "a", 3), 2, 0.0)
    assert of(arrive(state, team("b1", "b", 1), 3, 0.0), Report) == []  # another team
    (stale,) = of(arrive(state, team("a2", "a", 2), 4, 0.0), Report)
    assert (stale.result.action_id, stale.result.outcome) == ("a1", "stale")
    out = core.step(state, Finished(action_id="busy", outcome="applied"), 1.0)[1]
    assert [a.action.id for a in of(out, Apply)] == ["b1"]


def test_repeats_join_a_series_written_at_most_every_interval() -> None:
    limits = Limits(qps=0, events=EventLimits(series_every=30.0))
    state = core.initial(limits, now=0.0)
    (first,) = of(arrive(state, event("e1"), 1, 0.0), Apply)
    assert first.event is not None and first.event.count == 1
    out = arrive(state, event("e2"), 2, 5.0)
    (joined,) = of(out, Report)
    assert (joined.result.outcome, joined.result.error) == (
        "already", f"aggregated into Event {first.event.name} (x2)"
    )  # fmt: skip
    assert of(out, WakeAt) == [WakeAt(at=30.0)]
    arrive(state, event("e3"), 3, 10.0)
    (flush,) = of(core.step(state, core.Tick(), 31.0)[1], Apply)
    assert flush.event is not None
    assert (flush.event.name, flush.event.count, flush.event.last) == (first.event.name, 3, 10.0)
    out = core.step(state, Finished(action_id=flush.action.id, outcome="applied"), 32.0)[1]
    assert of(out, Report) == [] and of(out, Settle) == []  # nobody waits for a flush


def test_an_event_after_the_window_starts_a_new_one() -> None:
    state = core.initial(Limits(qps=0, events=EventLimits(window=60.0)), now=0.0)
    (first,) = of(arrive(state, event("e1"), 1, 0.0), Apply)
    (later,) = of(arrive(state, event("e2"), 2, 100.0), Apply)
    assert later.event.count == 1 and later.event.name != first.event.name


def test_a_storm_on_one_object_is_dropped_beyond_its_budget() -> None:
    limits = Limits(qps=0, events=EventLimits(object_burst=2, object_every=300.0))
    state = core.initial(limits, now=0.0)
    outcomes = []
    for i in range(4):  # four different notes: four Events, not one series
        out = arrive(state, event(f"e{i}", note=f"reason {i}"), i, 1.0)
        outcomes.append("applied" if of(out, Apply) else of(out, Report)[0].result.outcome)
    assert outcomes == ["applied", "applied", "dropped", "dropped"]
    assert state.events.dropped == 2
    out = arrive(state, event("other", pod="p1"), 9, 1.0)  # another pod has its own budget
    assert of(out, Apply)


def test_the_global_budget_bounds_every_object_together() -> None:
    limits = Limits(qps=0, events=EventLimits(burst=3, qps=1.0))
    state = core.initial(limits, now=0.0)
    written = [bool(of(arrive(state, event(f"e{i}", pod=f"p{i}"), i, 0.0), Apply))
               for i in range(5)]  # fmt: skip
    assert written == [True, True, True, False, False]
    assert of(arrive(state, event("e9", pod="p9"), 9, 1.0), Apply)  # refilled after 1 s


def test_one_object_s_status_writes_never_race() -> None:
    """A newer status waits aside while the older one is in flight (so the older cannot
    land last), then goes."""
    state = core.initial(Limits(qps=0, concurrency=8), now=0.0)
    (_first,) = of(arrive(state, status("s1", "Pending"), 1, 0.0), Apply)
    newer = msgspec.structs.replace(status("s2", "Running"), at=1.0)
    assert of(arrive(state, newer, 2, 1.0), Apply) == []  # parked, not in flight with s1
    out = core.step(state, Finished(action_id="s1", outcome="applied"), 2.0)[1]
    assert [a.action.id for a in of(out, Apply)] == ["s2"]


def told(id_: str, *pods: str, message: str = "waiting for members") -> SetPodCondition:
    condition = StatusCondition(type="PodScheduled", status="False", reason="Unschedulable",
                                message=message)  # fmt: skip
    return SetPodCondition(id=id_, by="reporter", at=0.0, priority="status", gang="ml/job",
                           namespace="ml", pods=tuple(PodRef(name=p) for p in pods),
                           condition=condition)  # fmt: skip


def test_a_condition_for_other_pods_of_a_gang_does_not_replace_the_queued_one() -> None:
    """Members that join one by one are told one by one (a Job creating its pods): a
    write for pod b must not drop the queued write for pod a, or a is never told."""
    state = core.initial(Limits(qps=0, concurrency=1), now=0.0)
    taint = SetTaint(id="busy", by="health", at=0.0, node="n1", taint=Taint(key="k"))
    arrive(state, taint, 1, 0.0)  # holds the only slot
    arrive(state, told("c1", "a"), 2, 0.0)
    assert of(arrive(state, told("c2", "b"), 3, 0.0), Report) == []
    (stale,) = of(arrive(state, told("c3", "b", message="need 1 more node"), 4, 0.0), Report)
    assert (stale.result.action_id, stale.result.outcome) == ("c2", "stale")  # same pods
    out = core.step(state, Finished(action_id="busy", outcome="applied"), 1.0)[1]
    assert [a.action.id for a in of(out, Apply)] == ["c1"]
    out = core.step(state, Finished(action_id="c1", outcome="applied"), 2.0)[1]
    assert [a.action.id for a in of(out, Apply)] == ["c3"]


def test_two_condition_writes_of_one_gang_are_never_in_flight_together() -> None:
    """Two writes naming different pods may name the same pod (a re-telling of every
    pending pod beside one for a pod that just joined): the newer waits aside."""
    state = core.initial(Limits(qps=0, concurrency=8), now=0.0)
    (_first,) = of(arrive(state, told("c1", "a"), 1, 0.0), Apply)
    assert of(arrive(state, told("c2", "a", "b", message="need 1 more node"), 2, 0.0), Apply) == []
    assert of(arrive(state, told("c3", "c"), 3, 0.0), Apply) == []
    out = core.step(state, Finished(action_id="c1", outcome="applied"), 1.0)[1]
    assert [a.action.id for a in of(out, Apply)] == ["c2"]
    out = core.step(state, Finished(action_id="c2", outcome="applied"), 2.0)[1]
    assert [a.action.id for a in of(out, Apply)] == ["c3"]


def test_a_redelivered_older_status_is_stale_behind_a_newer_one() -> None:
    state = core.initial(Limits(qps=0), now=0.0)
    core.step(state, Arrived(action=status("s2", "Running"), ticket=1, seq=20), 5.0)
    redelivered = Arrived(action=status("s1", "Pending"), ticket=2, seq=10, delivered=2)
    out = core.step(state, redelivered, 6.0)[1]
    (report,) = of(out, Report)
    assert (report.result.action_id, report.result.outcome) == ("s1", "stale")
    assert of(out, Apply) == []


def test_an_event_carries_what_kubectl_get_events_prints_and_sorts_by() -> None:
    written = EventWrite(name="p0.abc", count=3, first=0.0, last=120.0)
    body = event_body(event("e1"), written)
    assert body["deprecatedFirstTimestamp"] == "1970-01-01T00:00:00Z"
    assert body["deprecatedLastTimestamp"] == "1970-01-01T00:02:00Z"
    assert body["deprecatedCount"] == 3
    assert body["deprecatedSource"] == {"component": "baton.io/gang"}
    assert body["reportingController"] == "baton.io/gang"
    assert body["eventTime"] == "1970-01-01T00:00:00.000000Z"
