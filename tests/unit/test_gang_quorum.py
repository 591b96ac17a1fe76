"""minMember is a quorum, in every gang format Baton reads: a gang starts once minMember
of its members fit together (never fewer bound); the others are placed in the same bind
when room is left after every waiting gang's quorum, later as room appears, and told
why while they wait (scheduler-plugins coscheduling: Permit allows a group once
minMember pods are assigned; Volcano: a job is ready at minAvailable)."""

from __future__ import annotations

from typing import Any

import pytest

from baton.proto import keys
from baton.proto.k8s import UPSTREAM_API, GangRef, Node, Pod, PodGroup
from baton.services.gang import core
from baton.services.gang.core import asks, topology
from baton.services.reporter.core import telling
from tests.support.builders import RACK, node, pod, pod_group
from tests.unit.gang_helpers import apply, binds, feed, make, tick, verdicts

pytestmark = pytest.mark.unit


def flat(count: int, *, gpus: int = 8) -> list[Node]:
    return [node(f"n{i}", gpus=gpus).build() for i in range(count)]


# format -> (its group object for ``name`` with ``need`` members or None, a member's GangRef)
def plugins(name: str, need: int, **extra: Any) -> tuple[PodGroup | None, GangRef]:
    return pod_group(name, namespace="ml", min_member=need, **extra), GangRef(name=name)


def upstream(name: str, need: int, **extra: Any) -> tuple[PodGroup | None, GangRef]:
    group = pod_group(name, namespace="ml", min_member=need, api=UPSTREAM_API, **extra)
    return group, GangRef(name=name, source="kubernetes")


def volcano(name: str, need: int, **extra: Any) -> tuple[PodGroup | None, GangRef]:
    return None, GangRef(name=name, source="volcano", min_member=need)


def kueue(name: str, need: int, **extra: Any) -> tuple[PodGroup | None, GangRef]:
    return None, GangRef(name=name, source="kueue", min_member=need)


FORMATS = {"scheduler-plugins": plugins, "upstream": upstream, "volcano": volcano,
           "kueue": kueue}  # fmt: skip


def gang(fmt: str, name: str, *, need: int, size: int, gpus: int = 8) -> list[Pod | PodGroup]:
    group, ref = FORMATS[fmt](name, need)
    pods: list[Pod | PodGroup] = [
        pod(f"{name}-{i}", namespace="ml", gpus=gpus, ref=ref) for i in range(size)
    ]
    return [group, *pods] if group is not None else pods


def bound(state: core.State, name: str) -> int:
    return len(state.cluster.gangs[f"ml/{name}"].bound)


# (case, nodes of 8 GPUs, gangs: (name, minMember, pods, GPUs each), bound after a cycle)
QUORUM = [
    ("minMember 2, six 8-GPU pods, room for four: four bound", 4, [("job", 2, 6, 8)],
     {"job": 4}),
    ("room for fewer than minMember: none bound", 1, [("job", 2, 6, 8)], {"job": 0}),
    ("minMember equal to the pods: all or none, as before", 3, [("job", 4, 4, 8)], {"job": 0}),
    ("three groups of minMember 2 x eight 4-GPU pods on 32 GPUs: every one starts", 4,
     [("a", 2, 8, 4), ("b", 2, 8, 4), ("c", 2, 8, 4)], {"a": 4, "b": 2, "c": 2}),
]  # fmt: skip


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize(("case", "nodes", "gangs", "want"), QUORUM, ids=[c[0] for c in QUORUM])
def test_a_gang_starts_once_its_quorum_fits_in_every_format(
    fmt: str, case: str, nodes: int, gangs: list[tuple[str, int, int, int]],
    want: dict[str, int],
) -> None:  # fmt: skip
    objs = [o for name, need, size, gpus in gangs for o in gang(fmt, name, need=need,
                                                                 size=size, gpus=gpus)]  # fmt: skip
    state = make(flat(nodes), objs)
    out = tick(state, 1.0)
    got = {name: 0 for name in want}
    for bind in binds(out):
        got[bind.gang.partition("/")[2]] += len(bind.bindings)
    assert got == want
    assert len(binds(out)) == sum(1 for n in want.values() if n)  # one bind per gang
    for bind in binds(out):
        apply(state, bind)
    assert {name: bound(state, name) for name in want} == want


def test_members_beyond_the_quorum_wait_told_why_and_are_placed_as_room_appears() -> None:
    state = make(flat(4), gang("scheduler-plugins", "job", need=2, size=6))
    (bind,) = binds(tick(state, 1.0))
    apply(state, bind)
    out = tick(state, 3.0)
    assert binds(out) == []
    (told,) = verdicts(out)
    assert told.gang == "ml/job"
    assert told.reason == "4 members run (minMember 2); 2 more wait for room"
    assert (told.need.nodes, told.need.shape, told.fits_when_free) == (2, {keys.GPU: 8}, False)
    assert verdicts(tick(state, 4.0)) == []  # told once, not every cycle
    feed(state, [node("n4").build()], at=5.0)  # room for one more
    (more,) = binds(tick(state, 6.0))
    assert [b.pod for b in more.bindings] == ["job-4"] and more.bindings[0].node == "n4"


