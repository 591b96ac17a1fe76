"""The balloon core: pools and nodes in; balloon pods, removals and headroom out."""

from __future__ import annotations

from typing import Any

import pytest

from baton.proto import keys
from baton.proto.actions import ActionResult, Binding, CreatePod, DeletePod
from baton.proto.balloon import BalloonPolicy, Headroom
from baton.proto.k8s import MachineDeployment, MachineDeploymentEvent, NodeEvent, PodEvent
from baton.proto.placement import GangPlaced
from baton.proto.runner import Tick
from baton.services.balloon import core
from tests.support.builders import node, pod

pytestmark = pytest.mark.unit


def md(name: str = "h100") -> MachineDeploymentEvent:
    pool = MachineDeployment(namespace="default", name=name, uid=f"u-{name}", replicas=3,
                             selector={keys.POOL: name})  # fmt: skip
    return MachineDeploymentEvent(op="upsert", at=0, machine_deployment=pool)


class Fed:
    def __init__(self, **policy: Any) -> None:
        self.state = core.initial(BalloonPolicy(priority_class="", **policy))

    def __call__(self, *events: Any, at: float = 0.0) -> list[Any]:
        out: list[Any] = []
        for e in events:
            out += core.step(self.state, e, at)[1]
        return out

    def tick(self, at: float) -> list[Any]:
        return self(Tick(at=at), at=at)

    def created(self, out: list[Any]) -> None:
        """The actuator made the pods the core asked for."""
        for c in out:
            if isinstance(c, CreatePod):
                p = pod(c.pod.name, namespace=c.pod.namespace, gpus=8, node_name=c.pod.node_name,
                        labels=dict(c.pod.labels), priority=-10, phase="Running",
                        scheduler="default-scheduler")  # fmt: skip
                self(PodEvent(op="upsert", at=0, pod=p))


def pool_nodes(fed: Fed, count: int, pool: str = "h100", gpus: int = 8) -> None:
    fed(md(pool), *(NodeEvent(op="upsert", at=0,
                              node=node(f"{pool}-{i}", gpus=gpus).in_pool(pool).build())
                    for i in range(count)))  # fmt: skip


def test_static_headroom_one_balloon_per_node_asking_for_all_its_gpus() -> None:
    fed = Fed(static_nodes=2)
    pool_nodes(fed, 3)
    out = fed.tick(1.0)
    creates = [o for o in out if isinstance(o, CreatePod)]
    assert [c.pod.node_name for c in creates] == ["h100-0", "h100-1"]
    template = creates[0].pod
    assert template.requests == {keys.GPU: 8} and template.priority == -10
    assert template.annotations == {keys.SAFE_TO_EVICT: "true"}
    assert keys.BALLOON in template.labels and creates[0].priority == "balloon"
    (room,) = [o for o in out if isinstance(o, Headroom)]
    assert (room.pool, room.want, room.held, room.deficit) == ("default/h100", 2, 0, 0)
    assert fed.tick(2.0) == []  # asked for, not made yet: not asked twice
    fed.created(out)
    (room,) = fed.tick(3.0)
    assert (room.held, room.deficit) == (2, 0)


def test_no_empty_node_is_a_deficit_for_the_autoscaler() -> None:
    fed = Fed(static_nodes=3)
    pool_nodes(fed, 2)
    fed(PodEvent(op="upsert", at=0, pod=pod("w", gpus=8, node_name="h100-0", phase="Running")))
    out = fed.tick(1.0)
    assert [c.pod.node_name for c in out if isinstance(c, CreatePod)] == ["h100-1"]
    (room,) = [o for o in out if isinstance(o, Headroom)]
    assert room.deficit == 2


