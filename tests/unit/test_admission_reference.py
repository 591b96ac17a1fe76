"""The admission cycle's shortcuts decide exactly as a straightforward cycle does.

``queueing.admit`` keeps each team's least queued need and least in-quota priority as
gangs change, and after an admission looks again only at teams that could still admit.
``reference_admit`` below is the cycle without any of that: every team's stuckness
recomputed from scratch (queue scanned, lenders summed, holders' priorities read) and
each team's queue walked from its head (a new ``Walk``) after every admission. Random
workloads go through both; every output must be the same.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baton.proto.actions import SetTeamStatus
from baton.proto.admission import GangQueued
from baton.proto.k8s import GPU, Node, NodeEvent, Pod, PodEvent, PodGroup, PodGroupEvent
from baton.proto.runner import Tick
from baton.services.admission import core
from baton.services.admission.core import queueing
from baton.services.admission.core.state import State
from baton.services.admission.teams import parse

pytestmark = pytest.mark.unit

TEAMS = ("a", "b", "c")


def _stuck_reference(state: State, team: str) -> bool:
    queued = [state.gangs[k] for _, k in state.queues.get(team, ())]
    least = max(min((g.gpus for g in queued if g.known), default=1 << 62), 1)
    if state.quota(team) - state.used.get(team, 0) >= least:
        return False
    borrow = state.borrow_limit(team) - state.borrowed(team)
    if borrow >= least and min(state.lendable(team), state.free()) >= least:
        return False
    if not queued or not state.config.queueing.preempt_within_team:
        return True
    top = max(g.priority for g in queued)
    return not any(g.priority < top and not g.borrowed for g in state.holding(team))


def reference_admit(state: State, now: float, *, every: bool = True) -> list[Any]:
    outputs: list[Any] = queueing.release_memberless(state, now) if every else []
    outputs += queueing.grow_paused(state, now)
    teams = [
        t
        for t in queueing.team_order(state)
        if every or not _stuck_reference(state, t) or not queueing._tell(state, t, now, outputs)
    ]
    while any(queueing._serve(state, t, now, outputs, queueing.Walk()) for t in teams):
        teams = [t for t in queueing.team_order(state) if every or not _stuck_reference(state, t)]
    return outputs


def teams_config(draw: st.DrawFn) -> dict[str, Any]:
    teams = []
    for name in TEAMS:
        team: dict[str, Any] = {
            "name": name,
            "namespaces": [name],
            "pools": [f"p{name}"],
            "borrow": {"gpus": draw(st.sampled_from([0, 8, 16, 32]))},
            "priority": draw(st.sampled_from([0, 0, 5])),
            "weight": draw(st.integers(1, 3)),
            "lend": draw(st.booleans()),
        }
        quota = draw(st.sampled_from([None, 0, 8, 16, 24]))
        if quota is not None:
            team["quota"] = {"gpus": quota}
        teams.append(team)
    queueing_ = {
        "strategy": draw(st.sampled_from(["BestEffortFIFO", "BestEffortFIFO", "StrictFIFO"])),
        "starvation_s": draw(st.sampled_from([60, 1800])),
        "preempt_within_team": draw(st.booleans()),
        "preempt_min_run_s": draw(st.sampled_from([0, 100])),
        "members_timeout_s": draw(st.sampled_from([30, 600])),
    }
    return {"teams": teams, "queueing": queueing_}


def _pod(team: str, gang: str, i: int, gpus: int, priority: int, phase: str) -> PodEvent:
    pod = Pod(
        namespace=team,
        name=f"{gang}-{i}",
        uid=f"uid-{gang}-{i}",
        phase=phase,  # type: ignore[arg-type]
        labels={"scheduling.x-k8s.io/pod-group": gang},
        requests={GPU: gpus},
        priority=priority,
        scheduler_name="baton",
    )
    return PodEvent(op="upsert", at=0.0, pod=pod)


@st.composite
def workloads(draw: st.DrawFn) -> tuple[dict[str, Any], list[tuple[float, Any]]]:
    config = teams_config(draw)
    now, events, gangs = 0.0, [], []  # gangs: (team, name, members, gpus, priority)
    for n in range(draw(st.integers(1, 6))):
        team = draw(st.sampled_from(TEAMS))
        labels = {"baton.io/pool": f"p{team}"}
        gpus = draw(st.sampled_from([8, 8, 2, 16]))
        node = Node(name=f"n{n}", uid=f"u{n}", labels=labels, allocatable={GPU: gpus})
        events.append((now, NodeEvent(op="upsert", at=now, node=node)))
    for _ in range(draw(st.integers(5, 40))):
        now += draw(st.sampled_from([0.0, 1.0, 50.0, 200.0]))
        op = draw(st.sampled_from(["gang", "gang", "gang", "pods", "finish", "delete", "tick",
                                   "node"]))  # fmt: skip
        if op == "node":  # a node joins or goes: quotas of teams without one, largest node
            n, team = draw(st.integers(0, 7)), draw(st.sampled_from(TEAMS))
            labels = {"baton.io/pool": f"p{team}"}
            gpus = draw(st.sampled_from([2, 8, 16]))
            node = Node(name=f"n{n}", uid=f"u{n}", labels=labels, allocatable={GPU: gpus})
            events.append((now, NodeEvent(op=draw(st.sampled_from(["upsert", "delete"])),
                                          at=now, node=node)))  # fmt: skip
            continue
        if op == "gang" or not gangs:
            team, name = draw(st.sampled_from(TEAMS)), f"g{len(gangs)}"
            members, gpus = draw(st.integers(1, 3)), draw(st.sampled_from([0, 1, 4, 8]))
            priority = draw(st.sampled_from([0, 0, 5, 10]))
            gangs.append((team, name, members, gpus, priority))
            declared = draw(st.sampled_from([{}, {}, {}, {"baton.io/gpus-per-pod": str(gpus)}]))
            group = PodGroup(namespace=team, name=name, uid=f"uid-{name}", min_member=members,
                             created_at=now, annotations=declared)  # fmt: skip
            events.append((now, PodGroupEvent(op="upsert", at=now, pod_group=group)))
            for i in range(draw(st.integers(0, members))):  # some pods may come later
                events.append((now, _pod(team, name, i, gpus, priority, "Pending")))
            continue
        team, name, members, gpus, priority = draw(st.sampled_from(gangs))
        if op == "pods":  # all its pods, some with another demand or priority
            gpus = draw(st.sampled_from([gpus, gpus, 2]))
            priority = draw(st.sampled_from([priority, priority, 7]))
            for i in range(members):
                events.append((now, _pod(team, name, i, gpus, priority, "Running")))
        elif op == "finish":
            for i in range(members):
                events.append((now, _pod(team, name, i, gpus, priority, "Succeeded")))
        elif op == "delete":
            group = PodGroup(namespace=team, name=name, uid=f"uid-{name}", min_member=members)
            events.append((now, PodGroupEvent(op="delete", at=now, pod_group=group)))
        else:
            events.append((now, Tick(at=now)))
    return config, events


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_the_cycle_decides_as_the_straightforward_one(
    workload: tuple[dict[str, Any], list[tuple[float, Any]]],
) -> None:
    config, events = workload
    fast, slow = core.initial(parse(config)), core.initial(parse(config))
    now = 0.0
    for now, event in events:
        fast, got = core.step(fast, event, now)
        with mock.patch.object(queueing, "admit", reference_admit):
            slow, want = core.step(slow, event, now)
        assert decisions(got) == decisions(want), (event, got, want)
        for team in TEAMS:  # the kept counts against the holders read now
            held = [g.priority for g in fast.holding(team) if not g.borrowed]
            assert fast.least_priority(team) == min(held, default=1 << 62), (team, event)
    # What a gang passed over before an admission is told (why it waits, its team's
    # queue) is brought up to date by the next pass: after a tick that admits nothing
    # (one that admits may pass gangs over again) it is the same.
    for tick in range(1, 6):
        fast, got = core.step(fast, Tick(at=now + tick), now + tick)
        with mock.patch.object(queueing, "admit", reference_admit):
            slow, want = core.step(slow, Tick(at=now + tick), now + tick)
        assert decisions(got) == decisions(want)
        if not decisions(got):
            break
    assert {k: g.reason for k, g in fast.gangs.items()} == {
        k: g.reason for k, g in slow.gangs.items()
    }
    assert fast.shown == slow.shown


def decisions(outputs: Any) -> list[Any]:
    """What changes the cluster or a gang's fate: all but why a gang waits (``GangQueued``)
    and the teams' status, which may trail by one pass (``Walk``)."""
    return [o for o in outputs if not isinstance(o, GangQueued | SetTeamStatus)]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0, 4, 8, 16]), st.booleans()),
                max_size=40))  # fmt: skip
