"""The cycle: order, reservation and backfill, verdicts on change, forget, restarts, gate."""

from __future__ import annotations

import msgspec
import pytest

from baton.proto.actions import ActionResult, EvictGang, RecreatePod
from baton.proto.k8s import MAX_GANG_MEMBERS, Node, Toleration
from baton.proto.placement import GangRestarted
from baton.services.gang import core
from tests.support.builders import RACK, NodeBuilder, gang, node, pod, racks
from tests.unit.gang_helpers import apply, binds, feed, finish, gangs_bound, make, tick, verdicts

pytestmark = pytest.mark.unit


def flat(count: int, gpus: int = 8) -> list[Node]:
    return [node(f"n{i:03}", gpus=gpus).build() for i in range(count)]


ORDER_CASES = [
    # (case, (priority, created) of gang a, of gang b, which one runs)
    ("higher priority first, even if younger", (10, 5.0), (0, 1.0), "default/a"),
    ("same priority: older first", (0, 5.0), (0, 1.0), "default/b"),
    ("same priority and age: by name", (0, 1.0), (0, 1.0), "default/a"),
]


@pytest.mark.parametrize(("case", "a", "b", "winner"), ORDER_CASES, ids=[c[0] for c in ORDER_CASES])
def test_order(case: str, a: tuple[int, float], b: tuple[int, float], winner: str) -> None:
    ga, ma = gang("a", 4, priority=a[0], created_at=a[1])
    gb, mb = gang("b", 4, priority=b[0], created_at=b[1])
    state = make(flat(4), ga, ma, gb, mb)
    assert gangs_bound(tick(state)) == [winner]


def test_two_gangs_that_fit_only_one_at_a_time_never_deadlock() -> None:
    """150 nodes, two 100-node gangs: one gets all 100, the other none until it finishes."""
    ga, ma = gang("a", 100, created_at=1)
    gb, mb = gang("b", 100, created_at=2)
    state = make(flat(150), ga, ma, gb, mb)
    out = tick(state, 1.0)
    (bind,) = binds(out)
    assert bind.gang == "default/a" and len(bind.bindings) == 100
    (waiting,) = verdicts(out)
    assert waiting.gang == "default/b" and waiting.fits_when_free
    apply(state, bind, at=2.0)
    assert binds(tick(state, 3.0)) == []
    finish(state, "default/a", at=4.0)
    (second,) = binds(tick(state, 5.0))
    assert second.gang == "default/b" and len(second.bindings) == 100


def test_the_head_gang_holds_a_reservation_that_small_gangs_cannot_backfill_into() -> None:
    running_group, running = gang("running", 4, created_at=0)
    head_group, head = gang("head", 8, priority=5, created_at=1)
    small_group, small = gang("small", 1, created_at=2)
    state = make(flat(8), running_group, running)
    apply(state, binds(tick(state, 1.0))[0])
    feed(state, [head_group, *head, small_group, *small])
    out = tick(state, 3.0)
    assert binds(out) == []  # the 4 free nodes are the head's: small would delay it
    by_gang = {v.gang: v for v in verdicts(out)}
    assert by_gang["default/small"].blocked_by == "default/head"
    assert by_gang["default/head"].fits_when_free


def test_small_gangs_backfill_outside_the_reservation() -> None:
    # rack r0: 8 nodes, 4 busy; rack r1: 4 free nodes. The head needs 8 in one rack: only r0.
    nodes = racks(racks=2, nodes=8)[:12]
    busy = [pod(f"busy-{i}", gpus=8, node_name=nodes[i].name, scheduler="other") for i in range(4)]
    head_group, head = gang("head", 8, priority=5, required=RACK)
    small_group, small = gang("small", 2)
    state = make(nodes, busy, head_group, head, small_group, small)
    (bind,) = binds(tick(state))
    assert bind.gang == "default/small"
    assert {b.node.split("-")[3] for b in bind.bindings} == {"1"}  # rack index 1


def test_unschedulable_verdicts_are_published_only_when_they_change() -> None:
    group, members = gang("big", 16)
    state = make(flat(4), group, members)
    (first,) = verdicts(tick(state, 1.0))
    assert (first.need.nodes, first.need.shape, first.fits_when_free) == (
        12,
        {"nvidia.com/gpu": 8},
        False,
    )
    assert verdicts(tick(state, 2.0)) == []
    feed(state, [node("extra", gpus=8).build()])
    (second,) = verdicts(tick(state, 30.0))
    assert second.need.nodes == 11


