"""The admission core: team config, team taints, quotas, borrowing, reclaim, queue order."""

from __future__ import annotations

from typing import Any

import pytest

from baton.proto.actions import Annotate, EvictGang, RecreatePod, SetLabels, SetTaint
from baton.proto.admission import (
    GangAdmitted,
    GangPreempted,
    GangQueued,
    GangReleased,
    NodeTeamChanged,
    TeamsLoaded,
)
from baton.proto.k8s import GPU, Node, NodeEvent, Pod, PodEvent, PodGroup, PodGroupEvent, Taint
from baton.proto.runner import Tick
from baton.services.admission import core
from baton.services.admission.teams import TeamConfigError, parse

pytestmark = pytest.mark.unit

TWO_TEAMS: dict[str, Any] = {
    "teams": [
        {"name": "a", "namespaces": ["team-a"], "pools": ["pa"], "borrow": {"gpus": 16}},
        {"name": "b", "namespaces": ["team-b"], "pools": ["pb"], "priority": 10},
    ]
}


def node(name: str, pool: str = "", gpus: int = 8, **labels: str) -> NodeEvent:
    if pool:
        labels["baton.io/pool"] = pool
    n = Node(
        name=name, uid=f"uid-{name}", resource_version="1", labels=labels, allocatable={GPU: gpus}
    )
    return NodeEvent(op="upsert", at=0.0, node=n)


def group(ns: str, name: str, members: int, at: float, **annotations: str) -> PodGroupEvent:
    g = PodGroup(
        namespace=ns,
        name=name,
        uid=f"uid-{name}",
        min_member=members,
        created_at=at,
        annotations=annotations,
    )
    return PodGroupEvent(op="upsert", at=at, pod_group=g)


def pods(
    ns: str,
    gang: str,
    members: int,
    *,
    gpus: int = 8,
    phase: str = "Pending",
    priority: int = 0,
    node: str = "",
) -> list[PodEvent]:
    """``node``: bound there (the gang service placed it), else pending."""
    return [
        PodEvent(
            op="upsert",
            at=0.0,
            pod=Pod(
                namespace=ns,
                name=f"{gang}-{i}",
                uid=f"uid-{gang}-{i}",
                phase=phase,  # type: ignore[arg-type]
                labels={"scheduling.x-k8s.io/pod-group": gang},
                requests={GPU: gpus},
                priority=priority,
                scheduler_name="baton",
                node_name=node,
            ),
        )
        for i in range(members)
    ]


def submit(ns: str, gang: str, members: int, at: float, **kw: Any) -> list[Any]:
    return [group(ns, gang, members, at), *pods(ns, gang, members, **kw)]


class World:
    """The latest state a caller kept; reads pass through to it (``world.gangs``)."""

    def __init__(self, state: core.State) -> None:
        self.state = state

    def __getattr__(self, name: str) -> Any:
        return getattr(self.state, name)


def world(config: dict[str, Any] | None = None) -> World:
    return World(core.initial(parse(config)))


def feed(state: World | core.State, events: list[Any], now: float = 1.0) -> list[Any]:
    """Step through ``events``, keeping the state each step returns."""
    held = state if isinstance(state, World) else World(state)
    out: list[Any] = []
    for event in events:
        held.state, outputs = core.step(held.state, event, now)
        out.extend(outputs)
    return out


def of(outputs: list[Any], type_: type) -> list[Any]:
    return [o for o in outputs if isinstance(o, type_)]


def taken(outputs: list[Any]) -> list[str]:
    """Gangs taken off (their pods evicted or recreated), in order, each once."""
    gangs = [o.gang for o in outputs if isinstance(o, EvictGang | RecreatePod)]
    return list(dict.fromkeys(gangs))


def cluster(config: dict[str, Any] | None, nodes: list[NodeEvent]) -> World:
    state = world(config)
    feed(state, list(nodes))
    return state