def test_the_largest_node_kept_as_nodes_change_is_the_one_found_from_scratch(
    changes: list[tuple[int, int, bool]],
) -> None:
    """``largest_node`` is kept as nodes come, change and go (a pass over every node only
    when the largest shrank or went): always what a pass from scratch finds."""
    state = core.initial(parse({"teams": []}))
    for n, gpus, gone in changes:
        node = Node(name=f"n{n}", uid=f"u{n}", allocatable={GPU: gpus})
        state, _ = core.step(state, NodeEvent(op="delete" if gone else "upsert", at=0.0,
                                              node=node), 0.0)  # fmt: skip
        kept = state.largest_node()
        state.largest = None
        assert kept == state.largest_node(), (n, gpus, gone)


def _told(state: State) -> dict[str, tuple[str, str, int]]:
    return {k: (g.reason, g.aside, g.told_gpus) for k, g in state.gangs.items()}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_a_walk_that_passes_quiet_gangs_by_says_and_decides_the_same(
    workload: tuple[dict[str, Any], list[tuple[float, Any]]],
) -> None:
    """``State.hush``: a gang set aside or short of members, told so, and unchanged since
    is left out of walks. The same cycle visiting every gang must give every output (why each
    gang waits included), and leave every gang told the same, event by event."""
    config, events = workload
    fast, slow = core.initial(parse(config)), core.initial(parse(config))
    for now, event in [*events, *((events[-1][0] + t, Tick(at=events[-1][0] + t))
                                  for t in (10.0, 100.0, 1000.0))]:  # fmt: skip
        fast, got = core.step(fast, event, now)
        slow.wake_all()
        slow, want = core.step(slow, event, now)
        assert got == want, (event, got, want)
        assert _told(fast) == _told(slow), event
        assert fast.untold == slow.untold, event