def test_a_verdict_changing_only_in_numbers_is_said_again_at_most_every_refresh_doubling() -> None:
    """Each node that joins changes the numbers (nodes short); a waiting gang says so
    again only ``verdict_refresh_s`` (10 s) after the last time, then 20 s, then 40 s:
    at 8,000 waiting gangs every bind moved every gang's numbers."""
    group, members = gang("big", 16)
    state = make(flat(4), group, members)
    (first,) = verdicts(tick(state, 1.0))
    said = {1.0: first.need.nodes}
    for i, at in enumerate([5.0, 12.0, 25.0, 33.0, 60.0, 74.0]):
        feed(state, [node(f"extra-{i}", gpus=8).build()], at=at)
        for v in verdicts(tick(state, at)):
            said[at] = v.need.nodes
    # computed again every 10 s at most (at 12, 25, 60, 74): said at 12 (10 s after 1);
    # at 25 held (not before 32); at 60 said; at 74 held (not before 100)
    assert said == {1.0: 12, 12.0: 10, 60.0: 7}


@pytest.mark.parametrize("outcome", ["rolled-back", "failed", "stale"])
def test_a_failed_bind_is_forgotten_and_retried_after_a_backoff_with_a_new_id(outcome: str) -> None:
    """``stale``: the actuator refused it unapplied (expired while queued): nothing was
    bound, so the gang need not wait out ``assume_timeout_s``."""
    group, members = gang("job", 4)
    state = make(flat(4), group, members, policy=core.Policy(backoff_s=5.0))
    (bind,) = binds(tick(state, 1.0))
    assert len(state.cluster.accounted) == 4  # assumed
    result = ActionResult(
        action_id=bind.id,
        action_type="action.bind-gang.v1",
        by="actuator",
        at=2.0,
        outcome=outcome,  # type: ignore[arg-type]
    )
    core.step(state, result, 2.0)
    assert state.cluster.accounted == {}
    assert binds(tick(state, 3.0)) == []  # backing off
    (retry,) = binds(tick(state, 7.5))
    assert retry.id != bind.id
    assert {b.node for b in retry.bindings} == {b.node for b in bind.bindings}


def test_a_fenced_copy_of_its_bind_leaves_the_placement_in_flight() -> None:
    """A deposed leader's copy of the same bind (same id) answered ``stale`` because its
    epoch was old says nothing about this leader's copy, which the actuator applies:
    forgetting here would place the gang again beside its own bind."""
    group, members = gang("job", 4)
    state = make(flat(4), group, members, policy=core.Policy(backoff_s=5.0))
    (bind,) = binds(tick(state, 1.0))
    fenced = ActionResult(action_id=bind.id, action_type="action.bind-gang.v1", by="actuator",
                          at=2.0, outcome="stale", error="stale: epoch", fenced=True)  # fmt: skip
    core.step(state, fenced, 2.0)
    assert len(state.cluster.accounted) == 4  # still assumed
    assert binds(tick(state, 7.5)) == []  # not placed again


def test_an_assumed_placement_holds_its_nodes_for_the_next_cycle() -> None:
    ga, ma = gang("a", 4, created_at=1)
    gb, mb = gang("b", 4, created_at=2)
    state = make(flat(6), ga, ma)
    assert gangs_bound(tick(state, 1.0)) == ["default/a"]
    feed(state, [gb, *mb])
    assert binds(tick(state, 2.0)) == []  # a's binds are in flight, not yet reported bound


def test_an_assumption_with_no_outcome_expires() -> None:
    group, members = gang("job", 2)
    state = make(flat(2), group, members, policy=core.Policy(assume_timeout_s=10.0, backoff_s=1.0))
    first = binds(tick(state, 1.0))
    assert binds(tick(state, 5.0)) == []
    assert binds(tick(state, 11.0)) == []  # expired now, backing off
    assert len(binds(tick(state, 13.0))) == len(first) == 1


def draining(n: NodeBuilder) -> NodeBuilder:
    """What the health service does to a node it judged failed, after the checkpoint grace."""
    return n.tainted("baton.io/unhealthy").tainted("baton.io/draining", "true", effect="NoExecute")


NODE_FAILURES = [
    ("health drains it", draining),
    ("health drains a NotReady node", lambda n: draining(n.not_ready())),
    ("NoExecute taint", lambda n: n.tainted("node.kubernetes.io/unreachable", effect="NoExecute")),
]