# -- config ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"teams": [{"name": "a", "namespaces": ["x"], "quota": {"gpus": -1}}]},
            "teams[0].quota.gpus: expected int >= 0",
        ),
        (
            {
                "teams": [
                    {"name": "a", "namespaces": ["x"]},
                    {"name": "b", "namespaces": ["y"]},
                    {"name": "c", "namespaces": ["z"], "quota": {"gpus": "many"}},
                ]
            },
            "teams[2].quota.gpus: expected int, got str",
        ),
        (
            {"teams": [{"name": "a", "namespaces": ["x"], "qouta": {"gpus": 1}}]},
            "teams[0].qouta: unknown key",
        ),
        (
            {"teams": [{"name": "a", "namespaces": ["x"]}, {"name": "b", "namespaces": ["x"]}]},
            "teams[1].namespaces[0]: namespace 'x' is already owned by team 'a'",
        ),
        (
            {
                "teams": [
                    {"name": "a", "namespaces": ["x"], "pools": ["p"]},
                    {"name": "b", "namespaces": ["y"], "pools": ["p"]},
                ]
            },
            "teams[1].pools[0]: pool 'p' is already owned by team 'a'",
        ),
        ({"teams": [{"name": "A_", "namespaces": ["x"]}]}, "teams[0].name: expected str matching"),
        ({"teams": [{"namespaces": ["x"]}]}, "teams[0].name: required key missing"),
        (
            {"teams": [{"name": "a", "namespaces": ["x"], "devices": {"mig.nvidia.com": -1}}]},
            "teams[0].devices[...]: expected int >= 0",
        ),
        (
            {"teams": [{"name": "a", "namespaces": ["x"], "devices": {"MIG!": 7}}]},
            "teams[0].devices (a key): expected str matching",
        ),
    ],
)
def test_invalid_config_names_the_key(config: dict[str, Any], message: str) -> None:
    with pytest.raises(TeamConfigError) as err:
        parse(config)
    assert str(err.value).startswith(message), str(err.value)


def test_no_config_is_one_team_owning_everything() -> None:
    state = cluster(None, [node("n1"), node("n2")])
    assert state.team_of("anything") == "default"
    assert state.quota("default") == 16
    out = feed(state, submit("ns", "job", 2, at=1.0))
    assert of(out, GangAdmitted) == [GangAdmitted(at=1.0, gang="ns/job", team="default", gpus=16)]
    assert not of(out, SetTaint)


# -- team taints ----------------------------------------------------------------------


def test_pool_nodes_are_labelled_and_tainted_for_their_team() -> None:
    state = world(TWO_TEAMS)
    out = feed(state, [node("n1", "pa"), node("n2", "pb"), node("n3")])
    taints = {o.node: o.taint for o in of(out, SetTaint)}
    labels = {o.node: o.labels for o in of(out, SetLabels)}
    assert taints == {
        "n1": Taint(key="baton.io/team", value="a"),
        "n2": Taint(key="baton.io/team", value="b"),
    }
    assert labels == {"n1": {"baton.io/team": "a"}, "n2": {"baton.io/team": "b"}}


def test_node_already_labelled_and_tainted_needs_no_action() -> None:
    state = world(TWO_TEAMS)
    n = Node(
        name="n1",
        uid="u",
        labels={"baton.io/pool": "pa", "baton.io/team": "a"},
        taints=(Taint(key="baton.io/team", value="a"),),
        allocatable={GPU: 8},
    )
    assert feed(state, [NodeEvent(op="upsert", at=0.0, node=n)]) == []


def test_node_counts_are_sticky_and_refilled_when_a_node_goes() -> None:
    config = {"teams": [{"name": "a", "namespaces": ["x"], "nodes": 2}]}
    state = cluster(config, [node("n2"), node("n3")])
    assert state.counted == {"n2": "a", "n3": "a"}
    feed(state, [node("n1")])  # a new node sorting first does not move an assigned one
    assert state.counted == {"n2": "a", "n3": "a"}
    out = feed(state, [NodeEvent(op="delete", at=0.0, node=Node(name="n2", uid="u"))])
    assert state.counted == {"n3": "a", "n1": "a"}
    assert [o.node for o in of(out, SetTaint)] == ["n1"]


def test_config_change_moves_nodes_without_evicting() -> None:
    state = cluster(TWO_TEAMS, [node("n1", "pa"), node("n2", "pb")])
    feed(state, submit("team-a", "job", 1, at=1.0))
    moved = {
        "teams": [
            {"name": "a", "namespaces": ["team-a"]},
            {"name": "b", "namespaces": ["team-b"], "pools": ["pb", "pa"]},
        ]
    }
    out = feed(state, [TeamsLoaded(config=parse(moved), at=2.0)])
    assert [(o.node, o.taint.value) for o in of(out, SetTaint)] == [("n1", "b")]
    assert of(out, NodeTeamChanged) == [NodeTeamChanged(at=1.0, node="n1", team="b", previous="a")]
    assert not of(out, EvictGang)
    assert state.gangs["team-a/job"].admitted


# -- quota, borrowing, reclaim --------------------------------------------------------


