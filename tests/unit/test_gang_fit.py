"""All-or-nothing fit: resources, taints, selectors, affinity, node health."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from baton.proto.k8s import Node, NodeSelectorTerm, Requirement, Toleration
from tests.support.builders import GIB, NodeBuilder, gang, node, pod
from tests.unit.gang_helpers import binds, make, tick, verdicts

pytestmark = pytest.mark.unit


def nodes_from(make_one: Callable[[str], NodeBuilder]) -> list[Node]:
    return [make_one(f"n{i}").build() for i in range(4)]


TOLERATE_TEAM = (Toleration(key="team", operator="Equal", value="a"),)

CASES = [
    # (case, node factory, gang size, pod args, placed?)
    ("fits exactly", lambda n: node(n, gpus=8), 4, {"gpus": 8}, True),
    ("one member short: none bound", lambda n: node(n, gpus=8), 5, {"gpus": 8}, False),
    ("gpus too few per node", lambda n: node(n, gpus=4), 4, {"gpus": 8}, False),
    ("two members per node", lambda n: node(n, gpus=8), 8, {"gpus": 4}, True),
    ("cpu short", lambda n: node(n, gpus=8, cpu=500), 4, {"gpus": 8, "cpu": 1000}, False),
    (
        "memory short",
        lambda n: node(n, gpus=8, memory=GIB),
        4,
        {"gpus": 8, "memory": 2 * GIB},
        False,
    ),
    ("extended resource missing", lambda n: node(n), 4, {"requests": {"rdma/ib": 1}}, False),
    (
        "extended resource present",
        lambda n: node(n).with_resources({"rdma/ib": 1}),
        4,
        {"gpus": 0, "requests": {"rdma/ib": 1}},
        True,
    ),
    ("NoSchedule not tolerated", lambda n: node(n).tainted("team", "a"), 4, {}, False),
    (
        "NoSchedule tolerated",
        lambda n: node(n).tainted("team", "a"),
        4,
        {"tolerations": TOLERATE_TEAM},
        True,
    ),
    (
        "PreferNoSchedule ignored",
        lambda n: node(n).tainted("x", effect="PreferNoSchedule"),
        4,
        {},
        True,
    ),
    ("NoExecute not tolerated", lambda n: node(n).tainted("x", effect="NoExecute"), 4, {}, False),
    (
        "nodeSelector matches",
        lambda n: node(n).labelled(pool="a"),
        4,
        {"node_selector": {"pool": "a"}},
        True,
    ),
    (
        "nodeSelector misses",
        lambda n: node(n).labelled(pool="b"),
        4,
        {"node_selector": {"pool": "a"}},
        False,
    ),
    (
        "affinity In matches",
        lambda n: node(n).labelled(pool="a"),
        4,
        {
            "affinity": (
                NodeSelectorTerm(
                    match_expressions=(Requirement(key="pool", operator="In", values=("a",)),)
                ),
            )
        },
        True,
    ),
    (
        "affinity NotIn excludes",
        lambda n: node(n).labelled(pool="a"),
        4,
        {
            "affinity": (
                NodeSelectorTerm(
                    match_expressions=(Requirement(key="pool", operator="NotIn", values=("a",)),)
                ),
            )
        },
        False,
    ),
    ("node NotReady", lambda n: node(n).not_ready(), 4, {}, False),
    ("node cordoned", lambda n: node(n).cordoned(), 4, {}, False),
    (
        "node health-tainted",
        lambda n: node(n).tainted("baton.io/unhealthy", effect="NoSchedule"),
        4,
        {},
        False,
    ),
]


@pytest.mark.parametrize(
    ("case", "factory", "size", "args", "fits"), CASES, ids=[c[0] for c in CASES]
)
def test_fit(
    case: str, factory: Callable[[str], NodeBuilder], size: int, args: dict[str, Any], fits: bool
) -> None:
    args = {"gpus": 8, **args}
    group, members = gang("job", size, **args)
    state = make(nodes_from(factory), group, members)
    out = tick(state)
    if fits:
        assert len(binds(out)) == 1
        assert {b.pod for b in binds(out)[0].bindings} == {p.name for p in members}
    else:
        assert binds(out) == []
        assert len(verdicts(out)) == 1
        assert not state.cluster.accounted  # nothing held for a gang that cannot start


def test_one_node_short_of_a_gang_binds_nothing_and_says_what_is_missing() -> None:
    group, members = gang("job", 5, gpus=8)
    state = make(nodes_from(lambda n: node(n, gpus=8)), group, members)
    (v,) = verdicts(tick(state))
    assert v.need.nodes == 1
    assert v.need.shape == {"nvidia.com/gpu": 8}
    assert v.members == 5
    assert "4 of 5" in v.reason


def test_a_gang_waits_for_min_member_pods() -> None:
    group, members = gang("job", 4, gpus=8)
    state = make(nodes_from(lambda n: node(n)), group, members[:3])
    assert tick(state) == []


def test_a_lone_baton_pod_is_a_gang_of_one_and_other_schedulers_are_ignored() -> None:
    lone = pod("solo", gpus=8)
    other = pod("theirs", gpus=8, scheduler="default-scheduler")
    state = make(nodes_from(lambda n: node(n)), [lone, other])
    (bind,) = binds(tick(state))
    assert bind.gang == "default/solo"
    assert [b.pod for b in bind.bindings] == ["solo"]


NOT_POOL_A = (
    NodeSelectorTerm(match_expressions=(Requirement(key="pool", operator="NotIn", values=("a",)),)),
)
SAYS = [
    # (case, nodes, gang size, pod args, what the verdict says): kube-scheduler's
    # FailedScheduling counts, one reason per node, sorted as it sorts them
    ("a selector that 12 free nodes miss",
     [node(f"a{i}").labelled(pool="a") for i in range(4)]
     + [node(f"b{i:02}").labelled(pool="b") for i in range(12)],
     6, {"node_selector": {"pool": "a"}},
     "4 of 6 members fit; 4/16 nodes are available: 12 node(s) didn't match Pod's node "
     "affinity/selector (nodeSelector pool=a)"),
    ("a selector no node matches", [node(f"n{i}").labelled(pool="b") for i in range(4)],
     4, {"node_selector": {"pool": "a"}},
     "no node takes a member: 0/4 nodes are available: 4 node(s) didn't match Pod's node "
     "affinity/selector (nodeSelector pool=a)"),
    ("an affinity that excludes every node", [node(f"n{i}").labelled(pool="a") for i in range(4)],
     4, {"affinity": NOT_POOL_A},
     "4 node(s) didn't match Pod's node affinity/selector (node affinity pool NotIn (a))"),
    ("9 GPUs a pod on 8-GPU nodes", [node(f"n{i}") for i in range(4)], 2, {"gpus": 9},
     "no node takes a member: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu"),
    ("a team taint not tolerated", [node(f"n{i}").tainted("team", "b") for i in range(4)], 4, {},
     "0/4 nodes are available: 4 node(s) had untolerated taint {team: b}"),
    ("nodes down, cordoned, quarantined, and one too small",
     [node("n0").not_ready(), node("n1").not_ready(), node("n2").cordoned(),
      node("n3").tainted("baton.io/unhealthy"), node("n4", gpus=4)], 1, {},
     "0/5 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated "
     "taint {baton.io/unhealthy: }, 1 node(s) were unschedulable, 2 node(s) were not ready"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "nodes", "size", "args", "says"), SAYS, ids=[c[0] for c in SAYS])
def test_the_verdict_counts_the_nodes_refused_by_each_reason(
    case: str, nodes: list[NodeBuilder], size: int, args: dict[str, Any], says: str
) -> None:
    group, members = gang("job", size, **{"gpus": 8, **args})
    (v,) = verdicts(tick(make([n.build() for n in nodes], group, members)))
    assert says in v.reason, v.reason


def test_room_alone_short_gives_no_counts_but_the_nodes_it_needs() -> None:
    group, members = gang("job", 5, gpus=8)
    (v,) = verdicts(tick(make(nodes_from(lambda n: node(n, gpus=8)), group, members)))
    assert v.reason == "4 of 5 members fit" and v.need.nodes == 1


def test_a_requirement_written_twice_is_named_once() -> None:
    twice = (NodeSelectorTerm(match_expressions=(
        Requirement(key="team", operator="In", values=("c",)),
        Requirement(key="team", operator="In", values=("c",)),
    )),)  # fmt: skip
    group, members = gang("job", 1, gpus=8, affinity=twice)
    (v,) = verdicts(tick(make([node("n0").labelled(team="a").build()], group, members)))
    assert v.reason.endswith("(node affinity team In (c))"), v.reason