@pytest.mark.parametrize(("case", "fail"), NODE_FAILURES, ids=[c[0] for c in NODE_FAILURES])
def test_a_failed_node_restarts_the_whole_gang(case: str, fail: object) -> None:
    group, members = gang("job", 4)
    state = make(flat(6), group, members)
    bind = binds(tick(state, 1.0))[0]
    apply(state, bind)
    victim = bind.bindings[0].node
    out = feed(state, [fail(node(victim, gpus=8)).build()], at=5.0)  # type: ignore[operator]
    assert not [o for o in out if isinstance(o, EvictGang)]  # every member is bare
    (restarted,) = [o for o in out if isinstance(o, GangRestarted)]
    assert (restarted.node, restarted.evicted, restarted.recreated) == (victim, 4, 4)
    recreates = [o for o in out if isinstance(o, RecreatePod)]
    assert sorted((r.pod, r.uid) for r in recreates) == sorted((m.name, m.uid) for m in members)
    assert {r.gang for r in recreates} == {"default/job"}
    # No kubelet stops a pod on a NotReady node: that member's copy replaces it at once.
    forced = {r.pod for r in recreates if r.grace_seconds == 0}
    on_victim = {b.pod for b in bind.bindings if b.node == victim}
    assert forced == (on_victim if "NotReady" in case else set())
    assert all(r.grace_seconds is None for r in recreates if r.pod not in forced)
    # The same node event again does not restart twice.
    assert feed(state, [fail(node(victim, gpus=8)).build()], at=6.0) == []  # type: ignore[operator]
    # Old members go, their copies appear under the same names: placed again, off the node.
    feed(state, [state.cluster.pods[f"default/{m.name}"] for m in members], at=7.0, op="delete")
    copies = [msgspec.structs.replace(m, uid=f"copy-{m.uid}") for m in members]
    feed(state, copies, at=8.0)
    (again,) = binds(tick(state, 9.0))
    assert victim not in {b.node for b in again.bindings}
    assert sorted(b.uid for b in again.bindings) == sorted(c.uid for c in copies)


HEALTHS_TO_JUDGE = [
    ("NotReady", lambda n: n.not_ready()),
    ("quarantined: the job may checkpoint", lambda n: n.tainted("baton.io/unhealthy")),
    ("a NoExecute taint the pods tolerate", lambda n: n.tainted("x", effect="NoExecute")),
]


@pytest.mark.parametrize(("case", "change"), HEALTHS_TO_JUDGE, ids=[c[0] for c in HEALTHS_TO_JUDGE])
def test_a_node_health_has_not_drained_restarts_nothing(case: str, change: object) -> None:
    group, members = gang("job", 2, tolerations=(Toleration(key="x", operator="Exists"),))
    state = make(flat(3), group, members)
    bind = binds(tick(state, 1.0))[0]
    apply(state, bind)
    victim = bind.bindings[0].node
    assert feed(state, [change(node(victim, gpus=8)).build()], at=5.0) == []  # type: ignore[operator]


def test_the_gang_waits_for_every_old_member_to_go_before_placing_the_copies() -> None:
    group, members = gang("job", 2)
    state = make(flat(4), group, members)
    bind = binds(tick(state, 1.0))[0]
    apply(state, bind)
    feed(state, [draining(node(bind.bindings[0].node)).build()], at=5.0)
    first, second = (state.cluster.pods[f"default/{m.name}"] for m in members)
    feed(state, [first], at=6.0, op="delete")
    feed(state, [msgspec.structs.replace(members[0], uid="copy-0")], at=6.5)
    assert binds(tick(state, 7.0)) == []  # the other old member still holds its node
    feed(state, [second], at=8.0, op="delete")
    feed(state, [msgspec.structs.replace(members[1], uid="copy-1")], at=8.5)
    assert len(binds(tick(state, 9.0))) == 1


def test_controller_owned_pods_are_evicted_but_not_recreated() -> None:
    group, members = gang("job", 2, labels={"batch.kubernetes.io/job-name": "job"})
    state = make(flat(2), group, members)
    bind = binds(tick(state, 1.0))[0]
    apply(state, bind)
    out = feed(state, [draining(node(bind.bindings[0].node)).build()], at=5.0)
    assert [type(o).__name__ for o in out] == ["EvictGang", "GangRestarted"]