def test_gangs_waiting_for_their_pods_are_not_looked_at_again_by_each_event() -> None:
    """500 PodGroups of team a, none of their pods yet, behind a gang waiting for nodes
    (so the team is not passed over whole): the first walk tells each why it waits; a
    later event (a pod of team b) looks at none of them again."""
    teams = [{"name": t, "namespaces": [t], "quota": {"gpus": 8}} for t in ("a", "b")]
    state = core.initial(parse({"teams": teams}))
    big = PodGroup(namespace="a", name="big", uid="u-big", min_member=1, created_at=0)
    state, _ = core.step(state, PodGroupEvent(op="upsert", at=1.0, pod_group=big), 1.0)
    state, _ = core.step(state, _pod("a", "big", 0, 8, 0, "Pending"), 1.0)
    for n in range(500):
        group = PodGroup(namespace="a", name=f"g{n}", uid=f"u{n}", min_member=2, created_at=0)
        state, _ = core.step(state, PodGroupEvent(op="upsert", at=1.0, pod_group=group), 1.0)
    state, _ = core.step(state, Tick(at=2.0), 2.0)
    assert "waiting for capacity" in state.gangs["a/big"].reason
    waiting = [g for k, g in state.gangs.items() if k != "a/big"]
    assert all(g.reason.startswith("waiting for members") for g in waiting)
    with mock.patch.object(queueing, "_aside", wraps=queueing._aside) as aside:
        state, outputs = core.step(state, _pod("b", "x", 0, 8, 0, "Pending"), 3.0)
    assert aside.call_count < 5, aside.call_count  # (500 before State.hush)
    assert not [o for o in outputs if isinstance(o, GangQueued) and o.gang.startswith("a/")]
