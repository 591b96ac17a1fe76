"""The bridge refuses objects with impossible values, to the dead-letter subject with
the reason; deletions always pass."""

from __future__ import annotations

import msgspec
import pytest

from baton.proto import k8s
from baton.proto.deadletter import DeadLetter
from baton.services.bridge import core, shell
from baton.services.bridge.core.bounds import Bounds

pytestmark = pytest.mark.unit


def node(gpus: int, **extra: int) -> k8s.NodeEvent:
    allocatable = {k8s.GPU: gpus, "cpu": 64_000, **extra}
    return k8s.NodeEvent(op="upsert", at=1.0, node=k8s.Node(name="gpu-1", uid="u1",
                         resource_version="1", allocatable=allocatable))  # fmt: skip


def pod(gpus: int, *, min_member: int = 0) -> k8s.PodEvent:
    group = k8s.GangRef(name="g", source="kueue", min_member=min_member) if min_member else None
    return k8s.PodEvent(op="upsert", at=1.0, pod=k8s.Pod(namespace="a", name="p", uid="u2",
                        requests={k8s.GPU: gpus}, group=group))  # fmt: skip


def group(min_member: int, **resources: int) -> k8s.PodGroupEvent:
    obj = k8s.PodGroup(namespace="a", name="g", uid="u3", min_member=min_member,
                       min_resources=resources)  # fmt: skip
    return k8s.PodGroupEvent(op="upsert", at=1.0, pod_group=obj)


def step(event: k8s.K8sEvent, policy: core.Policy | None = None) -> tuple[core.Output, ...]:
    state = core.initial(policy or core.Policy(cluster="c1"))
    return core.step(state, event, 1.0)[1]


@pytest.mark.parametrize(
    ("event", "says"),
    [
        (node(1000), "claims 1000 nvidia.com/gpu allocatable; at most 64"),
        (node(8, memory=-1), "negative allocatable memory: -1"),
        (pod(10**12), "requests 1000000000000 nvidia.com/gpu"),
        (pod(-8), "negative requests nvidia.com/gpu: -8"),
        (pod(1, min_member=10**9), "minMember 1000000000"),
        (group(10**9), "minMember 1000000000; expected 0..100000"),
        (group(-1), "minMember -1"),
        (group(4, cpu=-5), "negative minResources cpu"),
    ],
)
def test_impossible_objects_are_refused_with_the_reason(event: k8s.K8sEvent, says: str) -> None:
    (out,) = step(event)
    assert isinstance(out, core.Rejected), out
    assert says in out.reason
    letter = shell._dead_letter("c1", out)  # what is published: the dead-letter subject
    assert letter.subject == "baton.c1.deadletter.k8s"
    assert isinstance(letter.event, DeadLetter) and says in letter.event.reason
    assert letter.event.error_class == "bad-input"


@pytest.mark.parametrize("event", [node(8), node(64), pod(8), group(128), pod(0)])
def test_real_objects_pass(event: k8s.K8sEvent) -> None:
    (out,) = step(event)
    assert isinstance(out, core.Publish)


def test_a_deletion_always_passes_and_the_bound_is_a_setting() -> None:
    gone = msgspec.structs.replace(node(1000), op="delete")
    assert isinstance(step(gone)[0], core.Publish)
    small = core.Policy(cluster="c1", bounds=Bounds(max_node_gpus=4))
    assert isinstance(step(node(8), small)[0], core.Rejected)
