"""The reporter core: what Kubernetes users are told about a gang, when, and how often."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from baton.proto import keys
from baton.proto.actions import Binding, RecordEvent, SetGroupStatus, SetPodCondition
from baton.proto.admission import GangQueued
from baton.proto.k8s import (
    VOLCANO_API,
    GangRef,
    NodeEvent,
    Pod,
    PodEvent,
    PodGroup,
    PodGroupEvent,
)  # fmt: skip
from baton.proto.placement import GangPlaced, GangRestarted, GangUnschedulable, Need
from baton.proto.runner import Tick
from baton.services.reporter import core
from baton.services.reporter.core import telling
from tests.support.builders import node, pod, pod_group

pytestmark = pytest.mark.unit

NS = "ml"


# told at once (the reporter lets a burst settle for 1 s by default: its own tests below)
AT_ONCE = core.ReportPolicy(settle=0.0)


def step(state: core.State, *events: Any, at: float = 1.0) -> list[Any]:
    out: list[Any] = []
    for event in events:
        if isinstance(event, Pod):
            event = PodEvent(op="upsert", at=at, pod=event)
        elif isinstance(event, PodGroup):
            event = PodGroupEvent(op="upsert", at=at, pod_group=event)
        out += core.step(state, event, at)[1]
    return out


def of(outputs: list[Any], type_: type) -> list[Any]:
    return [o for o in outputs if isinstance(o, type_)]


def members(count: int, *, bound: str = "", phase: str = "") -> list[Pod]:
    return [
        pod(
            f"job-{i}",
            namespace=NS,
            group="job",
            gpus=8,
            node_name=bound and f"{bound}{i}",
            phase=phase,
        )
        for i in range(count)
    ]


PHASES = [
    # (case, counts, minMember, phase) — scheduler-plugins' precedence
    ("nothing bound", telling.Counts(members=4, pending=4), 4, "Pending"),
    ("bound, not running", telling.Counts(members=4, scheduled=4), 4, "Scheduled"),
    ("running", telling.Counts(members=4, scheduled=4, running=4), 4, "Running"),
    ("finished", telling.Counts(members=4, scheduled=4, succeeded=4), 4, "Finished"),
    ("one failed", telling.Counts(members=4, scheduled=4, running=3, failed=1), 4, "Failed"),
    ("failed but below minMember", telling.Counts(members=4, scheduled=2, failed=1), 4, "Pending"),
]


@pytest.mark.parametrize(("case", "counts", "need", "want"), PHASES, ids=[c[0] for c in PHASES])
def test_phases_follow_scheduler_plugins(
    case: str, counts: telling.Counts, need: int, want: str
) -> None:
    assert telling.phase(counts, need) == want


VOLCANO_PHASES = [
    # (case, counts, minMember, admitted, phase) — as Volcano's scheduler sets them
    ("not admitted", telling.Counts(members=4, pending=4), 4, False, "Pending"),
    ("admitted, waiting", telling.Counts(members=4, pending=4), 4, True, "Inqueue"),
    ("bound, not running", telling.Counts(members=4, scheduled=4), 4, True, "Running"),
    ("running", telling.Counts(members=4, scheduled=4, running=4), 4, True, "Running"),
    ("all succeeded", telling.Counts(members=4, scheduled=4, succeeded=4), 4, True, "Completed"),
    ("some run, quorum lost", telling.Counts(members=4, scheduled=3, running=2, failed=1),
     3, True, "Unknown"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "counts", "need", "admitted", "want"), VOLCANO_PHASES,
    ids=[c[0] for c in VOLCANO_PHASES],
)  # fmt: skip
def test_volcano_phases_follow_volcanos_scheduler(
    case: str, counts: telling.Counts, need: int, admitted: bool, want: str
) -> None:
    assert telling.volcano_phase(counts, need, admitted=admitted) == want


def test_a_volcano_podgroup_gets_volcanos_phase_and_conditions() -> None:
    state = core.initial(AT_ONCE)
    group = pod_group("job", namespace=NS, min_member=2, api=VOLCANO_API,
                      annotations={keys.ADMITTED: "true"})  # fmt: skip
    waiting = of(step(state, group, *members(2)), SetGroupStatus)[-1]
    assert (waiting.api, waiting.status.phase) == (VOLCANO_API, "Inqueue")
    kinds = {c.type: c.status for c in waiting.status.conditions}
    assert kinds == {"Unschedulable": "True", "Scheduled": "False"}
    placed = of(step(state, *members(2, bound="n", phase="Running"), at=2.0), SetGroupStatus)
    assert placed[-1].status.phase == "Running"
    kinds = {c.type: c.status for c in placed[-1].status.conditions}
    assert kinds == {"Unschedulable": "False", "Scheduled": "True"}


def test_a_gang_short_of_members_says_so_on_its_podgroup_and_pods() -> None:
    state = core.initial(AT_ONCE)
    out = step(state, pod_group("job", namespace=NS, min_member=4), *members(2))
    status = of(out, SetGroupStatus)[-1]
    assert (status.status.phase, status.priority) == ("Pending", "status")
    (condition,) = status.status.conditions
    assert (condition.type, condition.status, condition.reason) == (
        "PodGroupScheduled", "False", "Unschedulable"
    )  # fmt: skip
    assert condition.message == "waiting for all 4 members of gang job to be created (minMember 4)"
    marked = {p.name for c in of(out, SetPodCondition) for p in c.pods}
    assert marked == {"job-0", "job-1"}
    warned = {e.regarding.name for e in of(out, RecordEvent) if e.reason == "FailedScheduling"}
    assert warned == {"job-0", "job-1"}


def test_a_gang_is_told_once_a_burst_has_settled_not_through_each_step_of_it() -> None:
    """Its PodGroup and two members arrive, admission queues it: four wordings in 30 ms
    ("waiting for all 2 members", "waiting to be placed", "waiting behind 12 earlier
    gangs"). With ``settle`` 1 s nothing is told until a tick a second after the gang
    was first seen, and then once: the wording it has then."""
    state = core.initial(core.ReportPolicy(settle=1.0))
    out = step(state, pod_group("job", namespace=NS, min_member=2), members(2)[0], at=5.00)
    out += step(state, members(2)[1], at=5.01)
    queued = GangQueued(gang=f"{NS}/job", team="a", at=5.03, position=12,
                        reason="waiting behind 12 earlier gangs of team 'a'")  # fmt: skip
    out += step(state, queued, at=5.03)
    assert of(out, SetGroupStatus) == [] and of(out, SetPodCondition) == []
    assert [e.reason for e in of(out, RecordEvent)] == ["Queued"]  # the decision's own Event
    assert core.wants_tick(state, 5.5)
    assert step(state, Tick(at=5.5), at=5.5) == []  # not yet a second
    told = step(state, Tick(at=6.0), at=6.0)
    (status,) = of(told, SetGroupStatus)
    said = "waiting for admission: waiting behind 12 earlier gangs of team 'a'"
    assert status.status.conditions[0].message == said
    (condition,) = of(told, SetPodCondition)
    assert {p.name for p in condition.pods} == {"job-0", "job-1"}
    assert not core.wants_tick(state, 6.0)
    # both members bound at once: one status now (the first change, a second after the
    # last write), the rest of the burst a tick later, as its latest
    assert len(of(step(state, *members(2, bound="n"), at=7.0), SetGroupStatus)) == 1
    assert core.wants_tick(state, 7.5)
    (latest,) = of(step(state, Tick(at=8.0), at=8.0), SetGroupStatus)
    assert (latest.status.phase, latest.status.scheduled) == ("Running", 2)


def test_the_verdict_says_what_would_unblock_the_gang_and_pods_hear_it_once_per_interval() -> None:
    state = core.initial(core.ReportPolicy(pod_every=30.0, settle=0.0))
    step(state, pod_group("job", namespace=NS, min_member=2), *members(2), at=1.0)
    verdict = GangUnschedulable(
        gang=f"{NS}/job", at=10.0, reason="0 of 2 members fit in one rack",
        need=Need(nodes=2, shape={keys.GPU: 8}, within=keys.RACK), members=2,
    )  # fmt: skip
    out = step(state, verdict, at=10.0)
    said = "0 of 2 members fit in one rack; need 2 more nodes with 8 nvidia.com/gpu in one rack"
    (event,) = [e for e in of(out, RecordEvent) if e.regarding.kind == "PodGroup"]
    assert (event.reason, event.event_type, event.note) == ("FailedScheduling", "Warning", said)
    assert of(out, SetGroupStatus)[-1].status.conditions[0].message == said
    # job-0 was told at 1.0 (waiting for members): it waits for its interval; job-1,
    # never told, hears the verdict at once
    (told,) = of(out, SetPodCondition)
    assert [p.name for p in told.pods] == ["job-1"]
    assert told.condition.message == f"gang {NS}/job: {said}"
    assert core.wants_tick(state, 20.0)
    assert of(step(state, Tick(at=20.0), at=20.0), SetPodCondition) == []
    (later,) = of(step(state, Tick(at=31.0), at=31.0), SetPodCondition)
    assert [p.name for p in later.pods] == ["job-0"]
    assert later.condition.message == told.condition.message
    assert not core.wants_tick(state, 32.0)


def test_a_placed_gang_gets_scheduled_events_and_its_phase_follows_its_pods() -> None:
    state = core.initial(AT_ONCE)
    step(state, pod_group("job", namespace=NS, min_member=2), *members(2))
    bindings = tuple(Binding(namespace=NS, pod=f"job-{i}", uid=f"u{i}", node=f"n{i}")
                     for i in range(2))  # fmt: skip
    placed = GangPlaced(gang=f"{NS}/job", at=2.0, action_id="bind-1", bindings=bindings,
                        level=keys.RACK, domain="r1", domains=1)  # fmt: skip
    out = step(state, placed, at=2.0)
    notes = sorted(e.note for e in of(out, RecordEvent) if e.reason == "Scheduled")
    assert notes == [
        "Successfully assigned ml/job-0 to n0",
        "Successfully assigned ml/job-1 to n1",
        "placed all 2 members together in rack r1",
    ]
    phases = [of(step(state, *members(2, bound="n", phase=p), at=t), SetGroupStatus)
              for t, p in ((3.0, "Pending"), (4.0, "Running"), (5.0, "Succeeded"))]  # fmt: skip
    assert [p[-1].status.phase for p in phases] == ["Scheduled", "Running", "Finished"]
    assert phases[0][-1].status.conditions[0].message == "placed all 2 members together in rack r1"


def test_an_unchanged_status_is_not_written_again() -> None:
    state = core.initial(AT_ONCE)
    step(state, pod_group("job", namespace=NS, min_member=4), *members(2))
    assert of(step(state, *members(2), at=2.0), SetGroupStatus) == []


@pytest.mark.parametrize(
    ("ref", "said"),
    [
        (GangRef(name="job", source="volcano"),
         "waiting for PodGroup ml/job (named by annotation scheduling.k8s.io/group-name) to be "
         "created or annotation scheduling.volcano.sh/group-min-member on its pods"),
        (GangRef(name="job", source="kubernetes"),
         "waiting for PodGroup ml/job (named by spec.schedulingGroup.podGroupName) to be created"),
    ],
)  # fmt: skip
def test_pods_naming_a_missing_group_are_told_which_and_how(ref: GangRef, said: str) -> None:
    state = core.initial(AT_ONCE)
    out = step(state, pod("w-0", namespace=NS, gpus=8, ref=ref))
    (told,) = of(out, SetPodCondition)
    assert told.condition.message == f"gang {NS}/job: {said}"


def test_pods_whose_podgroup_is_deleted_are_told_they_wait_for_it() -> None:
    """scheduler-plugins rejects a pod whose PodGroup does not exist; the pods of a group
    deleted while they wait hear so at once (they said they wait for members)."""
    state = core.initial(core.ReportPolicy(pod_every=0.0, settle=0.0))
    group = pod_group("job", namespace=NS, min_member=4)
    step(state, group, *members(2), at=1.0)
    out = step(state, PodGroupEvent(op="delete", at=2.0, pod_group=group), at=2.0)
    (told,) = of(out, SetPodCondition)
    assert {p.name for p in told.pods} == {"job-0", "job-1"}
    said = f"waiting for PodGroup {NS}/job (named by label {keys.POD_GROUP}) to be created"
    assert told.condition.message == f"gang {NS}/job: {said}"


def test_a_gang_waiting_for_admission_says_why() -> None:
    state = core.initial(AT_ONCE)
    step(state, pod_group("job", namespace=NS, min_member=1), *members(1))
    queued = GangQueued(at=2.0, gang=f"{NS}/job", team="a", position=0,
                        reason="team 'a' uses 16 of its 16 GPU quota")  # fmt: skip
    out = step(state, queued, at=2.0)
    (event,) = [e for e in of(out, RecordEvent) if e.regarding.kind == "PodGroup"]
    assert (event.reason, event.note) == (
        "Queued", "waiting for admission: team 'a' uses 16 of its 16 GPU quota"
    )  # fmt: skip
    condition = of(out, SetGroupStatus)[-1].status.conditions[0]
    assert condition.message == "waiting for admission: team 'a' uses 16 of its 16 GPU quota"


def test_a_queued_gangs_status_that_only_recounts_is_written_once_per_interval() -> None:
    state = core.initial(core.ReportPolicy(group_every=30.0, settle=0.0))
    step(state, pod_group("job", namespace=NS, min_member=1), *members(1))

    def queued(used: int, at: float, reason: str = "") -> list[Any]:
        said = reason or f"team 'a' uses {used} of its 16 GPU quota"
        return step(state, GangQueued(at=at, gang=f"{NS}/job", team="a", position=0,
                                      reason=said), at=at)  # fmt: skip

    assert len(of(queued(16, 2.0), SetGroupStatus)) == 1  # new words: at once
    assert of(queued(12, 3.0), SetGroupStatus) == []  # the same words, other numbers
    assert of(queued(14, 4.0), SetGroupStatus) == []
    assert core.wants_tick(state, 10.0)
    assert of(step(state, Tick(at=20.0), at=20.0), SetGroupStatus) == []
    (late,) = of(step(state, Tick(at=33.0), at=33.0), SetGroupStatus)
    assert late.status.conditions[0].message.endswith("uses 14 of its 16 GPU quota")
    assert not core.wants_tick(state, 34.0)
    other = queued(0, 35.0, reason="waiting behind 2 earlier gangs")
    assert len(of(other, SetGroupStatus)) == 1  # other words: at once


@pytest.mark.parametrize(
    ("node", "reason", "want", "note"),
    [
        ("", "preempted for ml/urgent (priority 10)", "Preempted",
         "preempted for ml/urgent (priority 10): the whole gang is taken off"),
        ("", "moved to defragment for ml/big", "Preempted", "moved to defragment for ml/big"),
        ("n3", "node draining (baton.io/draining)", "Restarted", "node n3 failed"),
    ],
)  # fmt: skip
def test_a_gang_taken_off_for_another_is_told_preempted_not_restarted(
    node: str, reason: str, want: str, note: str
) -> None:
    state = core.initial(AT_ONCE)
    step(state, pod_group("job", namespace=NS, min_member=1), *members(1, bound="n"))
    off = GangRestarted(gang=f"{NS}/job", at=2.0, reason=reason, node=node, evicted=1)
    out = step(state, off, at=2.0)
    (event,) = [e for e in of(out, RecordEvent) if e.regarding.kind == "PodGroup"]
    assert event.reason == want and note in event.note, event


def test_a_gang_without_a_group_object_is_told_on_its_pods() -> None:
    state = core.initial(AT_ONCE)
    ref = GangRef(name="job", source="kueue", min_member=2)
    out = step(state, *(pod(f"w-{i}", namespace=NS, gpus=8, ref=ref) for i in range(2)))
    assert of(out, SetGroupStatus) == []
    verdict = GangUnschedulable(gang=f"{NS}/job", at=2.0, reason="no room", need=Need(nodes=0))
    out = step(state, verdict, at=2.0)
    assert {e.regarding.name for e in of(out, RecordEvent)} == {"w-0", "w-1"}


def test_a_node_quarantined_and_returned_is_told_on_the_node() -> None:
    state = core.initial(AT_ONCE)
    sick = node("gpu-1").tainted(keys.UNHEALTHY).build()
    out = core.step(state, NodeEvent(op="upsert", at=1.0, node=sick), 1.0)[1]
    (event,) = out
    assert (event.reason, event.regarding.kind, event.regarding.name) == (
        "Quarantined", "Node", "gpu-1"
    )  # fmt: skip
    assert core.step(state, NodeEvent(op="upsert", at=2.0, node=sick), 2.0)[1] == ()
    well = msgspec.structs.replace(sick, taints=())
    (back,) = core.step(state, NodeEvent(op="upsert", at=3.0, node=well), 3.0)[1]
    assert back.reason == "Returned"


def test_the_same_inputs_give_the_same_outputs() -> None:
    def run() -> list[Any]:
        state = core.initial(AT_ONCE)
        verdict = GangUnschedulable(gang=f"{NS}/job", at=5.0, reason="x", need=Need(nodes=1))
        return step(state, pod_group("job", namespace=NS, min_member=2), *members(2)) + step(
            state, verdict, at=5.0
        )

    assert msgspec.json.encode(run()) == msgspec.json.encode(run())


def test_a_finished_gang_whose_objects_are_gone_is_forgotten() -> None:
    state = core.initial(AT_ONCE)
    group = pod_group("job", namespace=NS, min_member=2)
    done = members(2, bound="n", phase="Succeeded")
    assert of(step(state, group, *done), SetGroupStatus)[-1].status.phase == "Finished"
    core.step(state, PodGroupEvent(op="delete", at=3.0, pod_group=group), 3.0)
    for p in done:
        core.step(state, PodEvent(op="delete", at=3.0, pod=p), 3.0)
    assert state.view.gangs == {}


def test_each_pod_of_a_gang_without_a_group_object_gets_one_scheduled_event() -> None:
    state = core.initial(AT_ONCE)
    ref = GangRef(name="job", source="kueue", min_member=2)
    step(state, *(pod(f"w-{i}", namespace=NS, gpus=8, ref=ref) for i in range(2)))
    bindings = tuple(Binding(namespace=NS, pod=f"w-{i}", uid=f"u{i}", node=f"n{i}")
                     for i in range(2))  # fmt: skip
    placed = GangPlaced(gang=f"{NS}/job", at=2.0, action_id="bind-1", bindings=bindings)
    out = step(state, placed, at=2.0)
    scheduled = [e.regarding.name for e in of(out, RecordEvent) if e.reason == "Scheduled"]
    assert sorted(scheduled) == ["w-0", "w-1"]
