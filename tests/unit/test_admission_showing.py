"""Teams shown to kubectl users (``services/baton/services/admission/core/showing.py``): each team's
quota, usage, borrowing and queue with positions and reasons, sent to the actuator as
``SetTeamStatus`` on ticks only, and only when it changed."""

from __future__ import annotations

from typing import Any

import pytest

from baton.proto.actions import SetTeamStatus
from baton.proto.runner import Tick
from baton.services.admission import core
from baton.services.admission.core import showing
from baton.services.admission.teams import parse
from tests.unit.test_admission_core import TWO_TEAMS, cluster, feed, node, of, pods, submit

pytestmark = pytest.mark.unit

ONE: dict[str, Any] = {
    "teams": [{"name": "a", "namespaces": ["a"], "pools": ["p"], "quota": {"gpus": 16}}]
}


def shown(out: list[Any]) -> dict[str, SetTeamStatus]:
    return {a.team: a for a in of(out, SetTeamStatus)}


def test_a_tick_shows_quota_usage_and_the_queue_with_positions_and_reasons() -> None:
    state = cluster(ONE, [node("n1", "p"), node("n2", "p")])
    feed(state, submit("a", "running", 1, at=1.0))  # 8 of 16
    events = submit("a", "big", 2, at=2.0) + submit("a", "later", 2, at=3.0)
    feed(state, events, now=3.0)
    out = feed(state, [Tick(at=4.0)], now=4.0)
    action = shown(out)["a"]
    assert action.priority == "status" and action.by == "admission" and not action.remove
    status = action.status
    assert (status.quota, status.used, status.borrowed) == (16, 8, 0)
    assert (status.admitted, status.waiting, status.namespaces) == (1, 2, ("a",))
    assert [(g.name, g.position, g.gpus) for g in status.queue] == [
        ("a/big", 0, 16),
        ("a/later", 1, 16),
    ]
    assert "uses 8 of its 16 GPU quota" in status.queue[0].reason, status.queue[0].reason


def test_positions_move_up_when_the_head_is_admitted() -> None:
    state = cluster(ONE, [node("n1", "p"), node("n2", "p")])
    feed(state, submit("a", "running", 2, at=1.0))  # 16 of 16
    feed(state, submit("a", "first", 1, at=2.0) + submit("a", "second", 1, at=3.0), now=3.0)
    before = shown(feed(state, [Tick(at=4.0)], now=4.0))["a"].status
    assert [(g.name, g.position) for g in before.queue] == [("a/first", 0), ("a/second", 1)]
    feed(state, pods("a", "running", 2, phase="Succeeded"), now=5.0)  # first and second go
    after = shown(feed(state, [Tick(at=6.0)], now=6.0))["a"].status
    assert (after.waiting, after.queue, after.used, after.admitted) == (0, (), 16, 2)


def test_nothing_is_sent_between_ticks_nor_when_nothing_changed() -> None:
    state = cluster(ONE, [node("n1", "p"), node("n2", "p")])
    out = feed(state, submit("a", "running", 2, at=1.0) + submit("a", "w", 1, at=2.0))
    assert of(out, SetTeamStatus) == []  # events alone send nothing
    assert shown(feed(state, [Tick(at=3.0)], now=3.0))
    assert of(feed(state, [Tick(at=4.0)], now=4.0), SetTeamStatus) == []  # unchanged
    assert of(feed(state, pods("a", "w", 1), now=5.0), SetTeamStatus) == []  # same pod again
    assert of(feed(state, [Tick(at=6.0)], now=6.0), SetTeamStatus) == []


def test_a_change_asks_for_a_tick_even_with_no_gang_waiting() -> None:
    state = cluster(ONE, [node("n1", "p"), node("n2", "p")])
    feed(state, [Tick(at=1.0)], now=1.0)
    assert not core.wants_tick(state.state, 1.5)  # nothing waits, nothing to show
    feed(state, submit("a", "g", 1, at=2.0, node="n1"), now=2.0)  # admitted at once: placed
    assert core.wants_tick(state.state, 2.5)
    status = shown(feed(state, [Tick(at=3.0)], now=3.0))["a"].status
    assert (status.used, status.waiting) == (8, 0)
    assert not core.wants_tick(state.state, 3.5)


def test_borrowing_is_shown_for_the_borrower() -> None:
    state = cluster(TWO_TEAMS, [node("a1", "pa"), node("b1", "pb"), node("b2", "pb")])
    feed(state, submit("team-a", "mine", 1, at=1.0) + submit("team-a", "more", 2, at=2.0))
    teams = shown(feed(state, [Tick(at=3.0)], now=3.0))
    a, b = teams["a"].status, teams["b"].status
    assert (a.quota, a.borrow_limit, a.used, a.borrowed, a.admitted) == (8, 16, 8, 16, 2)
    assert (b.quota, b.used, b.borrowed) == (16, 0, 0)


def test_the_queue_shown_is_bounded_and_waiting_counts_every_gang() -> None:
    state = cluster(ONE, [node("n1", "p"), node("n2", "p")])
    feed(state, submit("a", "running", 2, at=1.0))
    events = [e for i in range(showing.SHOWN + 5) for e in submit("a", f"g{i:03}", 1, at=2.0 + i)]
    feed(state, events, now=100.0)
    status = shown(feed(state, [Tick(at=101.0)], now=101.0))["a"].status
    assert status.waiting == showing.SHOWN + 5
    assert len(status.queue) == showing.SHOWN
    assert status.queue[-1].position == showing.SHOWN - 1


def test_a_team_gone_from_the_team_file_is_removed() -> None:
    state = cluster(TWO_TEAMS, [node("a1", "pa"), node("b1", "pb")])
    assert set(shown(feed(state, [Tick(at=1.0)], now=1.0))) == {"a", "b"}
    only_a = {"teams": [TWO_TEAMS["teams"][0]]}
    feed(state, [core.TeamsLoaded(at=2.0, config=parse(only_a))], now=2.0)
    out = shown(feed(state, [Tick(at=3.0)], now=3.0))
    assert out["b"].remove and "a" not in out  # a did not change


def test_a_set_aside_gang_says_so() -> None:
    state = cluster(ONE, [node("n1", "p"), node("n2", "p")])
    feed(state, submit("a", "huge", 3, at=1.0))  # 24 GPUs: more than the team ever holds
    status = shown(feed(state, [Tick(at=2.0)], now=2.0))["a"].status
    (huge,) = status.queue
    assert huge.set_aside and huge.reason.startswith("set aside"), huge


def test_set_aside_gangs_come_after_those_in_line_and_are_never_the_head() -> None:
    state = cluster(ONE, [node("n1", "p"), node("n2", "p")])
    feed(state, submit("a", "running", 2, at=1.0))  # 16 of 16: nothing more goes
    feed(state, submit("a", "huge", 3, at=2.0) + submit("a", "small", 1, at=3.0), now=3.0)
    status = shown(feed(state, [Tick(at=4.0)], now=4.0))["a"].status
    assert [(g.name, g.position, g.set_aside) for g in status.queue] == [
        ("a/small", 0, False),
        ("a/huge", 1, True),
    ]