def test_gang_waits_whole_when_team_is_at_quota_and_may_not_borrow() -> None:
    state = cluster(TWO_TEAMS, [node("n1", "pb"), node("n2", "pb"), node("n3", "pa")])
    out = feed(state, submit("team-b", "full", 2, at=1.0) + submit("team-b", "next", 1, at=2.0))
    assert [o.gang for o in of(out, GangAdmitted)] == ["team-b/full"]
    reason = of(out, GangQueued)[-1].reason
    assert "uses 16 of its 16 GPU quota" in reason and "may not borrow" in reason
    assert state.gangs["team-b/next"].held == 0


def test_borrowing_within_limit_and_reclaim_preempts_the_whole_gang() -> None:
    state = cluster(TWO_TEAMS, [node("a1", "pa"), node("b1", "pb"), node("b2", "pb")])
    out = feed(state, submit("team-a", "own", 1, at=1.0) + submit("team-a", "extra", 2, at=2.0))
    admitted = {o.gang: o.borrowed for o in of(out, GangAdmitted)}
    assert admitted == {"team-a/own": 0, "team-a/extra": 16}
    assert [a.annotations for a in of(out, Annotate)][-1] == {
        "baton.io/admitted": "true",
        "baton.io/borrowing": "true",
    }

    out = feed(state, submit("team-b", "owner", 1, at=3.0), now=3.0)
    recreated = of(out, RecreatePod)  # bare pods: nobody else would recreate them
    assert [(r.gang, r.pod, r.uid) for r in recreated] == [
        ("team-a/extra", "extra-0", "uid-extra-0"),
        ("team-a/extra", "extra-1", "uid-extra-1"),
    ]
    assert of(out, EvictGang) == []
    assert of(out, GangPreempted)[0].for_gang == "team-b/owner"
    assert [o.gang for o in of(out, GangAdmitted)] == ["team-b/owner"]
    unadmit = [a for a in of(out, Annotate) if a.name == "extra"]
    assert unadmit[0].annotations == {"baton.io/admitted": None, "baton.io/borrowing": None}
    assert state.gangs["team-a/extra"].admitted is False
    assert state.queues["a"][0][1] == "team-a/extra"


def test_borrow_limit_and_idle_lender_capacity_bound_borrowing() -> None:
    state = cluster(
        TWO_TEAMS, [node("a1", "pa"), node("b1", "pb"), node("b2", "pb"), node("b3", "pb")]
    )
    out = feed(state, submit("team-a", "huge", 3, at=1.0))  # 24: > quota 8 and > borrow 16
    assert "so at most 16" in of(out, GangQueued)[-1].reason
    state = cluster(TWO_TEAMS, [node("a1", "pa"), node("b1", "pb")])
    feed(state, submit("team-b", "busy", 1, at=1.0))
    out = feed(state, submit("team-a", "own", 1, at=2.0) + submit("team-a", "more", 1, at=3.0))
    assert [o.gang for o in of(out, GangAdmitted)] == ["team-a/own"]
    assert "other teams lend only 0 idle GPUs" in of(out, GangQueued)[-1].reason


def test_reclaim_takes_lowest_priority_borrower_first() -> None:
    config = {
        "teams": [
            {"name": "lo", "namespaces": ["lo"], "borrow": {"gpus": 8}, "priority": 1},
            {"name": "hi", "namespaces": ["hi"], "borrow": {"gpus": 8}, "priority": 5},
            {"name": "own", "namespaces": ["own"], "pools": ["p"]},
        ]
    }
    state = cluster(config, [node("o1", "p"), node("o2", "p")])
    feed(state, submit("hi", "h", 1, at=1.0) + submit("lo", "l", 1, at=2.0))
    out = feed(state, submit("own", "mine", 1, at=3.0))
    assert taken(out) == ["lo/l"]


def test_queue_is_in_order_and_release_admits_the_next() -> None:
    strict = {**TWO_TEAMS, "queueing": {"strategy": "StrictFIFO"}}
    state = cluster(strict, [node("b1", "pb"), node("b2", "pb")])
    out = feed(
        state,
        submit("team-b", "first", 1, at=1.0)
        + submit("team-b", "big", 2, at=2.0)
        + submit("team-b", "small", 1, at=3.0),
    )
    assert [o.gang for o in of(out, GangAdmitted)] == ["team-b/first"]
    assert [q[1] for q in state.queues["b"]] == ["team-b/big", "team-b/small"]  # no jumping
    out = feed(state, pods("team-b", "first", 1, phase="Succeeded"))
    assert of(out, GangReleased) == [GangReleased(at=1.0, gang="team-b/first", team="b", gpus=8)]
    assert [o.gang for o in of(out, GangAdmitted)] == ["team-b/big"]


