"""Gang placement honours admission's decision: an admitted gang of a team runs on its
team's nodes when within quota, and only on other teams' nodes when it borrows."""

from __future__ import annotations

import msgspec
import pytest

from baton.proto.k8s import Node, Pod, PodGroup
from baton.services.gang import core
from tests.support.builders import gang, node, pod
from tests.unit.gang_helpers import binds, make, tick

pytestmark = pytest.mark.unit

TEAM = "baton.io/team"


def two_teams() -> list[Node]:
    """a0 (team a) sorts first, so a placement that ignores teams picks it."""
    return [node("a0").labelled(**{TEAM: "a"}).build(), node("b0").labelled(**{TEAM: "b"}).build()]


def team_gang(*, borrowing: bool, admitted: bool = True) -> tuple[PodGroup, list[Pod]]:
    group, members = gang("job", 1, namespace="team-a", admitted=admitted)
    notes = {**group.annotations, **({"baton.io/borrowing": "true"} if borrowing else {})}
    group = msgspec.structs.replace(group, labels={TEAM: "a"}, annotations=notes)
    members = [msgspec.structs.replace(p, labels={**p.labels, TEAM: "a"}) for p in members]
    return group, members


@pytest.mark.parametrize(("borrowing", "where"), [(False, "a0"), (True, "b0")])
def test_admitted_gang_runs_where_admission_said(borrowing: bool, where: str) -> None:
    group, members = team_gang(borrowing=borrowing)
    state = make(two_teams(), group, members, policy=core.Policy(require_admission=True))
    [bind] = binds(tick(state))
    assert [b.node for b in bind.bindings] == [where]


def test_a_borrower_waits_rather_than_take_its_own_teams_nodes() -> None:
    group, members = team_gang(borrowing=True)
    busy = pod("other", namespace="team-b", gpus=8, node_name="b0", scheduler="other")
    state = make(two_teams(), busy, group, members, policy=core.Policy(require_admission=True))
    assert binds(tick(state)) == []


def test_lone_pod_marks_are_on_the_pod() -> None:
    lone = pod(
        "solo",
        namespace="team-a",
        gpus=8,
        labels={TEAM: "a"},
        annotations={"baton.io/admitted": "true", "baton.io/borrowing": "true"},
    )
    state = make(two_teams(), lone, policy=core.Policy(require_admission=True))
    [bind] = binds(tick(state))
    assert [b.node for b in bind.bindings] == ["b0"]


def test_without_team_labels_nothing_changes() -> None:
    group, members = gang("job", 1, admitted=True)
    state = make([node("n0").build()], group, members, policy=core.Policy(require_admission=True))
    assert len(binds(tick(state))) == 1
