"""Making room for a waiting gang: priority preemption (whole gangs, lowest priority
and least work lost first, after a minimum run time, with a grace) and defragmentation
(preemptible gangs moved, bounded per hour, only when it lets the waiting gang start)."""

from __future__ import annotations

import msgspec
import pytest

from baton.proto import keys
from baton.proto.actions import EvictGang, RecreatePod
from baton.proto.k8s import GangRef, Node
from baton.proto.placement import GangRestarted
from baton.services.gang import core
from tests.support.builders import RACK, gang, node, pod
from tests.unit.gang_helpers import apply, binds, feed, make, tick

pytestmark = pytest.mark.unit


def flat(count: int) -> list[Node]:
    return [node(f"n{i}", gpus=8).build() for i in range(count)]


def run(state: core.State, name: str, size: int, *, at: float, gpus: int = 8, **kw: object) -> None:
    """Submit a gang and bind what the core decides at ``at``."""
    group, members = gang(name, size, gpus=gpus, created_at=at, **kw)  # type: ignore[arg-type]
    feed(state, [group, *members], at=at)
    (bind,) = [b for b in binds(tick(state, at)) if b.gang == f"default/{name}"]
    apply(state, bind, at=at)


def taken_off(out: list[object]) -> list[str]:
    return sorted(o.gang for o in out if isinstance(o, GangRestarted))


def leave(state: core.State, victim: str, at: float) -> None:
    """The evicted members are gone (the actuator deleted them)."""
    for key in sorted(state.cluster.gangs[f"default/{victim}"].bound):
        feed(state, [state.cluster.pods[key]], at=at, op="delete")


def test_a_higher_priority_gang_takes_a_lower_one_off_whole_after_its_minimum_run() -> None:
    state = make(flat(2))
    run(state, "low", 2, at=1.0)
    group, members = gang("high", 2, priority=10, created_at=100.0)
    feed(state, [group, *members], at=100.0)
    assert taken_off(tick(state, 100.0)) == []  # low has run 99 s < preempt_min_run_s
    out = tick(state, 400.0)
    assert taken_off(out) == ["default/low"] and binds(out) == []
    (restarted,) = [o for o in out if isinstance(o, GangRestarted)]
    assert restarted.reason == "preempted for default/high (priority 10)"
    assert restarted.evicted == 2 and restarted.node == ""
    # bare pods are recreated (to be placed again), with the grace to checkpoint
    assert [r.grace_seconds for r in out if isinstance(r, RecreatePod)] == [30, 30]
    assert state.nominated["default/high"][0] == frozenset({"n0", "n1"})
    leave(state, "low", 420.0)
    assert [b.gang for b in binds(tick(state, 421.0))] == ["default/high"]


def test_lowest_priority_then_least_work_lost_first_and_no_more_than_needed() -> None:
    state = make(flat(3))
    run(state, "keep", 1, at=1.0, priority=1)  # higher priority than the others
    run(state, "old", 1, at=1.0)  # has run longer: more work lost
    run(state, "new", 1, at=200.0)
    group, members = gang("high", 1, priority=5, created_at=600.0)
    feed(state, [group, *members], at=600.0)
    assert taken_off(tick(state, 600.0)) == ["default/new"]
    state = make(flat(3))
    run(state, "keep", 1, at=1.0, priority=1)
    run(state, "old", 1, at=1.0)
    run(state, "new", 1, at=200.0)
    group, members = gang("high", 2, priority=5, created_at=600.0)
    feed(state, [group, *members], at=600.0)
    assert taken_off(tick(state, 600.0)) == ["default/new", "default/old"]


def test_nothing_is_taken_off_when_it_would_not_let_the_gang_start() -> None:
    state = make(flat(2))
    run(state, "low", 1, at=1.0)
    group, members = gang("huge", 3, priority=5, created_at=600.0)  # 3 nodes of 2
    feed(state, [group, *members], at=600.0)
    assert taken_off(tick(state, 600.0)) == []


def test_preemption_off_and_equal_priority_take_nothing_off() -> None:
    for policy, priority in ((core.Policy(preemption=False), 5), (None, 0)):
        state = make(flat(1), policy=policy)
        run(state, "low", 1, at=1.0)
        group, members = gang("high", 1, priority=priority, created_at=600.0)
        feed(state, [group, *members], at=600.0)
        assert taken_off(tick(state, 600.0)) == []


def test_a_controlled_gang_is_evicted_with_the_grace() -> None:
    state = make(flat(1))
    run(state, "low", 1, at=1.0, labels={"batch.kubernetes.io/job-name": "low"})
    group, members = gang("high", 1, priority=5, created_at=600.0)
    feed(state, [group, *members], at=600.0)
    (evict,) = [o for o in tick(state, 600.0) if isinstance(o, EvictGang)]
    assert evict.gang == "default/low" and evict.grace_seconds == 30


# -- defragmentation: the seed case, scaled: free GPUs scattered over every node ---------