def test_a_gang_that_took_the_balloons_nodes_gets_replacement_headroom() -> None:
    fed = Fed(static_nodes=1)
    pool_nodes(fed, 2)
    out = fed.tick(1.0)
    fed.created(out)
    fed.tick(2.0)
    (made,) = [o for o in out if isinstance(o, CreatePod)]
    # the gang's bind evicted the balloon and a member now runs there
    gone = pod(made.pod.name, namespace="baton-system", gpus=8, node_name="h100-0",
               labels={keys.BALLOON: "true"})  # fmt: skip
    fed(PodEvent(op="delete", at=3, pod=gone))
    fed(PodEvent(op="upsert", at=3, pod=pod("m", gpus=8, node_name="h100-0", phase="Running")))
    out = fed.tick(4.0)
    assert [c.pod.node_name for c in out if isinstance(c, CreatePod)] == ["h100-1"]


def test_too_many_balloons_are_removed_newest_first() -> None:
    fed = Fed(static_nodes=2)
    pool_nodes(fed, 2)
    fed.created(fed.tick(1.0))
    fed.state.policy = BalloonPolicy(priority_class="", static_nodes=1)
    out = fed.tick(2.0)
    assert len([o for o in out if isinstance(o, DeletePod)]) == 1


def test_failed_create_is_asked_again() -> None:
    fed = Fed(static_nodes=1)
    pool_nodes(fed, 1)
    (create, _) = fed.tick(1.0)
    fed(ActionResult(action_id=create.id, action_type="action.create-pod.v1", by="actuator",
                     at=2, outcome="failed"))  # fmt: skip
    assert [o for o in fed.tick(3.0) if isinstance(o, CreatePod)]


def test_cpu_pools_get_no_balloons() -> None:
    fed = Fed(static_nodes=1)
    pool_nodes(fed, 2, pool="cpu", gpus=0)
    assert fed.tick(1.0) == []


def placed(gang: str, nodes: int, at: float) -> GangPlaced:
    bindings = tuple(Binding(namespace="ml", pod=f"{gang}-{i}", node=f"h100-{i}")
                     for i in range(nodes))  # fmt: skip
    return GangPlaced(gang=gang, at=at, action_id=f"b-{gang}", bindings=bindings)


def test_demand_aware_headroom_is_a_quantile_of_recent_gang_sizes_capped() -> None:
    fed = Fed(mode="demand", quantile=0.5, window_s=100, max_idle_nodes=3)
    pool_nodes(fed, 8)
    fed(placed("a", 2, 0), placed("b", 4, 0), placed("c", 6, 0), placed("one", 1, 0), at=0)
    assert core.want(fed.state, "default/h100", 1.0)[0] == 3  # p50 of 2,4,6 is 4; capped at 3
    fed.state.policy = BalloonPolicy(mode="demand", quantile=0.5, window_s=100, max_idle_nodes=9)
    assert core.want(fed.state, "default/h100", 1.0)[0] == 4
    fed.tick(200.0)
    assert core.want(fed.state, "default/h100", 200.0)[0] == 0  # out of the window


def test_quantile() -> None:
    assert core.quantile([], 0.9) == 0
    assert core.quantile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.9) == 9
    assert core.quantile([5], 0.1) == 5


def buffer(name: str, replicas: int, pool: str = "") -> Any:
    from baton.proto.k8s import CapacityBuffer, CapacityBufferEvent

    labels = {keys.POOL: pool} if pool else {}
    declared = CapacityBuffer(namespace="ml", name=name, uid=f"u-{name}", replicas=replicas,
                              labels=labels)  # fmt: skip
    return CapacityBufferEvent(op="upsert", at=0, capacity_buffer=declared)


def test_capacity_buffers_declare_headroom_per_pool_capped() -> None:
    fed = Fed(static_nodes=1, max_idle_nodes=5)
    pool_nodes(fed, 8)
    pool_nodes(fed, 2, pool="a100")
    fed(buffer("warm", 3, pool="h100"), buffer("anywhere", 1))
    assert core.want(fed.state, "default/h100", 0)[0] == 4  # 3 for h100 + 1 for any pool
    assert core.want(fed.state, "default/a100", 0)[0] == 1  # the static 1 is as much
    fed(buffer("huge", 10, pool="h100"))
    n, why = core.want(fed.state, "default/h100", 0)
    assert n == 5 and "CapacityBuffers ask 14" in why and "capped at 5" in why
    from baton.proto.k8s import CapacityBuffer, CapacityBufferEvent

    gone = CapacityBuffer(namespace="ml", name="huge", uid="u-huge")
    fed(CapacityBufferEvent(op="delete", at=1, capacity_buffer=gone))
    assert core.want(fed.state, "default/h100", 1)[0] == 4


