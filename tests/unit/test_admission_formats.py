"""Admission of gangs in every format: minResources as the demand, Kueue/Volcano gangs
without a group object (their marks on a member pod), upstream PodGroups."""

from __future__ import annotations

from typing import Any

import pytest

from baton.proto.actions import Annotate
from baton.proto.admission import GangAdmitted, GangQueued
from baton.proto.k8s import GPU, UPSTREAM_API, GangRef, Node, NodeEvent, PodEvent, PodGroupEvent
from baton.proto.keys import ADMITTED
from baton.services.admission import core
from baton.services.admission.teams import parse
from tests.support.builders import pod, pod_group

pytestmark = pytest.mark.unit

TEAM = {"teams": [{"name": "a", "namespaces": ["ml"], "pools": ["pa"], "quota": {"gpus": 16}}]}


def start(gpus: int = 16) -> core.State:
    state = core.initial(parse(TEAM))
    for i in range(gpus // 8):
        n = Node(name=f"n{i}", uid=f"n{i}", labels={"baton.io/pool": "pa"}, allocatable={GPU: 8})
        core.step(state, NodeEvent(op="upsert", at=0.0, node=n), 0.0)
    return state


def feed(state: core.State, *events: Any, op: str = "upsert") -> list[Any]:
    out: list[Any] = []
    for obj in events:
        if hasattr(obj, "min_member"):
            event: Any = PodGroupEvent(op=op, at=1.0, pod_group=obj)  # type: ignore[arg-type]
        else:
            event = PodEvent(op=op, at=1.0, pod=obj)  # type: ignore[arg-type]
        out += core.step(state, event, 1.0)[1]
    return out


def of(outputs: list[Any], type_: type) -> list[Any]:
    return [o for o in outputs if isinstance(o, type_)]


def test_min_resources_is_the_gang_s_demand_before_any_pod_exists() -> None:
    state = start()
    out = feed(state, pod_group("big", namespace="ml", min_member=2, min_resources={GPU: 24}))
    queued = of(out, GangQueued)[-1]
    assert queued.gpus == 24 and "needs 24 GPUs" in queued.reason, queued.reason
    state = start()
    out = feed(state, pod_group("fits", namespace="ml", min_member=2, min_resources={GPU: 16}))
    (admitted,) = of(out, GangAdmitted)
    assert (admitted.gang, admitted.gpus) == ("ml/fits", 16)


def test_members_asking_more_than_min_resources_count_as_asked() -> None:
    state = start(gpus=32)
    feed(state, pod_group("job", namespace="ml", min_member=2, min_resources={GPU: 4}))
    feed(state, pod("job-0", namespace="ml", group="job", gpus=8))
    assert state.gangs["ml/job"].gpus == 8  # what its members ask, not minMember x 8
    feed(state, pod("job-1", namespace="ml", group="job", gpus=8))
    assert state.gangs["ml/job"].gpus == 16


@pytest.mark.parametrize("source", ["kueue", "volcano"])
def test_a_gang_without_a_group_object_is_admitted_on_a_member_pod(source: str) -> None:
    state = start()
    ref = GangRef(name="job", source=source, min_member=2)  # type: ignore[arg-type]
    out = feed(state, pod("job-1", namespace="ml", gpus=8, ref=ref))
    assert of(out, Annotate) == []  # its demand is counted from its 2 members, not guessed
    assert "waiting for members: 1 of 2" in of(out, GangQueued)[-1].reason
    out = feed(state, pod("job-0", namespace="ml", gpus=8, ref=ref))
    (mark,) = of(out, Annotate)
    assert (mark.kind, mark.name, mark.annotations[ADMITTED]) == ("Pod", "job-1", "true")
    assert of(out, GangAdmitted)[0].gpus == 16
    out = feed(state, pod("job-0", namespace="ml", gpus=8, ref=ref))
    assert of(out, Annotate) == []  # one admission per gang


def test_an_admitted_gang_whose_carrier_left_is_marked_on_another_member() -> None:
    state = start()
    ref = GangRef(name="job", source="kueue", min_member=2)
    first, second = (pod(f"job-{i}", namespace="ml", gpus=8, ref=ref) for i in range(2))
    feed(state, first, second)
    out = feed(state, first, op="delete")
    (mark,) = of(out, Annotate)
    assert (mark.name, mark.annotations[ADMITTED]) == ("job-1", "true")
    out = feed(state, second, op="delete")
    assert "ml/job" not in state.gangs  # gone with its last member


def test_an_upstream_pod_group_is_marked_through_its_own_api() -> None:
    state = start()
    group = pod_group("train", namespace="ml", min_member=2, api=UPSTREAM_API)
    out = feed(state, group, *(
        pod(f"w-{i}", namespace="ml", gpus=8, ref=GangRef(name="train", source="kubernetes"))
        for i in range(2)
    ))  # fmt: skip
    (mark,) = of(out, Annotate)
    assert (mark.kind, mark.api, mark.name) == ("PodGroup", UPSTREAM_API, "train")
