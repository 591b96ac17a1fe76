"""Shortest expected work first (``shortest_first_s``): a one-pod gang's place in the
queue moves back by its expected work, at most ``shortest_first_s``: a short job
overtakes a longer one created shortly before it, never one created long before, and
never a multi-pod gang; the head still reserves by age."""

from __future__ import annotations

import pytest

from baton.proto import keys
from baton.proto.k8s import Node, Pod, PodGroup
from baton.services.gang import core
from baton.services.gang.core import estimates, ordering
from tests.support.builders import gang, node, pod
from tests.unit.gang_helpers import apply, binds, feed, gangs_bound, make, tick, verdicts

pytestmark = pytest.mark.unit

HOUR = 3600.0


def flat(count: int) -> list[Node]:
    return [node(f"n{i:03}", gpus=8).build() for i in range(count)]


def job(
    name: str, *, at: float, expected: str | None, gpus: int = 1, size: int = 1
) -> tuple[PodGroup, list[Pod]]:
    notes = {keys.EXPECTED_DURATION: expected} if expected is not None else {}
    return gang(name, size, gpus=gpus, created_at=at, annotations=notes)


def one_gpu_free(policy: core.Policy, short_at: float) -> core.State:
    """One node with 1 of its 8 GPUs free; a long job (10 h, created at 0) and a short
    one (10 min, created at ``short_at``) both want that GPU."""
    busy = pod("busy", gpus=7, node_name="n000", phase="Running", scheduler="other")
    return make(
        flat(1),
        busy,
        *job("long", at=0.0, expected="10h"),
        *job("short", at=short_at, expected="10m"),
        policy=policy,
    )


SHORTEST = core.Policy(shortest_first_s=HOUR)


@pytest.mark.parametrize(
    ("case", "policy", "short_at", "first"),
    [
        ("priority then age by default", core.Policy(), 60.0, "default/long"),
        ("the shorter goes first", SHORTEST, 60.0, "default/short"),
        ("not past a gang created shortest_first_s before", SHORTEST, HOUR, "default/long"),
        ("strict FIFO ignores it", core.Policy(strict_fifo=True, shortest_first_s=HOUR), 60.0,
         "default/long"),
    ],
)  # fmt: skip
def test_which_job_gets_the_free_gpu(
    case: str, policy: core.Policy, short_at: float, first: str
) -> None:
    state = one_gpu_free(policy, short_at)
    assert gangs_bound(tick(state, short_at + 60.0)) == [first]


def test_smaller_work_first_and_no_estimate_moved_back_the_most() -> None:
    """Work is GPUs x expected run time (x ``shortest_first_weight``: 0.25); a gang with
    no estimate moves back the most, ``shortest_first_s``."""
    state = make(
        flat(1),
        *job("unknown", at=0.0, expected=None),  # place 3,600
        *job("wide", at=1.0, expected="10m", gpus=4),  # 40 GPU-min: place 601
        *job("narrow", at=2.0, expected="10m", gpus=1),  # 10 GPU-min: place 152
        policy=core.Policy(shortest_first_s=HOUR),
    )
    queue = ordering.queue(
        state.cluster, now=10.0, require_admission=False, policy=state.policy, runs=state.runs
    )
    assert [g.key for g in queue] == ["default/narrow", "default/wide", "default/unknown"]
    assert [ordering.key(state.cluster, g, policy=state.policy)[1] for g in queue] == [
        152.0,
        601.0,
        3600.0,
    ]


def test_a_multi_pod_gang_keeps_its_place_by_age() -> None:
    """Only one-pod gangs move back: a two-node gang stays ahead of a younger short job
    (and so can become the head)."""
    state = make(
        flat(2),
        *job("pair", at=0.0, expected="10h", gpus=8, size=2),
        *job("short", at=1.0, expected="1m"),
        *job("long", at=2.0, expected="10h"),
        policy=core.Policy(shortest_first_s=HOUR),
    )
    queue = ordering.queue(
        state.cluster, now=10.0, require_admission=False, policy=state.policy, runs=state.runs
    )
    assert [g.key for g in queue] == ["default/pair", "default/short", "default/long"]


def test_learned_estimates_order_young_gangs_too() -> None:
    """With ``learn_estimates`` a gang without an annotation is ordered by its team's
    recent runs of its size (they change as runs finish: the key is not fixed)."""
    policy = core.Policy(shortest_first_s=HOUR, learn_estimates=True, estimate_samples=1)
    state = make(flat(1), *job("a", at=0.0, expected=None), *job("b", at=1.0, expected="1h"),
                 policy=policy)  # fmt: skip
    cl = state.cluster
    a = cl.gangs["default/a"]
    assert ordering.key(cl, a, policy=policy, runs=state.runs)[1] == HOUR  # no runs yet
    state.runs.add(estimates.team(cl, a), "1", 600.0, keep=policy.estimate_history)
    queue = ordering.queue(cl, now=10.0, require_admission=False, policy=policy, runs=state.runs)
    assert [g.key for g in queue] == ["default/a", "default/b"]  # 150 s back, b 900 s


def test_the_head_still_reserves_once_it_has_waited() -> None:
    """8 nodes, 4 busy; an 8-node head, no estimate, waiting ``reserve_after_s``; a short
    1-GPU job arrives: it would fit on the head's reserved nodes, and does not take them
    (it would if short jobs were moved ahead of the head)."""
    policy = core.Policy(shortest_first_s=600.0, reserve_after_s=600.0)
    running_group, running = gang("running", 4, created_at=0)
    state = make(flat(8), running_group, running, policy=policy)
    apply(state, binds(tick(state, 1.0))[0])
    feed(state, [*gang("head", 8, created_at=1.0)[0:1], *gang("head", 8, created_at=1.0)[1]])
    group, members = job("quick", at=700.0, expected="5m")
    feed(state, [group, *members], at=700.0)
    out = tick(state, 700.0)
    assert binds(out) == []
    assert {v.gang: v for v in verdicts(out)}["default/quick"].blocked_by == "default/head"
