"""The autoscaler core: verdicts and pools in, whole-gang scale-ups, refusals, reverts and
one-machine scale-downs out."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from baton.proto import keys
from baton.proto.actions import ActionResult, MarkNode, ScaleMachineDeployment
from baton.proto.admission import GangAdmitted, GangQueued
from baton.proto.autoscaler import (
    AutoscalerPolicy,
    ScaledDown,
    ScaledUp,
    ScaleRefused,
    ScaleReverted,
)
from baton.proto.balloon import Headroom
from baton.proto.k8s import MachineDeployment, MachineDeploymentEvent, Node, NodeEvent, PodEvent
from baton.proto.placement import GangPlaced, GangUnschedulable, Need
from baton.proto.runner import Tick
from baton.services.autoscaler import core
from tests.support.builders import balloon, node, pod

pytestmark = pytest.mark.unit
GPU = keys.GPU
SHAPE = {GPU: 8}
POLICY = AutoscalerPolicy(
    max_joining=8, provisioning_timeout_s=100, backoff_s=50, unneeded_s=30, deletion_timeout_s=60
)


def md(name: str, replicas: int, *, lo: int | None = 0, hi: int | None = 10, **kw: Any) -> Any:
    return MachineDeploymentEvent(
        op="upsert",
        at=0.0,
        machine_deployment=MachineDeployment(
            namespace="default", name=name, uid=f"uid-{name}", replicas=replicas,
            min_size=lo, max_size=hi, selector={keys.POOL: name}, **kw,
        ),
    )  # fmt: skip


def gpu_node(name: str, pool: str = "h100", *, ready: bool = True, block: str = "b1") -> Node:
    b = node(name, gpus=8).in_pool(pool).in_block(block, zone="z1")
    return (b if ready else b.not_ready()).build()


def up(n: Node) -> NodeEvent:
    return NodeEvent(op="upsert", at=0.0, node=n)


def verdict(gang: str, nodes: int, *, within: str = "", **kw: Any) -> GangUnschedulable:
    return GangUnschedulable(
        gang=gang, at=0.0, reason="0 of 4 members fit",
        need=Need(nodes=nodes, shape=SHAPE, within=within), members=nodes, **kw,
    )  # fmt: skip


class Fed:
    """Feeds the core. A verdict (or a balloon deficit) is decided on at once; what that
    decided is returned with the next ``tick``'s outputs (what happened "by then")."""

    def __init__(self, policy: AutoscalerPolicy = POLICY) -> None:
        self.state = core.initial(policy)
        self.unseen: list[Any] = []

    def __call__(self, *events: Any, at: float = 0.0) -> list[Any]:
        out: list[Any] = []
        for event in events:
            _, got = core.step(self.state, event, at)
            if isinstance(event, GangUnschedulable | Headroom):
                self.unseen += got
            else:
                out += got
        return out

    def tick(self, at: float) -> list[Any]:
        out, self.unseen = self.unseen, []
        return out + self(Tick(at=at), at=at)


def of(outputs: list[Any], kind: type) -> list[Any]:
    return [o for o in outputs if isinstance(o, kind)]


def cluster(fed: Fed, nodes: int = 2, *, replicas: int | None = None, **kw: Any) -> None:
    fed(md("h100", nodes if replicas is None else replicas, **kw))
    fed(*(up(gpu_node(f"gpu-{i}")) for i in range(nodes)))
    # keep the nodes busy, so only scale-ups are in play
    fed(*(PodEvent(op="upsert", at=0, pod=pod(f"w-{i}", gpus=8, node_name=f"gpu-{i}",
                                              phase="Running")) for i in range(nodes)))  # fmt: skip


def test_a_gang_grows_its_pool_by_exactly_its_need() -> None:
    fed = Fed()
    cluster(fed)
    _, out = core.step(fed.state, verdict("ml/job", 4), 1.0)  # decided on arrival
    out = list(out)
    (scale,) = of(out, ScaleMachineDeployment)
    (event,) = of(out, ScaledUp)
    assert (scale.name, scale.replicas, scale.priority) == ("h100", 6, "scaling")
    assert (event.gang, event.pool, event.nodes, event.replicas) == ("ml/job", "default/h100", 4, 6)
    assert fed.tick(2.0) == []  # in flight: not asked twice
    assert fed.state.partial == 0


def test_the_plan_ends_when_the_nodes_are_ready() -> None:
    fed = Fed()
    cluster(fed)
    fed(verdict("ml/job", 2))
    fed.tick(1.0)
    fed(md("h100", 4), *(up(gpu_node(f"new-{i}")) for i in range(2)))
    assert fed.tick(5.0) == []
    assert not fed.state.plans and "ml/job" not in fed.state.waiting