def test_gang_demand_unknown_until_a_member_or_annotation() -> None:
    state = cluster({"queueing": {"strategy": "StrictFIFO"}}, [node("n1")])
    out = feed(state, [group("ns", "g", 1, at=1.0)])
    assert "waiting for members: 0 of 1" in of(out, GangQueued)[-1].reason
    out = feed(state, [group("ns", "h", 1, at=2.0, **{"baton.io/gpus-per-pod": "8"})])
    assert [o.gang for o in of(out, GangAdmitted)] == ["ns/h"]  # g has no pods: no head
    out = feed(state, pods("ns", "g", 1, gpus=0))
    assert [o.gang for o in of(out, GangAdmitted)] == ["ns/g"]


def test_replay_gives_the_same_decisions() -> None:
    events = [
        node("a1", "pa"),
        node("b1", "pb"),
        node("b2", "pb"),
        *submit("team-a", "x", 2, at=1.0),
        *submit("team-b", "y", 1, at=2.0),
    ]
    first = feed(core.initial(parse(TWO_TEAMS)), events)
    again = feed(core.initial(parse(TWO_TEAMS)), events)
    assert first == again and taken(first)


# -- a borrowing gang runs wholly on lenders' GPUs ------------------------------------


def test_borrower_submitted_first_leaves_the_teams_quota_to_its_own_gang() -> None:
    state = cluster(TWO_TEAMS, [node("a1", "pa"), node("b1", "pb"), node("b2", "pb")])
    out = feed(state, submit("team-a", "extra", 2, at=1.0) + submit("team-a", "own", 1, at=2.0))
    assert {o.gang: o.borrowed for o in of(out, GangAdmitted)} == {
        "team-a/extra": 16,
        "team-a/own": 0,
    }  # extra borrows whole, own is in quota
    out = feed(state, submit("team-b", "mine", 1, at=3.0), now=3.0)
    assert taken(out) == ["team-a/extra"]  # never the in-quota one
    assert state.gangs["team-a/own"].admitted


def test_in_quota_gang_reclaims_borrowers_bound_to_its_teams_nodes() -> None:
    config = {
        "teams": [
            {"name": "a", "namespaces": ["team-a"], "pools": ["pa"], "borrow": {"gpus": 8}},
            {"name": "b", "namespaces": ["team-b"], "pools": ["pb"]},
            {"name": "c", "namespaces": ["team-c"], "pools": ["pc"]},
        ]
    }
    state = cluster(config, [node("a1", "pa"), node("b1", "pb"), node("c1", "pc")])
    feed(state, submit("team-a", "own", 1, at=1.0) + submit("team-a", "extra", 1, at=2.0))
    assert state.gangs["team-a/extra"].borrowed == 8
    bound = Pod(
        namespace="team-a",
        name="extra-0",
        uid="uid-extra-0",
        phase="Running",
        labels={"scheduling.x-k8s.io/pod-group": "extra"},
        requests={GPU: 8},
        scheduler_name="baton",
        node_name="b1",
    )
    feed(state, [PodEvent(op="upsert", at=2.0, pod=bound)])
    # c's nodes are free, b's are taken by a's borrower: c admits without reclaiming ...
    assert not taken(feed(state, submit("team-c", "cj", 1, at=3.0)))
    # ... b has to take its node back
    out = feed(state, submit("team-b", "bj", 1, at=4.0))
    assert taken(out) == ["team-a/extra"]
    assert [o.gang for o in of(out, GangAdmitted)] == ["team-b/bj"]


# -- lone pods: gangs of one -----------------------------------------------------------


def lone(
    ns: str,
    name: str,
    *,
    gpus: int = 8,
    phase: str = "Pending",
    op: str = "upsert",
    **annotations: str,
) -> PodEvent:
    p = Pod(
        namespace=ns,
        name=name,
        uid=f"uid-{name}",
        phase=phase,  # type: ignore[arg-type]
        requests={GPU: gpus},
        scheduler_name="baton",
        annotations=annotations,
    )
    return PodEvent(op=op, at=0.0, pod=p)  # type: ignore[arg-type]


