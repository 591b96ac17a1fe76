"""The actuator's bounds: members per action capped (refused with the reason, nothing
charged), and the rate bucket charged for the API writes an action really made."""

from __future__ import annotations

import msgspec
import pytest

from baton.proto.actions import (
    BindGang,
    Binding,
    Cordon,
    EvictGang,
    PodRef,
    SetPodCondition,
    StatusCondition,
)
from baton.proto.k8s import MAX_GANG_MEMBERS
from baton.services.actuator import core
from baton.services.actuator.core import Apply, Arrived, Finished, Limits, Report, Settle
from baton.services.actuator.main import Settings

pytestmark = pytest.mark.unit


def bind(id_: str, size: int) -> BindGang:
    bindings = tuple(Binding(namespace="a", pod=f"p{i}", node=f"n{i}") for i in range(size))
    return BindGang(id=id_, by="gang", at=0.0, gang="a/g", bindings=bindings)


def test_a_bind_naming_more_members_than_the_cap_is_refused_with_the_reason() -> None:
    state = core.initial(Limits(qps=100, burst=100, max_members=64), now=0.0)
    state, out = core.step(state, Arrived(action=bind("forged", 10_000), ticket=1), 0.0)
    assert not [o for o in out if isinstance(o, Apply)]
    (report,) = [o for o in out if isinstance(o, Report)]
    assert report.result.outcome == "failed"
    assert "10000 members" in report.result.error and "64" in report.result.error
    assert "BATON_ACTUATOR_MAX_MEMBERS" in report.result.error
    assert [o.verdict for o in out if isinstance(o, Settle)] == ["ack"]
    assert state.bucket.tokens == 100  # nothing charged: other actions go on at once
    state, out = core.step(state, Arrived(action=bind("next", 64), ticket=2), 0.0)
    assert [o.action.id for o in out if isinstance(o, Apply)] == ["next"]  # at the cap: fine
    state, out = core.step(state, Arrived(action=bind("forged", 10_000), ticket=3), 0.0)
    (again,) = [o for o in out if isinstance(o, Report)]
    assert again.result.outcome == "already"  # a redelivery is answered, not re-judged


def test_an_evict_gang_is_capped_too() -> None:
    state = core.initial(Limits(max_members=8), now=0.0)
    action = EvictGang(id="e", by="gang", at=0.0, gang="a/g", pods=bind("b", 9).bindings)
    state, out = core.step(state, Arrived(action=action, ticket=1), 0.0)
    assert [o.result.outcome for o in out if isinstance(o, Report)] == ["failed"]


def test_the_bucket_is_charged_for_the_writes_an_action_made_beyond_its_estimate() -> None:
    state = core.initial(Limits(qps=1, burst=10), now=0.0)
    cordon = Cordon(id="c", by="health", at=0.0, node="n1", priority="health")
    state, _ = core.step(state, Arrived(action=cordon, ticket=1), 0.0)
    assert state.bucket.tokens == 9  # estimated: one write
    state, _ = core.step(state, Finished(action_id="c", outcome="applied", calls=4), 0.0)
    assert state.bucket.tokens == 6  # it made four: three more charged


def test_the_bucket_gets_back_the_writes_an_action_did_not_make() -> None:
    """A gang's pod conditions are charged a write per pod; pods that already had the
    condition were only read. Kept charged, the reads of a backlog of such repeats spent
    the whole write budget while nothing was written (7,500 nodes, after the fill)."""
    state = core.initial(Limits(qps=1, burst=10), now=0.0)
    told = SetPodCondition(
        id="t", by="reporter", at=0.0, gang="a/g", namespace="a", priority="status",
        pods=tuple(PodRef(name=f"p{i}", uid=f"u{i}") for i in range(4)),
        condition=StatusCondition(type="PodScheduled", status="False", reason="Waiting"),
    )  # fmt: skip
    state, _ = core.step(state, Arrived(action=told, ticket=1), 0.0)
    assert state.bucket.tokens == 6  # estimated: four writes
    state, _ = core.step(state, Finished(action_id="t", outcome="already", calls=0), 0.0)
    assert state.bucket.tokens == 10  # none made: all four back
    again = msgspec.structs.replace(told, id="t2")
    state, _ = core.step(state, Arrived(action=again, ticket=2), 0.0)
    state, _ = core.step(state, Finished(action_id="t2", outcome="would-do"), 0.0)
    assert state.bucket.tokens == 6  # not counted (a dry run): the estimate stays charged


def test_the_actuator_may_not_refuse_a_gang_the_webhook_admits_and_gang_places() -> None:
    with pytest.raises(ValueError, match="MAX_MEMBERS is below 4096"):
        Settings(max_members=MAX_GANG_MEMBERS - 1)
    assert Settings().limits().max_members == MAX_GANG_MEMBERS