def test_a_mixed_gang_evicts_owned_and_opted_out_pods_and_recreates_bare_ones() -> None:
    group, members = gang("job", 3)
    owned = msgspec.structs.replace(members[0], labels={**members[0].labels, "job-name": "j"})
    kept = msgspec.structs.replace(members[1], annotations={"baton.io/recreate": "false"})
    state = make(flat(3), group, [owned, kept, members[2]])
    apply(state, binds(tick(state, 1.0))[0])
    out = feed(state, [draining(node("n000")).build()], at=5.0)
    (evict,) = [o for o in out if isinstance(o, EvictGang)]
    assert sorted(p.pod for p in evict.pods) == ["job-0", "job-1"]
    assert [r.pod for r in out if isinstance(r, RecreatePod)] == ["job-2"]
    (restarted,) = [o for o in out if isinstance(o, GangRestarted)]
    assert (restarted.evicted, restarted.recreated) == (3, 1)


def test_with_recreate_bare_pods_off_every_member_is_evicted() -> None:
    group, members = gang("job", 2)
    state = make(flat(2), group, members, policy=core.Policy(recreate_bare_pods=False))
    apply(state, binds(tick(state, 1.0))[0])
    out = feed(state, [draining(node("n000")).build()], at=5.0)
    assert [type(o).__name__ for o in out] == ["EvictGang", "GangRestarted"]


def test_a_deleted_node_restarts_its_gang() -> None:
    group, members = gang("job", 2)
    state = make(flat(3), group, members)
    bind = binds(tick(state, 1.0))[0]
    apply(state, bind)
    gone = state.cluster.nodes[bind.bindings[1].node].node
    out = feed(state, [gone], at=5.0, op="delete")
    grace = {r.pod: r.grace_seconds for r in out if isinstance(r, RecreatePod)}
    assert grace == {bind.bindings[1].pod: 0, bind.bindings[0].pod: None}


def test_with_admission_required_only_admitted_gangs_are_placed() -> None:
    policy = core.Policy(require_admission=True)
    waiting_group, waiting = gang("waiting", 2, created_at=1)
    admitted_group, admitted = gang("admitted", 2, created_at=2, admitted=True)
    state = make(flat(4), waiting_group, waiting, admitted_group, admitted, policy=policy)
    assert gangs_bound(tick(state)) == ["default/admitted"]


def test_pods_seen_before_their_node_still_count_against_it() -> None:
    """Bootstrap order is by stream sequence: a bound pod may arrive before its node."""
    group, members = gang("job", 2)
    state = core.initial()
    feed(state, [pod("old", gpus=8, node_name="n000", scheduler="other")])
    feed(state, flat(2))
    feed(state, [group, *members])
    assert binds(tick(state)) == []


def test_replay_gives_the_same_decisions() -> None:
    def run() -> list[bytes]:
        ga, ma = gang("a", 3, created_at=1)
        gb, mb = gang("b", 9, created_at=2)
        state = make(racks(racks=3, nodes=4), ga, ma, gb, mb)
        return [msgspec.json.encode(o) for o in tick(state, 1.0)]

    assert run() == run()


# The queue keeps each gang's quorum, admission and order between cycles (they are read
# for every waiting gang every cycle): a change to its PodGroup must be seen at once.


def test_a_pod_group_lowering_its_min_member_is_placed_at_the_next_cycle() -> None:
    group, members = gang("job", 2)
    state = make(flat(2), group, members[:1])
    assert binds(tick(state, 1.0)) == []  # 1 of 2 members
    feed(state, [msgspec.structs.replace(group, min_member=1)], at=2.0)
    assert gangs_bound(tick(state, 2.0)) == ["default/job"]


def test_a_pod_group_admitted_after_it_waited_is_placed_at_the_next_cycle() -> None:
    group, members = gang("job", 2)
    state = make(flat(2), group, members, policy=core.Policy(require_admission=True))
    assert binds(tick(state, 1.0)) == []
    notes = {**group.annotations, "baton.io/admitted": "true"}
    feed(state, [msgspec.structs.replace(group, annotations=notes)], at=2.0)
    assert gangs_bound(tick(state, 2.0)) == ["default/job"]


def test_new_work_asks_for_a_cycle_now_and_a_gang_already_judged_does_not() -> None:
    """``fresh_work`` (the runner's ``Timer.soon``): a gang that becomes ready, here by its
    admission, asks for a cycle before the interval; members of it, a gang still gated and
    a gang already judged unschedulable do not, and a cycle answers the request."""
    group, members = gang("job", 2)
    state = make(flat(1, gpus=4), group, members, policy=core.Policy(require_admission=True))
    assert not core.fresh_work(state)  # not admitted: no cycle would place it
    notes = {**group.annotations, "baton.io/admitted": "true"}
    feed(state, [msgspec.structs.replace(group, annotations=notes)], at=2.0)
    assert core.fresh_work(state)
    assert verdicts(tick(state, 2.0)) and not core.fresh_work(state)  # judged: 4 GPUs only
    feed(state, members, at=3.0)  # a change to a judged gang: the interval's next cycle
    assert not core.fresh_work(state)