def scattered(policy: core.Policy | None = None, *, preemptible: bool = True) -> core.State:
    """4 nodes of 8 GPUs, a 4-GPU gang on each: 16 GPUs free, no node empty; then a
    2 x 8-GPU gang waits."""
    state = make(flat(4), policy=policy)
    notes = {keys.PREEMPTIBLE: "true"} if preemptible else {}
    for i in range(4):  # bound where another scheduler (or an older placement) put them
        group, members = gang(f"small{i}", 1, gpus=4, created_at=float(i + 1),
                              annotations=notes, node_name=f"n{i}")  # fmt: skip
        feed(state, [group, *members], at=float(i + 1))
    group, members = gang("big", 2, created_at=500.0)
    feed(state, [group, *members], at=500.0)
    return state


def test_defragmentation_moves_preemptible_gangs_so_a_waiting_gang_starts() -> None:
    state = scattered()
    out = tick(state, 600.0)
    moved = taken_off(out)
    assert moved == ["default/small2", "default/small3"]  # least work lost: the newest
    assert all(r.reason == "moved to defragment for default/big"
               for r in out if isinstance(r, GangRestarted))  # fmt: skip
    for name in moved:
        victim = name.partition("/")[2]
        pods = [state.cluster.pods[k] for k in sorted(state.cluster.gangs[name].bound)]
        leave(state, victim, 610.0)
        copies = [msgspec.structs.replace(p, node_name="", phase="Pending", uid=p.uid + "'")
                  for p in pods]  # fmt: skip
        feed(state, copies, at=611.0)  # what RecreatePod makes
    out = tick(state, 612.0)  # the moved gangs (older) go first, but not on big's nodes
    where = {b.gang: {x.node for x in b.bindings} for b in binds(out)}
    assert where["default/big"] == {"n2", "n3"}  # the whole nodes freed for it
    assert where["default/small2"] | where["default/small3"] <= {"n0", "n1"}


@pytest.mark.parametrize(
    ("case", "policy", "preemptible"),
    [
        ("gangs not marked preemptible stay", None, False),
        ("at most defrag_moves_per_hour", core.Policy(defrag_moves_per_hour=1), True),
    ],
)
def test_defragmentation_is_bounded(
    case: str, policy: core.Policy | None, preemptible: bool
) -> None:
    state = scattered(policy, preemptible=preemptible and policy is not None)
    assert taken_off(tick(state, 600.0)) == []


def test_the_hourly_budget_counts_moves_already_made() -> None:
    state = scattered(core.Policy(defrag_moves_per_hour=3))
    state.moved = (100.0, 590.0)  # two moves in the last hour: one left, two needed
    assert taken_off(tick(state, 600.0)) == []
    assert len(taken_off(tick(state, 3700.0))) == 2  # the first has aged out
    assert state.moved == (590.0, 3700.0, 3700.0)


def exclusive_jobset(name: str, jobs: int, pods: int, *, priority: int, at: float) -> list[object]:
    """A JobSet's pods with exclusive rack placement, as its controller labels them."""
    ref = GangRef(name=name, source="jobset", min_member=jobs * pods)
    return [
        pod(f"{name}-w-{j}-{i}", gpus=8, ref=ref, priority=priority, created_at=at,
            annotations={keys.JOBSET_EXCLUSIVE: RACK},
            labels={keys.JOBSET_NAME: name, keys.JOBSET_JOB_KEY: f"{name}{j}"})
        for j in range(jobs) for i in range(pods)
    ]  # fmt: skip


def rack_nodes(*sizes: int) -> list[Node]:
    return [node(f"r{r}n{i}", gpus=8).in_rack(f"r{r}").build()
            for r, size in enumerate(sizes) for i in range(size)]  # fmt: skip


def test_no_gang_is_taken_off_for_an_exclusive_jobset_that_still_would_not_fit() -> None:
    """Freeing GPUs is not freeing racks: two Jobs that each need two nodes of a rack of
    their own cannot start where one rack holds three nodes and the other one, so the
    low gang in the big rack is not preempted for them (it was, when the victims were
    tried against the members as one flat set)."""
    state = make(rack_nodes(3, 1))
    run(state, "low", 1, at=1.0)
    feed(state, exclusive_jobset("llm", 2, 2, priority=10, at=500.0), at=500.0)
    out = tick(state, 500.0)
    assert taken_off(out) == [] and binds(out) == []


def test_an_exclusive_jobset_takes_off_what_frees_a_rack_for_each_of_its_jobs() -> None:
    """Two racks of two: a low gang in each; both go, since each Job needs a whole rack
    and freeing one rack's node would give GPUs but no second rack."""
    state = make(rack_nodes(2, 2))
    run(state, "low-a", 1, at=1.0)
    run(state, "low-b", 1, at=1.0)
    feed(state, exclusive_jobset("llm", 2, 2, priority=10, at=500.0), at=500.0)
    assert taken_off(tick(state, 500.0)) == ["default/low-a", "default/low-b"]
