"""Admission counts what autoscaled pools can grow to: a gang larger than today's nodes
but within what the pools may become is admitted (the autoscaler then grows the pool)."""

from __future__ import annotations

import msgspec
import pytest

from baton.proto.admission import GangAdmitted, GangQueued
from baton.proto.k8s import MachineDeployment, MachineDeploymentEvent
from tests.unit.test_admission_core import TWO_TEAMS, cluster, feed, node, of, submit

pytestmark = pytest.mark.unit


def pool(name: str, *, ready: int, hi: int | None, lo: int | None = 0) -> MachineDeploymentEvent:
    md = MachineDeployment(namespace="default", name=name, uid=f"u-{name}", replicas=ready,
                           ready_replicas=ready, min_size=lo, max_size=hi)  # fmt: skip
    return MachineDeploymentEvent(op="upsert", at=0.0, machine_deployment=md)


def test_a_gang_larger_than_todays_nodes_is_admitted_within_the_pools_max_size() -> None:
    state = cluster(None, [node("n1", "gpu"), node("n2", "gpu")])
    out = feed(state, submit("ml", "big", 4, at=1.0))  # 32 GPUs on 16 today
    assert not of(out, GangAdmitted) and "at most 16" in of(out, GangQueued)[-1].reason
    out = feed(state, [pool("gpu", ready=2, hi=8)])  # may grow to 8 nodes: 64 GPUs
    assert [a.gang for a in of(out, GangAdmitted)] == ["ml/big"]


def test_pools_that_are_not_autoscaled_or_at_max_add_nothing() -> None:
    state = cluster(None, [node("n1", "gpu"), node("n2", "gpu")])
    feed(state, [pool("gpu", ready=2, hi=None, lo=None)])
    assert state.quota("default") == 16
    feed(state, [pool("gpu", ready=2, hi=2)])
    assert state.quota("default") == 16
    feed(state, [pool("gpu", ready=2, hi=5)])
    assert state.quota("default") == 40  # 2 nodes today, 3 more to come


def test_a_teams_own_pool_grows_only_that_teams_capacity() -> None:
    state = cluster(TWO_TEAMS, [node("a1", "pa"), node("b1", "pb")])
    feed(state, [pool("pa", ready=1, hi=4), pool("other", ready=0, hi=10)])
    assert state.growth == {"a": 24}  # "other" is no team's pool
    assert state.room("a") == 32 and state.room("b") == 8


def test_a_member_wider_than_todays_nodes_waits_while_a_pool_of_unknown_shape_may_grow() -> None:
    """A 16-GPU pod on 8-GPU nodes is set aside (no node takes it), unless an autoscaled
    pool whose node shape is unknown (no capacity annotations, none of its nodes seen:
    scaled from zero) may bring larger nodes; a pool's capacity annotations say."""
    state = cluster(None, [node("n1", "gpu"), node("n2", "gpu")])
    out = feed(state, submit("ml", "wide", 1, at=1.0, gpus=16))
    assert "no node has more than 8" in of(out, GangQueued)[-1].reason
    out = feed(state, [pool("big", ready=0, hi=4)])  # its nodes' shape is unknown
    assert [a.gang for a in of(out, GangAdmitted)] == ["ml/wide"]
    state = cluster(None, [node("n1", "gpu"), node("n2", "gpu")])
    sized = pool("big", ready=0, hi=4).machine_deployment
    sized = msgspec.structs.replace(sized, capacity={"nvidia.com/gpu": 8})
    out = feed(state, [MachineDeploymentEvent(op="upsert", at=0.0, machine_deployment=sized),
                       *submit("ml", "wide", 1, at=1.0, gpus=16)])  # fmt: skip
    assert "no node has more than 8" in of(out, GangQueued)[-1].reason
    assert not of(out, GangAdmitted)