def test_lone_baton_pods_are_quota_gated_as_gangs_of_one() -> None:
    state = cluster(TWO_TEAMS, [node("b1", "pb"), node("b2", "pb")])
    out = feed(state, [lone("team-b", "p1"), lone("team-b", "p2"), lone("team-b", "p3")])
    admits = of(out, Annotate)
    assert [(a.kind, a.name, a.annotations) for a in admits] == [
        ("Pod", "p1", {"baton.io/admitted": "true", "baton.io/borrowing": None}),
        ("Pod", "p2", {"baton.io/admitted": "true", "baton.io/borrowing": None}),
    ]
    assert "may not borrow" in of(out, GangQueued)[-1].reason
    out = feed(state, [lone("team-b", "p1", phase="Succeeded")])
    assert [o.gang for o in of(out, GangReleased)] == ["team-b/p1"]
    assert [o.gang for o in of(out, GangAdmitted)] == ["team-b/p3"]
    out = feed(state, [lone("team-b", "p2", op="delete")])
    assert [o.gang for o in of(out, GangReleased)] == ["team-b/p2"]
    assert "team-b/p2" not in state.gangs


def test_other_pods_and_admitted_lone_pods_after_a_restart() -> None:
    state = cluster(TWO_TEAMS, [node("b1", "pb")])
    plain = Pod(namespace="team-b", name="web", uid="u", requests={GPU: 8})
    assert feed(state, [PodEvent(op="upsert", at=0.0, pod=plain)]) == []  # not Baton's
    assert feed(state, [lone("team-b", "old", **{"baton.io/admitted": "true"})]) == []
    assert state.used["b"] == 8  # adopted as admitted
    assert "may not borrow" in of(feed(state, [lone("team-b", "new")]), GangQueued)[-1].reason


@pytest.mark.parametrize("order", ["pods first", "group first"])
def test_a_finished_gang_seen_after_a_restart_holds_no_quota(order: str) -> None:
    """Completed pods stay in the API: after a restart, a gang admitted before it whose
    members all succeeded is history, not 16 GPUs of team b's quota (seen in baton up's
    status: a team 'using' 925 GPUs of a 512-GPU cluster)."""
    state = cluster(TWO_TEAMS, [node("b1", "pb"), node("b2", "pb")])
    done = group("team-b", "done", 2, 0.0, **{"baton.io/admitted": "true"})
    members = pods("team-b", "done", 2, phase="Succeeded")
    running = group("team-b", "run", 1, 0.0, **{"baton.io/admitted": "true"})
    events = [done, *members] if order == "group first" else [*members, done]
    out = feed(state, [*events, running, *pods("team-b", "run", 1, phase="Running")])
    assert state.used["b"] == 8  # only the running gang
    assert state.gangs["team-b/done"].finished
    # Its members seen first, it is known to be over at once; its group seen first, it
    # is adopted until its members arrive, then released (a true, harmless decision).
    released = [o.gang for o in of(out, GangReleased)]
    assert released == ([] if order == "pods first" else ["team-b/done"])


def test_a_waiting_gang_is_not_told_again_when_only_the_counts_in_its_reason_move() -> None:
    """Every admission moves its team's usage: re-telling each waiting gang "uses 9 of
    16", then "uses 10 of 16", flooded the bus on a busy cluster (11 GangQueued a second
    in a 64-node demo)."""
    state = cluster(TWO_TEAMS, [node("b1", "pb"), node("b2", "pb")])
    feed(state, submit("team-b", "run", 1, 0.0, phase="Running"))  # 8 of 16
    told = of(feed(state, submit("team-b", "big", 2, 1.0)), GangQueued)
    assert [q.gang for q in told][-1] == "team-b/big" and "uses 8 of" in told[-1].reason
    out = feed(state, [lone("team-b", "small", gpus=1)])  # admitted: 9 of 16
    assert [o.gang for o in of(out, GangAdmitted)] == ["team-b/small"]
    out += feed(state, [Tick(at=2.0, service="admission")], now=2.0)  # every queue looked at
    assert [q for q in of(out, GangQueued) if q.gang == "team-b/big"] == []  # same reason
    assert "uses 9 of" in state.gangs["team-b/big"].reason  # kept, for whoever asks
    out = feed(state, pods("team-b", "run", 1, phase="Succeeded"))  # 1 of 16: still short
    out += feed(state, [Tick(at=3.0, service="admission")], now=3.0)
    assert [q for q in of(out, GangQueued) if q.gang == "team-b/big"] == []
    out = feed(state, [lone("team-b", "small", gpus=1, phase="Succeeded")])
    assert [o.gang for o in of(out, GangAdmitted)] == ["team-b/big"]
