"""Admission queueing: best-effort FIFO, starvation reservation, strict FIFO, gangs set
aside (too large, members missing) and the order teams are served (fair share)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from baton.proto.actions import Annotate, EvictGang, RecreatePod
from baton.proto.admission import GangAdmitted, GangPreempted, GangQueued, GangReleased
from baton.proto.k8s import PodEvent, PodGroupEvent
from baton.proto.runner import Tick
from baton.services.admission.core import queueing
from tests.unit.test_admission_core import cluster, feed, group, node, of, pods, submit

pytestmark = pytest.mark.unit

# one team of 16 GPUs (the demo's shape: its head needs more than what is left)
ONE: dict[str, Any] = {
    "teams": [{"name": "a", "namespaces": ["a"], "pools": ["p"], "quota": {"gpus": 16}}]
}


NODES3 = [node("n1", "p"), node("n2", "p"), node("n3", "p")]


def admitted(out: list[Any]) -> list[str]:
    return [o.gang for o in of(out, GangAdmitted)]


def with_queueing(**queueing: Any) -> dict[str, Any]:
    return {**ONE, "queueing": queueing}


def test_best_effort_a_head_over_the_remaining_quota_does_not_block_smaller_gangs() -> None:
    state = cluster(ONE, [node("n1", "p"), node("n2", "p")])
    out = feed(state, submit("a", "running", 1, at=1.0))  # 8 of 16 used
    out = feed(
        state, submit("a", "big", 2, at=2.0) + submit("a", "small", 1, at=3.0), now=3.0
    )  # big needs 16 with 8 left
    assert admitted(out) == ["a/small"]
    feed(state, [Tick(at=4.0)], now=4.0)  # why it waits is brought up to date on ticks
    assert "uses 16 of its 16 GPU quota" in state.gangs["a/big"].reason


def test_strict_fifo_admits_nothing_behind_the_head() -> None:
    state = cluster(with_queueing(strategy="StrictFIFO"), [node("n1", "p"), node("n2", "p")])
    feed(state, submit("a", "running", 1, at=1.0))
    out = feed(state, submit("a", "big", 2, at=2.0) + submit("a", "small", 1, at=3.0), now=3.0)
    assert admitted(out) == []


def test_gangs_created_in_the_same_second_are_served_in_the_order_they_arrived() -> None:
    """creationTimestamp counts whole seconds: a burst (a trace replayed fast, a
    controller's) is served as it arrived, not by name."""
    state = cluster(ONE, [node("n1", "p"), node("n2", "p")])
    feed(state, submit("a", "running", 2, at=1.0))  # 16 of 16
    out = feed(state, submit("a", "zz-first", 2, at=2.0) + submit("a", "aa-second", 2, at=2.0))
    assert admitted(out) == []
    assert [key for _, key in state.queues["a"]] == ["a/zz-first", "a/aa-second"]
    out = feed(state, pods("a", "running", 2, phase="Succeeded"), now=3.0)
    assert admitted(out) == ["a/zz-first"]


def test_a_starving_gang_reserves_and_smaller_ones_only_take_what_it_leaves() -> None:
    state = cluster(with_queueing(starvation_s=100), NODES3)
    feed(state, submit("a", "running", 1, at=0.0), now=0.0)  # 8 of 16
    # before the threshold the 16-GPU gang does not reserve: a small one backfills
    out = feed(state, submit("a", "big", 2, at=1.0) + submit("a", "s1", 1, at=2.0), now=2.0)
    assert admitted(out) == ["a/s1"]
    feed(state, pods("a", "s1", 1, phase="Succeeded"), now=50.0)  # back to 8 of 16
    # past the threshold: s2 would leave the big gang short, it waits
    out = feed(state, [Tick(at=200.0), *submit("a", "s2", 1, at=200.0)], now=200.0)
    assert admitted(out) == []
    reason = state.gangs["a/s2"].reason
    assert "16 reserved for a/big, which has waited longest" in reason, reason
    out = feed(state, pods("a", "running", 1, phase="Succeeded"), now=300.0)
    assert admitted(out) == ["a/big"]  # the reserved gang goes first


def test_a_gang_larger_than_its_team_can_ever_hold_is_set_aside_and_blocks_nobody() -> None:
    state = cluster(with_queueing(strategy="StrictFIFO"), NODES3)
    out = feed(state, submit("a", "huge", 3, at=1.0) + submit("a", "small", 1, at=2.0))
    assert admitted(out) == ["a/small"]  # even in strict FIFO: the huge one is no head
    aside = [q for q in of(out, GangQueued) if q.gang == "a/huge" and q.set_aside]
    assert aside and "can never" not in aside[-1].reason and "so at most 16" in aside[-1].reason


def test_a_podgroup_whose_pods_never_come_is_set_aside_after_its_timeout() -> None:
    state = cluster(with_queueing(strategy="StrictFIFO"), [node("n1", "p")])
    plain = group("a", "empty", 2, at=0.0)
    timed = msgspec.structs.replace(plain.pod_group, schedule_timeout_seconds=60)
    empty = msgspec.structs.replace(plain, pod_group=timed)
    out = feed(state, [empty, *submit("a", "next", 1, at=1.0)], now=1.0)
    assert admitted(out) == ["a/next"]  # even strict: a gang with no pods is never a head
    said = [q.reason for q in of(out, GangQueued) if q.gang == "a/empty"]
    assert "waiting for members: 0 of 2" in said[-1]
    assert queueing.wants_tick(state.state, 1.0)
    out = feed(state, [Tick(at=61.0)], now=61.0)
    aside = [q for q in of(out, GangQueued) if q.set_aside]
    assert [q.gang for q in aside] == ["a/empty"]
    assert "0 of 2 member pods after 60 s (scheduleTimeoutSeconds)" in aside[0].reason
    # its pods come after all: it is tried again like any other gang
    out = feed(state, pods("a", "empty", 2, gpus=0), now=62.0)
    assert admitted(out) == ["a/empty"]


def test_without_a_timeout_the_members_timeout_applies() -> None:
    state = cluster(with_queueing(members_timeout_s=30), [node("n1", "p")])
    feed(state, [group("a", "empty", 2, at=0.0)], now=0.0)
    out = feed(state, [Tick(at=29.0)], now=29.0)
    assert not [q for q in of(out, GangQueued) if q.set_aside]
    out = feed(state, [Tick(at=30.0)], now=30.0)
    assert "(members_timeout_s)" in next(q for q in of(out, GangQueued) if q.set_aside).reason


TEAMS: dict[str, Any] = {
    "teams": [
        {"name": "x", "namespaces": ["x"], "pools": ["px"], "borrow": {"gpus": 32}},
        {"name": "y", "namespaces": ["y"], "pools": ["py"], "borrow": {"gpus": 32}, "weight": 3},
        {"name": "z", "namespaces": ["z"], "pools": ["pz"], "quota": {"gpus": 24}},
    ]
}


@pytest.mark.parametrize(("weight", "to_y"), [(3, 2), (1, 1)])
def test_teams_are_served_by_weighted_share_of_what_they_hold(weight: int, to_y: int) -> None:
    teams = {"teams": [*TEAMS["teams"]]}
    teams["teams"][1] = {**teams["teams"][1], "weight": weight}
    state = cluster(teams, [node("x1", "px"), node("y1", "py")])
    # both teams fill their own quota (8 each), then queue for z's GPUs
    feed(state, submit("x", "x0", 1, at=0.0) + submit("y", "y0", 1, at=0.0), now=0.0)
    feed(state, [e for i in (1, 2, 3) for t in "xy" for e in submit(t, f"{t}{i}", 1, at=i)])
    out = feed(state, [node(f"z{i}", "pz") for i in range(3)], now=5.0)  # 8 GPUs at a time
    lent = admitted(out)
    assert len(lent) == 3
    assert sum(1 for g in lent if g.startswith("y/")) == to_y, lent


# -- priority preemption within a team ---------------------------------------------------


def test_a_higher_priority_gang_over_quota_preempts_lower_ones_of_its_team_whole() -> None:
    state = cluster(ONE, NODES3)
    feed(state, submit("a", "old", 1, at=0.0, node="n1"), now=0.0)
    feed(state, submit("a", "new", 1, at=100.0, node="n2"), now=100.0)  # 16 of 16 used
    early = feed(state, submit("a", "urgent", 1, at=200.0, priority=10), now=200.0)
    assert admitted(early) == []  # neither has run preempt_min_run_s (300 s)
    out = feed(state, [Tick(at=400.0)], now=400.0)
    assert [p.gang for p in of(out, GangPreempted)] == ["a/new"]  # least GPU-time lost
    (recreate,) = of(out, RecreatePod)  # a bare pod: Baton recreates it
    assert (recreate.gang, recreate.pod) == ("a/new", "new-0") and not of(out, EvictGang)
    assert admitted(out) == ["a/urgent"]
    assert not state.gangs["a/new"].admitted and state.gangs["a/new"].qkey is not None


def test_equal_priority_or_preemption_off_preempts_nobody() -> None:
    for config, priority in ((ONE, 0), (with_queueing(preempt_within_team=False), 10)):
        state = cluster(config, NODES3)
        feed(state, submit("a", "one", 2, at=0.0), now=0.0)
        out = feed(state, submit("a", "two", 1, at=500.0, priority=priority), now=500.0)
        assert of(out, GangPreempted) == [] and admitted(out) == []


@pytest.mark.parametrize("min_run", [0, 300])
def test_no_gang_is_preempted_for_one_that_still_would_not_fit_the_teams_nodes(
    min_run: int,
) -> None:
    # quota 16 but one 8-GPU node: taking the running gang off would not let the 16-GPU
    # gang start; before, it was preempted anyway, re-admitted at once, and (with no
    # minimum run time) preempted again in the same cycle, forever
    config = {**ONE, "queueing": {"preempt_min_run_s": min_run}}
    state = cluster(config, [node("n1", "p")])
    feed(state, submit("a", "old", 1, at=0.0, node="n1"), now=0.0)
    out = feed(state, [*submit("a", "urgent", 2, at=500.0, priority=10)], now=500.0)
    out += feed(state, [Tick(at=900.0)], now=900.0)
    assert of(out, GangPreempted) == [] and admitted(out) == []
    assert state.gangs["a/old"].admitted


def test_an_admitted_podgroup_whose_pods_never_came_gives_its_quota_back() -> None:
    # it declares its GPUs, so it is admitted before its pods exist; they never come
    state = cluster(ONE, NODES3)
    plain = group("a", "ghost", 2, at=0.0, **{"baton.io/gpus-per-pod": "8"})
    timed = msgspec.structs.replace(plain.pod_group, schedule_timeout_seconds=60)
    out = feed(state, [msgspec.structs.replace(plain, pod_group=timed)], now=0.0)
    assert admitted(out) == ["a/ghost"] and state.used["a"] == 16
    assert queueing.wants_tick(state.state, 1.0)  # even with nothing queued
    out = feed(state, [*submit("a", "next", 1, at=30.0), Tick(at=59.0)], now=59.0)
    assert admitted(out) == [] and state.gangs["a/ghost"].admitted  # not yet
    out = feed(state, [Tick(at=60.0)], now=60.0)
    (unadmit,) = [a for a in of(out, Annotate) if a.name == "ghost"]
    assert unadmit.annotations == {"baton.io/admitted": None, "baton.io/borrowing": None}
    (told,) = [q for q in of(out, GangQueued) if q.gang == "a/ghost"]
    assert told.set_aside and "0 of 2 member pods after 60 s" in told.reason
    assert "held 16 GPUs of the quota of team 'a', now given back" in told.reason
    assert admitted(out) == ["a/next"]  # the quota it held goes to the next gang
    assert not state.gangs["a/ghost"].admitted and state.used["a"] == 8
    out = feed(state, [Tick(at=120.0)], now=120.0)
    assert of(out, GangQueued) == [] and of(out, Annotate) == []  # told once
    # its pods come after all: it queues for its GPUs like any other gang
    feed(state, pods("a", "next", 1, phase="Succeeded"), now=130.0)
    out = feed(state, pods("a", "ghost", 2), now=131.0)
    assert admitted(out) == ["a/ghost"]


def _mpijob(phase: str) -> list[PodEvent]:
    """An MPIJob's pods: a launcher asking no GPUs (``mpi-0``) and two 8-GPU workers."""
    launcher = msgspec.structs.replace(pods("a", "mpi", 1, gpus=0, phase=phase)[0].pod,
                                       name="mpi-launcher", uid="uid-mpi-launcher")  # fmt: skip
    return [PodEvent(op="upsert", at=0.0, pod=launcher), *pods("a", "mpi", 2, phase=phase)]


def test_a_gang_whose_last_members_ended_after_the_others_went_gives_its_quota_back() -> None:
    # An MPIJob (cleanPodPolicy Running): the launcher ends, the operator deletes the
    # workers. The group keeps fewer members than minMember, all ended: it is done.
    state = cluster(ONE, NODES3)
    feed(state, [group("a", "mpi", 3, at=0.0), *_mpijob("Running")], now=0.0)
    out = feed(state, submit("a", "next", 1, at=1.0), now=1.0)
    assert state.gangs["a/mpi"].admitted and admitted(out) == []  # 16 of 16 held
    launcher, *workers = _mpijob("Running")
    done = msgspec.structs.replace(launcher.pod, phase="Succeeded")
    ended = PodEvent(op="upsert", at=2.0, pod=done)
    gone = [PodEvent(op="delete", at=2.0, pod=w.pod) for w in workers]
    out = feed(state, [ended, *gone], now=2.0)
    assert of(out, GangReleased) == [GangReleased(at=2.0, gang="a/mpi", team="a", gpus=16)]
    assert admitted(out) == ["a/next"] and state.used["a"] == 8


@pytest.mark.parametrize("order", ["pods first", "group first"])
def test_a_finished_mpijob_seen_after_a_restart_holds_no_quota(order: str) -> None:
    # Its PodGroup (minResources, as the MPI operator makes it) still says admitted; only
    # its ended launcher is left. Seen in baton up's status at 1,024 nodes: a team
    # "using" 11,663 GPUs of its 8,192.
    state = cluster(ONE, NODES3)
    mpi = msgspec.structs.replace(
        group("a", "mpi", 3, at=0.0, **{"baton.io/admitted": "true"}).pod_group,
        min_resources={"nvidia.com/gpu": 16},
    )
    launcher = _mpijob("Succeeded")[0]
    seen = PodGroupEvent(op="upsert", at=0.0, pod_group=mpi)
    events = [launcher, seen] if order == "pods first" else [seen, launcher]
    feed(state, events, now=1.0)
    assert state.used.get("a", 0) == 0 and state.gangs["a/mpi"].finished
    out = feed(state, submit("a", "next", 2, at=2.0), now=2.0)
    assert admitted(out) == ["a/next"]


def test_a_gang_whose_members_all_went_none_ended_keeps_its_quota() -> None:
    # evicted for a restart through its controller: its pods come back, its GPUs wait
    state = cluster(ONE, NODES3)
    feed(state, [group("a", "mpi", 3, at=0.0), *_mpijob("Running")], now=0.0)
    gone = [PodEvent(op="delete", at=2.0, pod=p.pod) for p in _mpijob("Running")]
    out = feed(state, [*gone, *submit("a", "next", 1, at=2.0)], now=2.0)
    assert of(out, GangReleased) == [] and admitted(out) == []
    assert state.gangs["a/mpi"].admitted and state.used["a"] == 16


def test_a_podgroup_whose_pods_all_came_keeps_its_quota_when_they_finish_or_go() -> None:
    state = cluster(with_queueing(members_timeout_s=30), NODES3)
    feed(state, submit("a", "job", 2, at=0.0), now=0.0)
    feed(state, [*pods("a", "job", 1, phase="Running"), Tick(at=100.0)], now=100.0)
    assert state.gangs["a/job"].admitted and state.used["a"] == 16


def test_a_gang_entering_an_empty_queue_is_told_it_is_first_not_behind_0() -> None:
    """The demo showed "waiting behind 0 earlier gangs" for every gang that came in."""
    state = cluster(ONE, [node("n1", "p"), node("n2", "p")])
    out = feed(state, submit("a", "first", 1, at=1.0))
    said = [q.reason for q in of(out, GangQueued) if q.gang == "a/first"]
    assert said and "behind 0" not in said[0] and "first in team 'a'" in said[0], said
    out = feed(state, submit("a", "big", 3, at=2.0) + submit("a", "second", 1, at=3.0), now=3.0)
    said = [q.reason for q in of(out, GangQueued) if q.gang == "a/second"]
    assert said and "behind 1 earlier" in said[0], said


def test_an_admitted_gang_not_placed_in_time_gives_its_quota_back_and_backs_off() -> None:
    """As Kueue's waitForPodsReady (a timeout, then requeued with exponential backoff):
    a gang admitted but never placed (nodes shrank, a selector no node matches) holds
    its team's quota for nothing; past ``place_within_s`` it gives it back, the next gang
    is admitted, and it is admitted again in its turn only after a backoff that doubles
    each time, so it does not flap between admitted and queued."""
    state = cluster(with_queueing(place_within_s=100, place_backoff_s=50), NODES3)
    out = feed(state, submit("a", "stuck", 2, at=0.0), now=0.0)
    assert admitted(out) == ["a/stuck"] and state.used["a"] == 16
    out = feed(state, [*submit("a", "next", 1, at=10.0), Tick(at=99.0)], now=99.0)
    assert admitted(out) == [] and state.gangs["a/stuck"].admitted  # not yet
    out = feed(state, [Tick(at=100.0)], now=100.0)
    (unadmit,) = [a for a in of(out, Annotate) if a.name == "stuck"]
    assert unadmit.annotations == {"baton.io/admitted": None, "baton.io/borrowing": None}
    (told,) = [q for q in of(out, GangQueued) if q.gang == "a/stuck"]
    assert "admitted but not placed within 100 s (queueing.place_within_s)" in told.reason
    assert "its 16 GPUs went back to team 'a'" in told.reason, told.reason
    assert admitted(out) == ["a/next"]  # the quota it held goes to the next gang
    # the next gang is placed and ends: room again, but the stuck one backs off 50 s
    feed(state, pods("a", "next", 1, node="n3"), now=110.0)
    out = feed(state, [*pods("a", "next", 1, phase="Succeeded"), Tick(at=149.0)], now=149.0)
    assert admitted(out) == [] and "again from 150 s" in state.gangs["a/stuck"].reason
    out = feed(state, [Tick(at=150.0)], now=150.0)
    assert admitted(out) == ["a/stuck"]  # in its turn, after the backoff
    out = feed(state, [Tick(at=250.0)], now=250.0)  # still not placed: the backoff doubles
    assert (
        not state.gangs["a/stuck"].admitted and "again from 350 s" in state.gangs["a/stuck"].reason
    )
    out = feed(state, [Tick(at=349.0)], now=349.0)
    assert admitted(out) == []
    out = feed(state, [Tick(at=350.0)], now=350.0)
    assert admitted(out) == ["a/stuck"]
    # placed this time: it keeps its quota however long it runs, and the count restarts
    feed(state, pods("a", "stuck", 2, node="n1"), now=360.0)
    out = feed(state, [Tick(at=1000.0)], now=1000.0)
    assert state.gangs["a/stuck"].admitted and of(out, Annotate) == []
    assert state.gangs["a/stuck"].releases == 0


def test_a_gang_no_node_could_take_holds_no_quota_and_says_why() -> None:
    """The webhook refuses a pod larger than every node; one that got in before the
    nodes shrank (or with the webhook off) is set aside rather than admitted, so it
    holds none of its team's quota and blocks nobody."""
    state = cluster(ONE, NODES3)
    out = feed(state, submit("a", "wide", 1, at=1.0, gpus=9) + submit("a", "ok", 1, at=2.0))
    assert admitted(out) == ["a/ok"] and state.used["a"] == 8
    told = [q for q in of(out, GangQueued) if q.gang == "a/wide"][-1]
    assert told.set_aside and "a member asks 9 GPUs but no node has more than 8" in told.reason
    # a larger node comes and the quota has room: it is admitted in its turn
    out = feed(state, [node("n4", "p", gpus=16), *pods("a", "ok", 1, phase="Succeeded"),
                       Tick(at=3.0)], now=3.0)  # fmt: skip
    assert admitted(out) == ["a/wide"]