def test_a_balloon_the_kubelet_refused_is_removed_so_its_name_is_free_again() -> None:
    fed = Fed(static_nodes=1)
    pool_nodes(fed, 1)
    refused = pod("balloon-h100-0", namespace="baton-system", gpus=8, node_name="h100-0",
                  labels={keys.BALLOON: "true"}, phase="Failed")  # fmt: skip
    fed(PodEvent(op="upsert", at=0, pod=refused))
    out = fed.tick(1.0)
    (gone,) = [o for o in out if isinstance(o, DeletePod)]
    assert gone.pod == "balloon-h100-0"
    assert not [o for o in fed.tick(2.0) if isinstance(o, DeletePod)]  # asked once


def test_per_team_headroom_is_held_on_each_teams_own_nodes() -> None:
    fed = Fed(static_nodes=1, teams=("a", "b"))
    fed(md())
    for name, team in (("n-a1", "a"), ("n-a2", "a"), ("n-x", "")):
        built = node(name, gpus=8).in_pool("h100")
        fed(NodeEvent(op="upsert", at=0, node=(built.of_team(team) if team else built).build()))
    out = fed.tick(1.0)
    creates = [o for o in out if isinstance(o, CreatePod)]
    assert [(c.pod.node_name, c.pod.labels.get(keys.TEAM)) for c in creates] == [("n-a1", "a")]
    assert creates[0].pod.tolerations[0].effect == "NoSchedule"  # the team's taint
    rooms = {o.team: o for o in out if isinstance(o, Headroom)}
    assert (rooms["a"].held, rooms["a"].deficit) == (0, 0)
    assert rooms["b"].deficit == 1  # team b has no node here: the autoscaler's


def test_a_team_deficit_grows_the_pool_in_the_autoscaler() -> None:
    from baton.proto.autoscaler import AutoscalerPolicy, ScaledUp
    from baton.services.autoscaler import core as autoscaler

    state = autoscaler.initial(AutoscalerPolicy())
    pool = MachineDeployment(namespace="default", name="h100", uid="u", replicas=1, min_size=0,
                             max_size=4, selector={keys.POOL: "h100"})  # fmt: skip
    autoscaler.step(state, MachineDeploymentEvent(op="upsert", at=0, machine_deployment=pool), 0)
    built = node("n-0", gpus=8).in_pool("h100").build()
    autoscaler.step(state, NodeEvent(op="upsert", at=0, node=built), 0)
    _, out = autoscaler.step(
        state, Headroom(at=1, pool="default/h100", want=1, held=0, deficit=1, team="b"), 1
    )
    (up,) = [o for o in out if isinstance(o, ScaledUp)]
    assert (up.gang, up.pool, up.nodes) == ("balloon/default/h100/b", "default/h100", 1)


def test_a_teams_capacity_buffer_counts_for_that_team_only() -> None:
    from baton.proto.k8s import CapacityBuffer, CapacityBufferEvent

    fed = Fed(static_nodes=0, teams=("a", "b"))
    fed(md())
    declared = CapacityBuffer(namespace="ml", name="w", uid="u", replicas=2,
                              labels={keys.TEAM: "a"})  # fmt: skip
    fed(CapacityBufferEvent(op="upsert", at=0, capacity_buffer=declared))
    assert core.want(fed.state, "default/h100", 0, "a")[0] == 2
    assert core.want(fed.state, "default/h100", 0, "b")[0] == 0