@pytest.mark.parametrize(
    ("pool", "need", "reason"),
    [
        ({"hi": 5}, 4, "max size 5 (at 2, needs 4 more)"),
        ({"reason": "QuotaExceeded", "message": "quota of 2"}, 1, "cloud quota reached"),
        ({"lo": None}, 1, "not autoscaled"),
    ],
)
def test_no_partial_scale_up_the_reason_is_published(
    pool: dict[str, Any], need: int, reason: str
) -> None:
    fed = Fed()
    cluster(fed, **pool)
    fed(verdict("ml/job", need))
    out = fed.tick(1.0)
    assert not of(out, ScaleMachineDeployment)
    (refused,) = of(out, ScaleRefused)
    assert reason in refused.reason and refused.gang == "ml/job"
    assert fed.tick(2.0) == []  # the same reason is not published again


def test_no_pool_of_the_shape() -> None:
    fed = Fed()
    cluster(fed)
    fed(GangUnschedulable(gang="ml/big", at=0, reason="r", need=Need(nodes=1, shape={GPU: 16})))
    (refused,) = fed.tick(1.0)
    assert isinstance(refused, ScaleRefused) and "no pool has nodes of the shape" in refused.reason


@pytest.mark.parametrize(
    "events",
    [
        [GangQueued(gang="ml/job", team="a", reason="over quota", position=1, at=0)],
        [],  # fits_when_free, below
    ],
)
def test_never_for_quota_waiting_or_fits_when_free(events: list[Any]) -> None:
    fed = Fed()
    cluster(fed)
    fed(*events, verdict("ml/job", 2, fits_when_free=not events))
    out = fed.tick(1.0)
    assert not of(out, ScaleMachineDeployment)
    assert of(out, ScaleRefused)
    if events:  # admitted later: now it may grow the pool
        fed(GangAdmitted(gang="ml/job", team="a", gpus=16, at=1))
        assert of(fed.tick(2.0), ScaleMachineDeployment)


def test_within_a_domain_only_a_pool_in_one_domain_grows() -> None:
    fed = Fed()
    fed(md("h100", 2), up(gpu_node("a", block="b1")), up(gpu_node("b", block="b2")))
    fed(verdict("ml/job", 2, within=keys.BLOCK))
    (refused,) = fed.tick(1.0)
    assert "spans several" in refused.reason
    fed2 = Fed()
    fed2(md("h100", 2), up(gpu_node("a", block="b1")), up(gpu_node("b", block="b1")))
    fed2(verdict("ml/job", 2, within=keys.BLOCK))
    (event,) = of(fed2.tick(1.0), ScaledUp)
    assert (event.within, event.domain) == (keys.BLOCK, "b1")


def test_joins_are_paced_cluster_wide() -> None:
    fed = Fed(msgspec.structs.replace(POLICY, max_joining=5))
    cluster(fed, hi=100)
    fed(verdict("ml/a", 4, ), verdict("ml/b", 3), at=0)  # fmt: skip
    out = fed.tick(1.0)
    assert [u.gang for u in of(out, ScaledUp)] == ["ml/a"]
    (paced,) = of(out, ScaleRefused)
    assert paced.gang == "ml/b" and "paced" in paced.reason
    fed(md("h100", 6), *(up(gpu_node(f"new-{i}")) for i in range(4)))
    assert not of(fed.tick(2.0), ScaledUp)  # joined, but 4 were asked for in this minute
    assert [u.gang for u in of(fed.tick(61.0), ScaledUp)] == ["ml/b"]


def test_a_gang_larger_than_the_budget_goes_alone() -> None:
    fed = Fed(msgspec.structs.replace(POLICY, max_joining=2))
    cluster(fed, hi=100)
    fed(verdict("ml/huge", 10))
    (event,) = of(fed.tick(1.0), ScaledUp)
    assert event.nodes == 10


def test_a_scale_up_without_ready_nodes_is_reverted_and_the_pool_backs_off() -> None:
    fed = Fed()
    cluster(fed)
    fed(verdict("ml/job", 3))
    fed.tick(1.0)
    fed(md("h100", 5), up(gpu_node("new-0")), up(gpu_node("new-1", ready=False)))
    assert fed.tick(50.0) == []
    out = fed.tick(101.0)
    (scale,) = of(out, ScaleMachineDeployment)
    (reverted,) = of(out, ScaleReverted)
    assert scale.replicas == 3 and reverted.nodes == 2 and "not Ready after 100s" in reverted.reason
    (refused,) = of(out, ScaleRefused)  # the gang still waits; the pool backs off
    assert "backing off" in refused.reason
    fed(md("h100", 3))
    assert not of(fed.tick(102.0), ScaledUp)
    assert of(fed.tick(152.0), ScaledUp)  # backoff over


