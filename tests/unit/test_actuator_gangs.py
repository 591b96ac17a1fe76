"""Gang verdicts and rollback plans: never leave a half-bound gang."""

from __future__ import annotations

import pytest

from baton.proto.actions import Binding
from baton.services.actuator.core.gangs import Member, Undo, gang_error, gang_outcome, plan_rollback

pytestmark = pytest.mark.unit


def members(*states: str) -> tuple[Member, ...]:
    return tuple(
        Member(
            binding=Binding(namespace="a", pod=f"p{i}", uid=f"u{i}", node=f"n{i}"),
            state=state,  # type: ignore[arg-type]
            error="node not found" if state == "failed" else "",
        )
        for i, state in enumerate(states)
    )


@pytest.mark.parametrize(
    ("states", "outcome"),
    [
        (("bound", "bound"), "applied"),
        (("bound", "already"), "applied"),
        (("already", "already"), "already"),
        (("bound", "failed"), "rolled-back"),
        (("bound", "failed", "skipped"), "rolled-back"),
        (("failed",), "rolled-back"),
    ],
)
def test_gang_outcome(states: tuple[str, ...], outcome: str) -> None:
    assert gang_outcome(members(*states)) == outcome


def test_rollback_undoes_every_bound_member_and_only_those() -> None:
    gang = members("bound", "already", "failed", "skipped", "bound")
    controlled = {"a/p0": True, "a/p1": False, "a/p2": False, "a/p3": False, "a/p4": False}
    plan = plan_rollback(gang, controlled=controlled)
    assert plan == (
        Undo(namespace="a", pod="p0", uid="u0", how="delete"),
        Undo(namespace="a", pod="p1", uid="u1", how="recreate"),
        Undo(namespace="a", pod="p4", uid="u4", how="recreate"),
    )


def test_rollback_skips_members_that_vanished() -> None:
    plan = plan_rollback(members("bound", "failed"), controlled={})
    assert plan == ()


def test_error_names_the_failed_binding_and_the_undone_count() -> None:
    error = gang_error(members("bound", "failed", "failed", "bound"))
    assert error == (
        "bind a/p1 -> n1 failed: node not found (and 1 more); rolled back 2 bound members"
    )
    assert gang_error(members("bound")) == ""