def test_a_pod_group_whose_creation_time_changes_takes_its_new_place_in_the_queue() -> None:
    blocker = pod("blocker", gpus=8, node_name="n000", scheduler="other")
    ga, ma = gang("a", 1, created_at=5)
    gb, mb = gang("b", 1, created_at=9)
    state = make(flat(1), blocker, ga, ma, gb, mb)
    assert binds(tick(state, 1.0)) == []  # both wait, "a" first
    feed(state, [msgspec.structs.replace(gb, created_at=1.0)], at=2.0)
    feed(state, [blocker], at=2.0, op="delete")
    assert gangs_bound(tick(state, 3.0)) == ["default/b"]


def test_gangs_refused_alike_in_one_cycle_each_get_the_verdict_under_their_own_name() -> None:
    """One search for the kind, one verdict per gang: the shared verdict names each."""
    groups = [gang(name, 4, created_at=i) for i, name in enumerate(("a", "b", "c"))]
    state = make(flat(3), *(obj for g, m in groups for obj in (g, *m)))
    out = verdicts(tick(state, 1.0))
    assert [v.gang for v in out] == ["default/a", "default/b", "default/c"]
    assert {v.reason for v in out} == {"3 of 4 members fit"}


def test_a_verdict_after_a_placement_in_the_same_cycle_counts_what_it_took() -> None:
    """A refused search is not reused once a placement has taken capacity: the gang of
    the same kind behind the one placed is told what is left, not what was."""
    first, first_members = gang("first", 4, created_at=1)
    small, small_members = gang("small", 1, created_at=2)
    last, last_members = gang("last", 4, created_at=3)
    state = make(flat(3), first, first_members, small, small_members, last, last_members)
    out = tick(state, 1.0)
    assert gangs_bound(out) == ["default/small"]
    told = {v.gang: v.reason for v in verdicts(out)}
    assert told == {"default/first": "3 of 4 members fit", "default/last": "2 of 4 members fit"}


def test_a_pod_group_given_a_topology_constraint_is_searched_under_it_at_the_next_cycle() -> None:
    """What a gang asks is kept between cycles until its PodGroup changes."""
    group, members = gang("job", 2)
    state = make(flat(1), group, members)
    (before,) = verdicts(tick(state, 1.0))
    assert before.reason == "1 of 2 members fit"
    notes = {**group.annotations, "baton.io/topology-required": "example.com/pod"}
    feed(state, [msgspec.structs.replace(group, annotations=notes)], at=2.0)
    (after,) = verdicts(tick(state, 2.0))
    assert "'example.com/pod' is not one of the gang service's topology levels" in after.reason


def test_a_bound_placement_is_no_longer_in_flight_and_an_idle_cluster_gets_no_ticks() -> None:
    """Once every member shows up bound, the gang core forgets the action (it kept
    every placed gang's action id for good, and asked for a tick forever)."""
    group, members = gang("job", 2)
    state = make(flat(2), group, members)
    (bind,) = binds(tick(state, 1.0))
    assert state.inflight and core.wants_tick(state, 1.5)  # in flight until bound
    apply(state, bind, at=2.0)
    tick(state, 3.0)
    assert state.inflight == {}
    assert not core.wants_tick(state, 3.5)


def test_a_gang_larger_than_one_bind_may_name_is_never_placed_and_says_why() -> None:
    """4,097 one-GPU pods on 520 8-GPU nodes fit, but the actuator refuses a bind of more
    than MAX_GANG_MEMBERS: gang places none and says so (``baton why``), not "placed"."""
    big_group, big = gang("big", MAX_GANG_MEMBERS + 1, gpus=1)
    small_group, small = gang("small", 4, gpus=1, created_at=2)
    state = make(flat(520), big_group, big, small_group, small)
    out = tick(state, 1.0)
    assert [b.gang for b in binds(out)] == ["default/small"]
    (refused,) = verdicts(out)
    assert refused.gang == "default/big" and refused.need.nodes == 0
    assert f"more than the {MAX_GANG_MEMBERS} one bind may name" in refused.reason
    assert binds(tick(state, 30.0)) == [] and verdicts(tick(state, 31.0)) == []  # said once