def test_quota_exceeded_reverts_at_once() -> None:
    fed = Fed()
    cluster(fed)
    fed(verdict("ml/job", 3))
    fed.tick(1.0)
    fed(md("h100", 5, reason="QuotaExceeded", message="3 of 5 machines cannot be created"))
    (reverted,) = of(fed.tick(2.0), ScaleReverted)
    assert "quota" in reverted.reason and reverted.nodes == 3


def test_a_placed_gang_is_forgotten() -> None:
    fed = Fed()
    cluster(fed, hi=2)
    fed(verdict("ml/job", 3))
    assert of(fed.tick(1.0), ScaleRefused)
    fed(GangPlaced(gang="ml/job", at=2, action_id="b", bindings=()))
    assert fed.tick(3.0) == [] and not fed.state.waiting


def test_balloon_deficit_grows_its_pool() -> None:
    fed = Fed()
    cluster(fed)
    fed(Headroom(pool="default/h100", want=2, held=0, deficit=2, at=0))
    (event,) = of(fed.tick(1.0), ScaledUp)
    assert (event.gang, event.nodes) == ("balloon/default/h100", 2)


def idle_cluster(fed: Fed, *, lo: int = 1) -> None:
    fed(md("h100", 3, lo=lo), *(up(gpu_node(f"gpu-{i}")) for i in range(3)))
    fed(PodEvent(op="upsert", at=0, pod=pod("w", gpus=8, node_name="gpu-0", phase="Running")))
    fed(PodEvent(op="upsert", at=0, pod=balloon("hold", node_name="gpu-1")))


def test_idle_nodes_go_one_machine_at_a_time_after_the_unneeded_time() -> None:
    fed = Fed()
    idle_cluster(fed)
    assert core.wants_tick(fed.state, 0.0)
    assert fed.tick(1.0) == []
    assert fed.tick(20.0) == []
    (mark,) = fed.tick(31.0)
    # gpu-0 runs work, gpu-1 holds a balloon: only gpu-2 is idle
    assert isinstance(mark, MarkNode) and mark.node == "gpu-2"
    assert mark.annotations == {keys.DELETE_MACHINE: "true"}
    assert fed.tick(32.0) == []  # one at a time: waits for the mark
    result = ActionResult(action_id=mark.id, action_type="action.mark-node.v1", by="actuator",
                          at=33, outcome="applied")  # fmt: skip
    out = fed(result, at=33)
    (scale,) = of(out, ScaleMachineDeployment)
    (down,) = of(out, ScaledDown)
    assert scale.replicas == 2 and down.node == "gpu-2" and down.idle_s == 30
    fed(NodeEvent(op="delete", at=34, node=gpu_node("gpu-2")), md("h100", 2))
    assert fed.state.deletion is None
    assert fed.tick(100.0) == []  # gpu-0 and gpu-1 are busy


def test_never_below_min_size() -> None:
    fed = Fed()
    idle_cluster(fed, lo=3)
    assert not core.wants_tick(fed.state, 0.0)
    assert fed.tick(1.0) == [] and fed.tick(100.0) == []


def test_a_node_that_gets_work_is_no_longer_idle() -> None:
    fed = Fed()
    idle_cluster(fed)
    fed.tick(1.0)
    fed(PodEvent(op="upsert", at=10, pod=pod("w2", gpus=8, node_name="gpu-2", phase="Running")))
    assert fed.tick(40.0) == []


def test_no_scale_down_while_the_pool_grows() -> None:
    fed = Fed()
    idle_cluster(fed)
    fed(verdict("ml/job", 2))
    out = fed.tick(1.0)
    assert of(out, ScaledUp)
    assert not of(fed.tick(40.0), MarkNode)


def test_subjects_of_gangs_and_balloon_deficits() -> None:
    from baton.proto.autoscaler import subject

    up = ScaledUp(gang="balloon/default/h100", pool="default/h100", nodes=1, replicas=3,
                  action_id="a", at=0)  # fmt: skip
    assert subject("c1", up) == "baton.c1.autoscaler.up.balloon.default.h100"
    refused = ScaleRefused(gang="ml/job", nodes=1, reason="r", at=0)
    assert subject("c1", refused) == "baton.c1.autoscaler.refused.ml.job"


