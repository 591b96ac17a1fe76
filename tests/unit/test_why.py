"""``baton why``: the story in a few lines, what the gang waits for, what would unblock it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import nats.errors
import pytest

from baton.proto import keys
from baton.proto.actions import ActionResult, Binding
from baton.proto.admission import GangAdmitted, GangPreempted, GangQueued
from baton.proto.k8s import VOLCANO_API, GangRef, PodEvent, PodGroupEvent
from baton.proto.placement import GangPlaced, GangUnschedulable, Need
from baton.proto.runner import Tick
from baton.services.cli import main as cli
from baton.services.cli import why
from tests.support.builders import pod, pod_group
from tests.unit.test_admission_core import cluster, feed, node, of, submit

pytestmark = pytest.mark.unit


def test_a_preempted_gang_tells_its_story_and_what_it_waits_for() -> None:
    group = pod_group("job", namespace="ml", min_member=2)
    members = [pod(f"job-{i}", namespace="ml", group="job", gpus=8) for i in range(2)]
    bindings = tuple(Binding(namespace="ml", pod=p.name, node="n1") for p in members)
    history = [
        PodGroupEvent(op="upsert", at=1.0, pod_group=group),
        *(PodEvent(op="upsert", at=1.0, pod=p) for p in members),
        GangQueued(at=2.0, gang="ml/job", team="a", reason="behind 1 gang", position=1),
        GangAdmitted(at=3.0, gang="ml/job", team="a", gpus=16, borrowed=16),
        GangPlaced(gang="ml/job", at=4.0, action_id="bind-1", bindings=bindings, attempt=1),
        ActionResult(
            action_id="bind-1",
            action_type="action.bind-gang.v1",
            by="actuator",
            at=4.5,
            outcome="applied",
        ),
        GangPreempted(at=9.0, gang="ml/job", team="a", for_team="b", for_gang="ml2/big", gpus=16),
        GangQueued(
            at=9.0, gang="ml/job", team="a", reason="team 'a' may not borrow now", position=0
        ),
    ]
    lines = why.explain(why.Facts(key="ml/job", group=group, pods=members, history=history))
    texts = [line.split("  ", 2)[-1] for line in lines[1:-2]]
    assert lines[0] == (
        "gang ml/job (scheduler-plugins PodGroup): Pending, 0 of 2 members bound, 0 running"
    )
    assert texts == [
        "PodGroup created: minMember 2",
        "member pods created",
        "waiting for admission: behind 1 gang",
        "admitted: 16 GPUs of team 'a', 16 borrowed",
        "placed: 2 members (attempt 1)",
        "bind applied",
        "preempted whole for ml2/big (team 'b')",
        "waiting for admission: team 'a' may not borrow now",
    ]
    assert lines[-2] == "waits for: waiting for admission: team 'a' may not borrow now"
    assert lines[-1].startswith("unblocks it: GPUs for the team")


@pytest.mark.parametrize(
    ("verdict", "hint"),
    [
        (
            GangUnschedulable(
                gang="ml/job",
                at=2.0,
                reason="0 of 2 members fit",
                need=Need(nodes=2, shape={keys.GPU: 8}, within=keys.RACK),
                fits_when_free=True,
            ),
            "unblocks it: 2 more nodes with 8 nvidia.com/gpu in one rack, "
            "or running work finishing",
        ),
        (
            GangUnschedulable(
                gang="ml/job",
                at=2.0,
                reason="0 of 2 members fit outside ...",
                need=Need(nodes=0),
                blocked_by="ml/head",
            ),
            "unblocks it: the gang ahead of it, ml/head, being placed first",
        ),
    ],
)
def test_a_verdict_says_what_would_unblock_the_gang(verdict: GangUnschedulable, hint: str) -> None:
    members = [pod(f"job-{i}", namespace="ml", group="job", gpus=8) for i in range(2)]
    facts = why.Facts(key="ml/job", group=pod_group("job", namespace="ml", min_member=2),
                      pods=members, history=[verdict])  # fmt: skip
    assert why.explain(facts)[-1] == hint


def test_pods_naming_a_missing_pod_group_are_told_to_create_it() -> None:
    ref = GangRef(name="job", source="kubernetes")
    facts = why.Facts(key="ml/job", group=None, pods=[pod("w-0", namespace="ml", ref=ref)],
                      asked="ml/w-0")  # fmt: skip
    lines = why.explain(facts)
    assert lines[0] == "pod ml/w-0: a member of gang ml/job"
    assert lines[1] == (
        "gang ml/job (upstream PodGroup not found): Pending, 0 of ? members bound, 0 running"
    )
    assert lines[-1].startswith("unblocks it: create that PodGroup")


def test_why_is_a_command() -> None:
    assert "why" in cli.COMMANDS
    with pytest.raises(SystemExit):
        why.run(["not-a-target"])


def test_a_gang_that_is_gone_still_has_its_story() -> None:
    member = pod("job-0", namespace="ml", group="job", gpus=8)
    history = [
        PodEvent(op="upsert", at=1.0, pod=member),
        GangPlaced(gang="ml/job", at=2.0, action_id="bind-1", bindings=(), attempt=1),
        PodEvent(op="delete", at=9.0, pod=member),
    ]
    lines = why.explain(why.Facts(key="ml/job", group=None, pods=[], history=history))
    assert lines[0] == "gang ml/job: gone from the cluster (no PodGroup, no pods); its story:"
    assert [line.split("  ", 2)[-1] for line in lines[1:]] == [
        "member pods created", "placed: 0 members (attempt 1)", "pod job-0 deleted",
    ]  # fmt: skip


def test_the_autoscalers_decisions_are_part_of_the_story() -> None:
    from baton.proto.autoscaler import ScaledUp, ScaleRefused, ScaleReverted

    members = [pod(f"job-{i}", namespace="ml", group="job", gpus=8) for i in range(4)]
    history = [
        ScaledUp(gang="ml/job", pool="default/h100", nodes=2, replicas=6, action_id="a", at=1),
        ScaleReverted(gang="ml/job", pool="default/h100", nodes=2, replicas=4, action_id="b",
                      reason="2 of 2 nodes not Ready after 900s", at=2),
        ScaleRefused(gang="ml/job", nodes=2, reason="default/h100: backing off", at=3),
        ScaleRefused(gang="ml/other", nodes=1, reason="not this gang", at=4),
    ]  # fmt: skip
    facts = why.Facts(key="ml/job", group=pod_group("job", namespace="ml", min_member=4),
                      pods=members, history=history)  # fmt: skip
    text = "\n".join(why.explain(facts))
    assert "pool default/h100 asked for 2 more nodes (6 in all)" in text
    assert "nodes asked for were taken back: 2 of 2 nodes not Ready after 900s" in text
    assert "no nodes added for it: default/h100: backing off" in text
    assert "not this gang" not in text


def test_a_running_gang_s_waiting_members_say_what_they_wait_for() -> None:
    running = [pod(f"job-{i}", namespace="ml", group="job", gpus=8, node_name=f"n{i}")
               for i in range(2)]  # fmt: skip
    late = pod("job-2", namespace="ml", group="job", gpus=8)
    bindings = tuple(Binding(namespace="ml", pod=p.name, node=p.node_name) for p in running)
    waits = GangUnschedulable(
        gang="ml/job", at=5.0, need=Need(nodes=1, shape={keys.GPU: 8}),
        reason="2 members run (minMember 2); 1 more wait for room",
    )  # fmt: skip
    history = [GangPlaced(gang="ml/job", at=4.0, action_id="b", bindings=bindings, attempt=1),
               waits]  # fmt: skip
    facts = why.Facts(key="ml/job", group=pod_group("job", namespace="ml", min_member=2),
                      pods=[*running, late], history=history, asked="ml/job-2")  # fmt: skip
    lines = why.explain(facts)
    assert lines[-2] == (
        "waits for: 2 members run (minMember 2); 1 more wait for room; "
        "need 1 more node with 8 nvidia.com/gpu"
    )
    assert lines[-1] == "unblocks it: 1 more node with 8 nvidia.com/gpu"


def test_a_gang_with_no_member_bound_is_never_called_placed() -> None:
    group = pod_group("job", namespace="ml", min_member=16)
    members = [pod(f"job-{i}", namespace="ml", group="job", gpus=8) for i in range(16)]
    history = [PodGroupEvent(op="upsert", at=1.0, pod_group=group)]
    unread = why.explain(why.Facts(key="ml/job", group=group, pods=[], history=history))
    assert unread[-1] == "waits for: its member pods (none is on the bus)"
    pending = why.explain(why.Facts(key="ml/job", group=group, pods=members, history=history))
    assert pending[-1] == (
        "waits for: placement (0 of 16 members bound; no verdict on the bus yet)"
    )


class _Meta:
    def __init__(self, pending: int) -> None:
        self.num_pending = pending


class _Msg:
    def __init__(self, pending: int) -> None:
        self.data = b"{}"
        self.metadata = _Meta(pending)


class _StalledSub:
    """A subscription that delivers 2 of 5 messages and then nothing."""

    def __init__(self) -> None:
        self.left = [_Msg(4), _Msg(3)]

    async def consumer_info(self) -> Any:
        return SimpleNamespace(num_pending=5, delivered=SimpleNamespace(consumer_seq=0))

    async def next_msg(self, **_: float) -> _Msg:
        if not self.left:
            raise nats.errors.TimeoutError
        return self.left.pop(0)

    async def unsubscribe(self) -> None:
        pass


class _Js:
    async def stream_info(self, stream: str) -> Any:
        return SimpleNamespace(state=SimpleNamespace(messages=5))

    async def subscribe(self, subject: str, **_: Any) -> _StalledSub:
        return _StalledSub()


async def test_a_read_that_stalls_is_an_error_not_a_partial_answer() -> None:
    with pytest.raises(why.WhyError, match="could not read the gang's state: 2 messages"):
        await why._read(_Js(), "BATON_c1_K8S", "baton.c1.k8s.*.ml.>", within=0.01)


def test_a_gang_given_back_unplaced_says_so_and_when_it_is_admitted_again() -> None:
    """The release the admission core publishes (``core/unplaced.py``) is what ``why``
    says the gang waits for, after the verdict that kept it off every node."""
    state = cluster({"queueing": {"place_within_s": 100}}, [node("n1"), node("n2")])
    feed(state, submit("ml", "job", 2, at=0.0), now=0.0)
    (released,) = of(feed(state, [Tick(at=100.0)], now=100.0), GangQueued)
    group = pod_group("job", namespace="ml", min_member=2)
    members = [pod(f"job-{i}", namespace="ml", group="job", gpus=8) for i in range(2)]
    said = (
        "no node takes a member: 0/2 nodes are available: 2 node(s) didn't match Pod's node "
        "affinity/selector (nodeSelector pool=x)"
    )
    verdict = GangUnschedulable(gang="ml/job", at=5.0, reason=said, need=Need(nodes=2))
    history = [
        PodGroupEvent(op="upsert", at=0.0, pod_group=group),
        GangAdmitted(at=0.0, gang="ml/job", team="default", gpus=16),
        verdict,
        released,
    ]
    lines = why.explain(why.Facts(key="ml/job", group=group, pods=members, history=history))
    assert lines[-2].startswith(
        "waits for: waiting for admission: admitted but not placed within 100 s "
        "(queueing.place_within_s): its 16 GPUs went back to team 'default'"
    ), lines


def test_a_volcano_podgroup_is_named_as_such() -> None:
    group = pod_group("job", namespace="ml", min_member=2, api=VOLCANO_API)
    members = [pod(f"job-{i}", namespace="ml", group="job", gpus=8) for i in range(2)]
    lines = why.explain(why.Facts(key="ml/job", group=group, pods=members, history=[]))
    assert lines[0].startswith("gang ml/job (Volcano PodGroup): Pending, 0 of 2 members bound")
