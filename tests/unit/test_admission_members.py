"""What members mean for quota: demand counted from what members ask, shape by shape
(an MPI-style launcher and parameter server with no GPUs beside 8-GPU workers); every
member counts against its team from admission on, in any arrival order; a gang taken
off by admission has its bare pods recreated and, with no pods, holds no queue's head."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from baton.proto import keys
from baton.proto.actions import Annotate, EvictGang, RecreatePod
from baton.proto.admission import GangAdmitted, GangQueued
from baton.proto.k8s import GPU, Node, NodeEvent, Pod, PodEvent, PodGroup, PodGroupEvent
from baton.services.admission import core
from baton.services.admission.core import webhook
from baton.services.admission.teams import parse

pytestmark = pytest.mark.unit

ONE_TEAM = {"teams": [{"name": "a", "namespaces": ["ml"], "pools": ["pa"]}]}
QUOTA_8 = {
    "teams": [
        {"name": "a", "namespaces": ["ml"], "pools": ["pa"], "quota": {"gpus": 8}},
        {"name": "b", "namespaces": ["other"], "pools": ["pb"]},
    ]
}


def start(config: dict[str, Any], nodes: dict[str, str]) -> core.State:
    """A core with 8-GPU nodes (name -> pool)."""
    state = core.initial(parse(config))
    for name, pool in nodes.items():
        n = Node(name=name, uid=name, labels={keys.POOL: pool}, allocatable={GPU: 8})
        core.step(state, NodeEvent(op="upsert", at=0.0, node=n), 0.0)
    return state


def group(name: str, min_member: int, *, ns: str = "ml", at: float = 1.0) -> PodGroupEvent:
    g = PodGroup(namespace=ns, name=name, uid=f"g-{name}", min_member=min_member, created_at=at)
    return PodGroupEvent(op="upsert", at=at, pod_group=g)


def member(
    gang: str, name: str, gpus: int, *, ns: str = "ml", phase: str = "Pending",
    labels: dict[str, str] | None = None, priority: int = 0,
) -> PodEvent:  # fmt: skip
    pod = Pod(
        namespace=ns, name=name, uid=f"uid-{name}", phase=phase,  # type: ignore[arg-type]
        labels={keys.POD_GROUP: gang, **(labels or {})}, requests={GPU: gpus},
        scheduler_name="baton", priority=priority,
    )  # fmt: skip
    return PodEvent(op="upsert", at=1.0, pod=pod)


def feed(state: core.State, *events: Any, now: float = 1.0) -> list[Any]:
    out: list[Any] = []
    for event in events:
        _, outputs = core.step(state, event, now)
        out.extend(outputs)
    return out


def of(outputs: list[Any], type_: type) -> list[Any]:
    return [o for o in outputs if isinstance(o, type_)]


def mpi(name: str = "mpi") -> list[Any]:
    """A launcher and a parameter server with no GPUs, three 8-GPU workers, minMember 5."""
    return [
        group(name, 5),
        member(name, f"{name}-launcher", 0),
        member(name, f"{name}-ps", 0),
        *(member(name, f"{name}-worker-{i}", 8) for i in range(3)),
    ]


FOUR_NODES = {f"n{i}": "pa" for i in range(4)}  # 32 GPUs


# -- demand, shape by shape -------------------------------------------------------------


def test_an_mpi_style_group_needs_what_its_members_ask() -> None:
    state = start(ONE_TEAM, FOUR_NODES)
    out = feed(state, *mpi())
    assert [(a.gang, a.gpus) for a in of(out, GangAdmitted)] == [("ml/mpi", 24)]  # not 5 x 8


def test_the_webhook_lets_every_member_of_an_mpi_style_group_in_on_32_gpus() -> None:
    state = start(ONE_TEAM, FOUR_NODES)
    events = mpi()
    feed(state, events[0])
    for event in events[1:]:
        pod = event.pod
        obj = {
            "metadata": {"name": pod.name, "labels": pod.labels},
            "spec": {"schedulerName": "baton", "containers": [
                {"name": "c", "resources": {"limits": {GPU: str(pod.requests[GPU])}}}]},
        }  # fmt: skip
        body = {
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "r", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "namespace": "ml", "name": pod.name, "operation": "CREATE",
                        "object": obj},
        }  # fmt: skip
        verdict = webhook.review(state, json.dumps(body).encode(), mutate=False, now=1.0)
        response = json.loads(verdict.body)["response"]
        assert response["allowed"], response["status"]["message"]
        feed(state, event)


def test_an_mpi_style_worker_is_not_predicted_to_borrow_for_minmember_x_8() -> None:
    config = {
        "teams": [
            {"name": "a", "namespaces": ["ml"], "pools": ["pa"], "borrow": {"gpus": 8}},
            {"name": "b", "namespaces": ["other"], "pools": ["pb"]},
        ]
    }
    state = start(config, {"a0": "pa", "a1": "pa", "a2": "pa", "b0": "pb"})  # a: 24 GPUs
    feed(state, *mpi()[:3])  # the PodGroup, the launcher and the parameter server
    for i in range(3):  # 24 GPUs with the third worker: within a's quota, not 5 x 8
        name = f"mpi-worker-{i}"
        assert not webhook.will_borrow(state, team="a", gang="ml/mpi", gpus=8, pod=name)
        feed(state, member("mpi", name, 8))
    assert state.gangs["ml/mpi"].admitted and not state.gangs["ml/mpi"].borrowed


def test_a_mixed_gang_leaves_its_team_room_for_gangs_that_fit() -> None:
    state = start(ONE_TEAM, FOUR_NODES)
    out = feed(state, *mpi(), *[e for i in range(3) for e in (
        group(f"one-{i}", 1, at=2.0 + i), member(f"one-{i}", f"one-{i}-0", 8))])  # fmt: skip
    assert [a.gang for a in of(out, GangAdmitted)] == ["ml/mpi", "ml/one-0"]
    assert state.used["a"] == 32
    waiting = [q.reason for q in of(out, GangQueued) if q.gang == "ml/one-1"][-1]
    assert "uses 32 of its 32" in waiting  # and it does: 24 + 8


def test_a_gang_short_of_members_waits_for_them_and_says_so() -> None:
    state = start(ONE_TEAM, FOUR_NODES)
    out = feed(state, *mpi()[:3])  # the launcher and the parameter server only
    assert not of(out, GangAdmitted)
    assert of(out, GangQueued)[-1].reason.startswith("waiting for members: ")  # told once
    said = state.gangs["ml/mpi"].reason  # kept up to date (baton why)
    assert said.startswith("waiting for members: 2 of 5 member pods exist"), said


def test_a_gang_its_team_can_never_hold_is_set_aside_naming_what_asks_too_much() -> None:
    state = start(ONE_TEAM, {"n0": "pa", "n1": "pa"})  # 16 GPUs
    out = feed(state, *(member("wide", f"wide-{i}", 8) for i in range(3)), group("wide", 2))
    said = [q.reason for q in of(out, GangQueued) if q.set_aside][-1]
    assert "needs 24 GPUs (3 member pods ask: 8 + 8 + 8; every member counts)" in said
    assert "use fewer or smaller member pods or ask for a larger quota" in said


# -- every member counts, whatever order they come in ------------------------------------


def _at_quota() -> core.State:
    state = start(QUOTA_8, {"a1": "pa", "b1": "pb", "b2": "pb"})
    out = feed(state, group("run", 1), member("run", "run-0", 8))
    assert [a.gang for a in of(out, GangAdmitted)] == ["ml/run"]
    return state


def test_a_zero_gpu_first_pod_does_not_admit_a_gang_past_its_quota() -> None:
    state = _at_quota()
    out = feed(state, group("sneak", 2, at=3.0), member("sneak", "sneak-launcher", 0), now=3.0)
    assert not of(out, GangAdmitted)  # not "Admitted: 0 GPUs"
    out = feed(state, member("sneak", "sneak-worker", 4), now=6.0)
    assert not of(out, GangAdmitted)
    assert "uses 8 of its 8 GPU quota; the gang needs 4" in of(out, GangQueued)[-1].reason
    assert state.used["a"] == 8


def test_a_member_joining_an_admitted_gang_past_its_quota_waits_for_room() -> None:
    state = _at_quota()
    out = feed(state, group("sneak", 1, at=3.0), member("sneak", "sneak-launcher", 0), now=3.0)
    assert [(a.gang, a.gpus) for a in of(out, GangAdmitted)] == [("ml/sneak", 0)]
    out = feed(state, member("sneak", "sneak-worker", 4), now=6.0)
    (pause,) = of(out, Annotate)  # its marks go: the gang service places no new member
    assert (pause.name, pause.annotations) == ("sneak", {keys.ADMITTED: None})
    assert "members that joined since ask 4 more" in of(out, GangQueued)[-1].reason
    assert state.used["a"] == 8
    out = feed(state, member("run", "run-0", 8, phase="Succeeded"), now=9.0)
    (resume,) = of(out, Annotate)
    assert (resume.name, resume.annotations) == ("sneak", {keys.ADMITTED: "true"})
    assert [(a.gang, a.gpus) for a in of(out, GangAdmitted)] == [("ml/sneak", 4)]  # told
    assert state.used["a"] == 4


SHAPES = st.lists(
    st.tuples(
        st.sampled_from(["ml", "other"]),  # team a (quota 8, borrows up to 8) or b (16)
        st.integers(1, 3),  # minMember
        st.lists(st.sampled_from([0, 1, 4, 8]), min_size=1, max_size=4),  # member GPUs
        st.sampled_from([0, 10]),  # priority: a higher one preempts within its team
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=150, deadline=None)
@given(shapes=SHAPES, data=st.data())
def test_a_teams_marked_gangs_never_ask_more_than_its_quota_and_borrowing(
    shapes: list[tuple[str, int, list[int], int]], data: st.DataObject
) -> None:
    config = {
        "teams": [
            {"name": "a", "namespaces": ["ml"], "pools": ["pa"], "quota": {"gpus": 8},
             "borrow": {"gpus": 8}},
            {"name": "b", "namespaces": ["other"], "pools": ["pb"], "quota": {"gpus": 16}},
        ],
        "queueing": {"preempt_min_run_s": 0},
    }  # fmt: skip
    state = start(config, {"a1": "pa", "b1": "pb", "b2": "pb"})
    events: list[Any] = []
    for g, (ns, min_member, gpus, priority) in enumerate(shapes):
        events.append(group(f"g{g}", min_member, ns=ns, at=float(g)))
        pods = [(f"g{g}-{i}", n) for i, n in enumerate(gpus)]
        events += [member(f"g{g}", p, n, ns=ns, priority=priority) for p, n in pods]
        if data.draw(st.booleans(), label=f"g{g} ends"):
            events += [member(f"g{g}", p, n, ns=ns, phase="Succeeded") for p, n in pods]
    order = data.draw(st.permutations(range(len(events))), label="arrival order")
    limit = {"ml": 16, "other": 16}  # quota + what it may borrow
    marked: dict[str, bool] = {}
    asks: dict[str, dict[str, int]] = {}  # gang -> its live pods' GPUs
    for t, i in enumerate(order):
        event = events[i]
        out = feed(state, event, now=float(t))
        if isinstance(event, PodEvent):
            pod = event.pod
            pods = asks.setdefault(f"{pod.namespace}/{pod.gang}", {})
            if pod.phase == "Pending":
                pods[pod.name] = pod.requests[GPU]
            else:
                pods.pop(pod.name, None)
        for a in of(out, Annotate):
            if keys.ADMITTED in a.annotations:
                marked[f"{a.namespace}/{a.name}"] = a.annotations[keys.ADMITTED] == "true"
        for a in of(out, EvictGang | RecreatePod):
            asks.pop(a.gang, None)  # its pods go
        for ns, most in limit.items():
            exposed = sum(
                sum(pods.values()) for key, pods in asks.items()
                if marked.get(key) and key.startswith(f"{ns}/")
            )  # fmt: skip
            assert exposed <= most, (ns, exposed, asks, marked)
        for team, quota, borrow in (("a", 8, 8), ("b", 16, 0)):
            assert state.used.get(team, 0) <= quota and state.lent.get(team, 0) <= borrow


# -- a gang taken off by admission -------------------------------------------------------

TWO_TEAMS = {
    "teams": [
        {"name": "a", "namespaces": ["ml"], "pools": ["pa"], "borrow": {"gpus": 16}},
        {"name": "b", "namespaces": ["other"], "pools": ["pb"], "priority": 10},
    ]
}
JOB = {"batch.kubernetes.io/job-name": "train"}


def _borrowing() -> core.State:
    state = start(TWO_TEAMS, {"a1": "pa", "b1": "pb", "b2": "pb"})
    out = feed(
        state, group("extra", 2), member("extra", "extra-0", 8),
        member("extra", "extra-1", 8, labels=JOB),
    )  # fmt: skip
    assert [(a.gang, a.borrowed) for a in of(out, GangAdmitted)] == [("ml/extra", 16)]
    return state


def test_a_reclaimed_gang_has_its_bare_pods_recreated_and_the_others_left_to_their_controller(
) -> None:  # fmt: skip
    state = _borrowing()
    out = feed(state, group("mine", 1, ns="other", at=3.0), member("mine", "mine-0", 8,
               ns="other"), now=3.0)  # fmt: skip
    assert [(r.pod, r.uid) for r in of(out, RecreatePod)] == [("extra-0", "uid-extra-0")]
    assert [[p.pod for p in e.pods] for e in of(out, EvictGang)] == [["extra-1"]]
    assert [a.gang for a in of(out, GangAdmitted)] == ["other/mine"]


@pytest.mark.parametrize("declared", [False, True])
def test_a_taken_off_gang_with_no_pods_left_holds_no_queue_head(declared: bool) -> None:
    strict = {**TWO_TEAMS, "queueing": {"strategy": "StrictFIFO"}}
    state = start(strict, {"a1": "pa", "b1": "pb", "b2": "pb"})
    extra = group("extra", 2)
    if declared:  # spec.minResources: admitted before its pods exist, not after they went
        pg = msgspec.structs.replace(extra.pod_group, min_resources={GPU: 16})
        extra = msgspec.structs.replace(extra, pod_group=pg)
    came = 1 if declared else 2  # declared: admitted with one of its two pods there
    out = feed(state, extra, *(member("extra", f"extra-{i}", 8) for i in range(came)))
    assert [a.gang for a in of(out, GangAdmitted)] == ["ml/extra"]
    feed(state, group("mine", 1, ns="other", at=3.0), member("mine", "mine-0", 8, ns="other"))
    gone = [PodEvent(op="delete", at=4.0, pod=member("extra", f"extra-{i}", 8).pod)
            for i in range(came)]  # fmt: skip
    out = feed(state, *gone, group("own", 1, at=5.0), member("own", "own-0", 8), now=5.0)
    assert [a.gang for a in of(out, GangAdmitted)] == ["ml/own"]  # not behind an empty head
    said = [q.reason for q in of(out, GangQueued) if q.gang == "ml/extra"]
    assert said and said[-1].startswith("waiting for members: 0 of 2 member pods; its pods went")
    out = feed(state, member("mine", "mine-0", 8, ns="other", phase="Succeeded"), now=6.0)
    assert not of(out, GangAdmitted)  # room again, but none of its pods is back yet
    back = [member("extra", f"extra-{i}", 8) for i in range(2)]  # recreated, unbound
    out = feed(state, *back, now=7.0)
    assert [(a.gang, a.borrowed) for a in of(out, GangAdmitted)] == [("ml/extra", 16)]