def test_members_that_join_a_running_gang_are_placed_in_its_required_rack() -> None:
    nodes = [node(f"a{i}").in_rack("ra").build() for i in range(3)]
    nodes += [node(f"b{i}").in_rack("rb").build() for i in range(3)]
    group = pod_group("job", namespace="ml", min_member=2,
                      annotations={keys.TOPOLOGY_REQUIRED: RACK})  # fmt: skip
    pods = [pod(f"job-{i}", namespace="ml", gpus=8, group="job") for i in range(2)]
    state = make(nodes, group, pods)
    (bind,) = binds(tick(state, 1.0))
    apply(state, bind)
    rack = {b.node[0] for b in bind.bindings}
    assert len(rack) == 1
    late = [pod(f"job-{i}", namespace="ml", gpus=8, group="job") for i in (2, 3)]
    out = feed(state, late, at=3.0) + tick(state, 4.0)
    (joined,) = binds(out)
    assert [b.pod for b in joined.bindings] == ["job-2"]  # one node left in its rack
    assert {b.node[0] for b in joined.bindings} == rack
    (told,) = verdicts(out)
    assert told.reason == "2 members run (minMember 2); 1 more wait for room in its rack"
    assert told.need.within == RACK


def test_fewer_members_than_min_member_wait_and_none_is_bound() -> None:
    state = make(flat(4), gang("scheduler-plugins", "job", need=3, size=2))
    assert binds(tick(state, 1.0)) == []
    view = state.cluster
    pods = [view.pods[k] for k in sorted(view.gangs["ml/job"].pending)]
    said = telling.waiting(key="ml/job", group=view.gangs["ml/job"].group, pods=pods, need=3)
    assert said == "waiting for all 3 members of gang job to be created (minMember 3)"


def test_a_running_gang_s_waiting_members_are_told_its_verdict() -> None:
    running = [pod(f"job-{i}", namespace="ml", gpus=8, group="job", node_name=f"n{i}")
               for i in range(2)]  # fmt: skip
    late = pod("job-2", namespace="ml", gpus=8, group="job")
    state = make(flat(2), pod_group("job", namespace="ml", min_member=2), running, late)
    (told,) = verdicts(tick(state, 1.0))
    said = telling.waiting(key="ml/job", group=None, pods=[*running, late], need=2,
                           verdict=told)  # fmt: skip
    assert said == (
        "2 members run (minMember 2); 1 more wait for room; need 1 more node with 8 nvidia.com/gpu"
    )


def mpi(*, need: int, workers: int = 3) -> list[Pod | PodGroup]:
    """An MPI-style group: a launcher and a parameter server without GPUs, 8-GPU workers."""
    pods = [pod("job-launcher", namespace="ml", group="job", cpu=2000),
            pod("job-ps", namespace="ml", group="job", cpu=4000)]  # fmt: skip
    pods += [pod(f"job-worker-{i}", namespace="ml", group="job", gpus=8) for i in range(workers)]
    return [pod_group("job", namespace="ml", min_member=need), *pods]


# (case, minMember, 8-GPU nodes, members bound, the verdict's reason, nodes it needs)
MIXED = [
    ("five of five on two nodes: the workers are short, by one node", 5, 2, 0,
     "4 of 5 members fit: 2 of the 3 asking 8 nvidia.com/gpu", 1),
    ("five of five on three nodes: all", 5, 3, 5, "", 0),
    ("quorum of three: the smallest members, then the workers that fit", 3, 2, 4, "", 0),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "need", "nodes", "want", "reason", "more"), MIXED, ids=[c[0] for c in MIXED]
)
def test_mixed_shapes_are_counted_shape_by_shape(
    case: str, need: int, nodes: int, want: int, reason: str, more: int
) -> None:
    state = make(flat(nodes), mpi(need=need))
    out = tick(state, 1.0)
    assert sum(len(b.bindings) for b in binds(out)) == want
    if reason:
        (told,) = verdicts(out)
        assert told.reason == reason
        assert (told.need.nodes, told.need.shape) == (more, {keys.GPU: 8})


def test_the_verdict_counts_the_quorum_not_every_member() -> None:
    state = make(flat(1), gang("scheduler-plugins", "job", need=2, size=6))
    (told,) = verdicts(tick(state, 1.0))
    assert told.reason == "1 of 2 members fit (its quorum: minMember 2 of its 6 members)"
    assert told.need.nodes == 1 and told.members == 2


# (case, the gang, nodes the head reserves)
RESERVES = [
    ("minMember 2 of six 8-GPU pods: two nodes", gang("scheduler-plugins", "job", need=2, size=6),
     2),
    ("a launcher, a parameter server and three workers: three nodes", mpi(need=5), 3),
    ("minMember 3 of those: the two smallest and one worker, one node", mpi(need=3), 1),
]  # fmt: skip


@pytest.mark.parametrize(("case", "objs", "want"), RESERVES, ids=[c[0] for c in RESERVES])
def test_the_head_reserves_for_its_quorum_counted_shape_by_shape(
    case: str, objs: list[Pod | PodGroup], want: int
) -> None:
    state = make(flat(8), objs)
    asked = asks.ask(state.cluster, state.cluster.gangs["ml/job"], {})
    assert len(topology.reserve(state.cluster, asked.members)) == want
