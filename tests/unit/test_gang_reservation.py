"""When the head holds its reservation: after ``reserve_after_s`` of waiting, and not once
its PodGroup's ``scheduleTimeoutSeconds`` has passed."""

from __future__ import annotations

import msgspec
import pytest

from baton.proto.k8s import Node
from baton.services.gang import core
from tests.support.builders import gang, node
from tests.unit.gang_helpers import apply, binds, feed, make, tick, verdicts

pytestmark = pytest.mark.unit


def flat(count: int) -> list[Node]:
    return [node(f"n{i:03}", gpus=8).build() for i in range(count)]


def blocked_head(*, policy: core.Policy | None = None, timeout: int | None = None) -> core.State:
    """8 nodes, 4 busy; an 8-node head (created at 1) and a 1-node small gang behind it."""
    running_group, running = gang("running", 4, created_at=0)
    state = make(flat(8), running_group, running, policy=policy)
    apply(state, binds(tick(state, 1.0))[0])
    head_group, head = gang("head", 8, priority=5, created_at=1)
    head_group = msgspec.structs.replace(head_group, schedule_timeout_seconds=timeout)
    feed(state, [head_group, *head])
    return state


def add_small(state: core.State, name: str, at: float) -> None:
    group, members = gang(name, 1, created_at=at)
    feed(state, [group, *members], at=at)


@pytest.mark.parametrize(
    ("case", "after", "at", "backfills"),
    [
        ("reserves at once by default", 0.0, 3.0, False),
        ("a young head reserves nothing yet", 600.0, 3.0, True),
        ("it reserves once it has waited reserve_after_s", 600.0, 700.0, False),
    ],
)
def test_the_head_reserves_after_waiting(
    case: str, after: float, at: float, backfills: bool
) -> None:
    state = blocked_head(policy=core.Policy(reserve_after_s=after))
    add_small(state, "small", at)
    out = tick(state, at)
    assert [b.gang for b in binds(out)] == (["default/small"] if backfills else [])
    head = {v.gang: v for v in verdicts(out)}["default/head"]
    assert head.fits_when_free


def test_a_timed_out_head_holds_no_reservation_and_says_so() -> None:
    state = blocked_head(timeout=60)
    add_small(state, "early", 3.0)
    out = tick(state, 3.0)
    assert binds(out) == []  # within its timeout the head's reservation holds
    assert {v.gang: v.blocked_by for v in verdicts(out)}["default/early"] == "default/head"
    add_small(state, "late", 100.0)
    out = tick(state, 100.0)
    assert sorted(b.gang for b in binds(out)) == ["default/early", "default/late"]
    (head,) = verdicts(out)
    assert head.gang == "default/head" and head.reason.startswith("timed out")
    assert head.blocked_by == ""


def test_strict_fifo_places_nothing_behind_the_head() -> None:
    state = blocked_head(policy=core.Policy(strict_fifo=True, reserve_after_s=600.0))
    add_small(state, "small", 3.0)
    assert binds(tick(state, 3.0)) == []  # even a young head blocks in strict FIFO
    state = blocked_head(policy=core.Policy(reserve_after_s=600.0))
    add_small(state, "small", 3.0)
    assert [b.gang for b in binds(tick(state, 3.0))] == ["default/small"]


def test_strict_fifo_passes_a_gang_that_can_never_fit() -> None:
    state = make(flat(2), policy=core.Policy(strict_fifo=True))
    huge_group, huge = gang("huge", 3, priority=5, created_at=0)
    feed(state, [huge_group, *huge])
    add_small(state, "small", 1.0)
    out = tick(state, 1.0)
    assert [b.gang for b in binds(out)] == ["default/small"]
    assert not {v.gang: v for v in verdicts(out)}["default/huge"].fits_when_free


def test_a_podgroup_without_its_pods_is_set_aside_after_its_timeout() -> None:
    group, _ = gang("empty", 2, created_at=0)
    group = msgspec.structs.replace(group, schedule_timeout_seconds=60)
    state = make(flat(2), group)
    assert core.wants_tick(state, 1.0)  # to say so when its time comes
    assert verdicts(tick(state, 59.0)) == []
    add_small(state, "small", 60.0)
    out = tick(state, 60.0)
    assert [b.gang for b in binds(out)] == ["default/small"]
    (aside,) = verdicts(out)
    assert aside.gang == "default/empty"
    assert aside.reason.startswith("set aside: 0 of 2 member pods after 60 s")
    assert verdicts(tick(state, 61.0)) == []  # told once