def test_health_replace_is_delete_and_replace() -> None:
    from baton.proto.autoscaler import NodeReplaced
    from baton.proto.health import Remediate

    fed = Fed()
    idle_cluster(fed, lo=3)  # at min size: replacing still works (the pool grows back)
    fed(Remediate(node="gpu-0", at=1, remedy="reboot"))
    assert core.wants_tick(fed.state, 1.0) is False  # a reboot is a fixer's job
    fed(Remediate(node="gpu-0", at=2, remedy="replace"))
    (mark,) = fed.tick(3.0)
    assert isinstance(mark, MarkNode) and mark.node == "gpu-0" and mark.priority == "health"
    result = ActionResult(action_id=mark.id, action_type="action.mark-node.v1", by="actuator",
                          at=4, outcome="applied")  # fmt: skip
    out = fed(result, at=4)
    (down,) = of(out, ScaledDown)
    assert down.replace and of(out, ScaleMachineDeployment)[0].replicas == 2
    out = fed(NodeEvent(op="delete", at=5, node=gpu_node("gpu-0")), at=5)
    (scale,) = of(out, ScaleMachineDeployment)
    (back,) = of(out, NodeReplaced)
    assert scale.replicas == 3 and back.node == "gpu-0" and back.pool == "default/h100"


def test_the_pool_grown_is_one_whose_nodes_take_the_gangs_pods() -> None:
    fed = Fed()
    fed(md("a", 1), md("b", 1), up(gpu_node("a-0", "a")), up(gpu_node("b-0", "b")))
    members = [pod(f"job-{i}", group="job", namespace="ml", gpus=8,
                   node_selector={keys.POOL: "b"}) for i in range(2)]  # fmt: skip
    fed(*(PodEvent(op="upsert", at=0, pod=p) for p in members))
    (event,) = of(fed(verdict("ml/job", 2), at=1.0) or fed.tick(1.0), ScaledUp)
    assert event.pool == "default/b"  # "a" sorts first and has the same shape


def test_a_tainted_pool_is_not_grown_for_pods_that_do_not_tolerate_it() -> None:
    fed = Fed()
    tainted = node("t-0", gpus=8).in_pool("t").tainted("dedicated", "x").build()
    fed(md("t", 1), up(tainted))
    fed(PodEvent(op="upsert", at=0, pod=pod("solo", namespace="ml", gpus=8)))
    (refused,) = of(fed.tick(1.0) + fed(verdict("ml/solo", 1), at=1.0) + fed.tick(2.0),
                    ScaleRefused)  # fmt: skip
    assert "do not take the gang's pods" in refused.reason


def test_the_machine_behind_the_node_is_marked_too() -> None:
    from baton.proto.actions import Annotate

    fed = Fed()
    fed(md("h100", 2, lo=1))
    bare = gpu_node("gpu-0")
    fed(up(msgspec.structs.replace(bare, annotations={keys.MACHINE: "h100-abc12"})))
    fed(up(gpu_node("gpu-1")))
    fed(PodEvent(op="upsert", at=0, pod=pod("w", gpus=8, node_name="gpu-1", phase="Running")))
    fed.tick(1.0)
    out = fed.tick(40.0)
    (machine,) = of(out, Annotate)
    assert (machine.kind, machine.namespace, machine.name) == ("Machine", "default", "h100-abc12")
    assert machine.annotations == {keys.DELETE_MACHINE: "true"}
    assert of(out, MarkNode)[0].node == "gpu-0"
    off = Fed(msgspec.structs.replace(POLICY, mark_machines=False))
    off(md("h100", 2, lo=1), up(msgspec.structs.replace(bare, annotations={keys.MACHINE: "m"})))
    off.tick(1.0)
    assert not of(off.tick(40.0), Annotate)


def test_a_scale_request_that_failed_is_not_reverted_and_the_pool_backs_off() -> None:
    fed = Fed()
    cluster(fed)
    fed(verdict("ml/job", 2))
    (scale,) = of(fed.tick(1.0), ScaleMachineDeployment)
    failed = ActionResult(action_id=scale.id, action_type="action.scale.v1", by="actuator",
                          at=2, outcome="failed", error="403 forbidden")  # fmt: skip
    (refused,) = fed(failed, at=2)
    assert isinstance(refused, ScaleRefused) and "403 forbidden" in refused.reason
    assert not fed.state.plans and fed.state.asked == {}
    assert not of(fed.tick(200.0), ScaleReverted)  # nothing to take back


def test_daemonset_pods_do_not_keep_a_node_busy() -> None:
    fed = Fed()
    idle_cluster(fed)
    agent = msgspec.structs.replace(pod("agent-x", node_name="gpu-2", phase="Running"), daemon=True)
    fed(PodEvent(op="upsert", at=0, pod=agent))
    fed.tick(1.0)
    (mark,) = fed.tick(31.0)
    assert isinstance(mark, MarkNode) and mark.node == "gpu-2"
