"""Safety rails: the level cap per domain, slow start, the pause switch, opt-out, restarts,
and the cap on nodes under test."""

from __future__ import annotations

import msgspec
import pytest

from baton.proto import keys
from baton.proto.actions import ActionResult, CreatePod, DeletePod, MarkNode
from baton.proto.health import Control, HealthPolicy, Note, StateChanged, Withheld
from baton.proto.k8s import Node, NodeEvent, PodEvent, Taint
from baton.services.health import core
from baton.services.health.core import sweeping
from baton.services.health.core.rails import Domain, Rails, SlowStart, domains
from baton.services.health.core.states import TAINTS
from tests.support.builders import node
from tests.unit.health_helpers import (
    QUIET,
    changed,
    feed,
    gpus,
    make,
    noted,
    of,
    preflight_pod,
    rack,
    report,
    running,
    states,
    tick,
    xid,
)

pytestmark = pytest.mark.unit


def nic_down(name: str, at: float) -> object:
    return report(name, at=at, nics_down=("ib0",))


def nic_up(name: str, at: float) -> object:
    return report(name, at=at)


FAST = msgspec.structs.replace(QUIET, after_s={"nic-down": 0.0}, remediation_recheck_s=1e9)


def test_forty_percent_of_a_rack_failing_holds_the_level_and_still_releases() -> None:
    state = make(rack(10), FAST)  # cap_rack 25% of 10: 2 nodes out at once
    out = feed(state, [nic_down(f"n{i}", 10.0) for i in range(4)])
    out_now = {n for n, s in states(state).items() if s in ("quarantined", "draining",
                                                             "remediating")}  # fmt: skip
    assert out_now == {"n0", "n1"}
    held = of(out, Withheld)
    assert [(w.node, w.rail, w.would) for w in held] == [
        ("n2", "rack", "quarantine"), ("n3", "rack", "quarantine")
    ]  # fmt: skip
    assert held[0].reason == ("rack /z1/b1/r1 has 2 of 10 nodes out, the cap is 2 "
                              "(25%, at least 1)")  # fmt: skip
    assert held[0].evidence[0].rule == "nic-down"
    assert not [m for m in of(out, MarkNode) if m.node in ("n2", "n3")]

    # n0's link comes back: it returns through a preflight, and n2 takes its place at once.
    out = feed(state, [nic_up("n0", 20.0)])
    assert [(c.node, c.state) for c in of(out, StateChanged)] == [
        ("n0", "validating"), ("n2", "quarantined"), ("n2", "draining"), ("n2", "remediating")
    ]  # fmt: skip
    tick(state, 21.0)
    out = feed(state, [preflight_pod(state, "n0", phase="Succeeded", at=30.0)])
    assert ("n0", "healthy") in [(c.node, c.state) for c in of(out, StateChanged)]
    assert states(state)["n3"] == "withheld"  # the level holds at 2
    assert len(state.rails.outs) == 2


def test_the_cluster_cap_and_the_narrowest_full_domain_is_named() -> None:
    nodes = [node(f"n{i}").in_rack(f"r{i % 5}", block="b1", zone="z1").build() for i in range(20)]
    state = make(nodes, msgspec.structs.replace(FAST, cap_cluster=0.1, cap_block=1.0))
    out = feed(state, [nic_down(f"n{i}", 10.0) for i in range(5)])  # one per rack
    assert len(state.rails.outs) == 2  # 10% of 20
    assert {w.rail for w in of(out, Withheld)} == {"cluster"}


def test_the_rail_counts_pools() -> None:
    nodes = [node(f"n{i}").in_pool("a" if i < 4 else "b").build() for i in range(10)]
    policy = msgspec.structs.replace(FAST, cap_pool=0.25, cap_cluster=1.0)
    state = make(nodes, policy)
    out = feed(state, [nic_down("n0", 1.0), nic_down("n1", 1.0), nic_down("n5", 1.0)])
    assert [(w.node, w.rail) for w in of(out, Withheld)] == [("n1", "pool")]


def test_rails_allowed_and_room() -> None:
    rails = Rails(policy=HealthPolicy(cap_rack=0.25, cap_min=1))
    for i in range(3):
        rails.place(f"n{i}", domains(rack="/z/b/r", block="/z/b", pool=""))
    rack_ = Domain("rack", "/z/b/r")
    assert rails.allowed(rack_) == 1  # floor(0.75) is 0; at least cap_min
    rails.set_out("n0", True)
    assert rails.room("n1")[0] == "rack"
    rails.remove("n0")
    assert rails.room("n1") == ("", "")


def test_slow_start_doubles_per_full_interval_and_starts_over() -> None:
    slow = SlowStart(policy=HealthPolicy(release_interval_s=10.0, release_max=4))
    allowed = [t for t in (0.0, 0.1, 10.0, 10.1, 10.2, 20.0, 20.1, 20.2, 20.3, 20.4)
               if slow.allow(t)]  # fmt: skip
    assert allowed == [0.0, 10.0, 10.1, 20.0, 20.1, 20.2, 20.3]
    slow.reset()  # a returned node failed again: one now, then grow again
    assert slow.allow(20.5) and not slow.allow(20.6)
    assert slow.allow(30.5) and slow.allow(30.6) and not slow.allow(30.7)
    assert slow.allow(100.0)  # an idle spell: back to one per interval
    assert not slow.allow(100.5)


def test_returning_nodes_pass_in_turn() -> None:
    policy = msgspec.structs.replace(FAST, cap_rack=1.0, cap_block=1.0, cap_cluster=1.0)
    state = make(rack(4), policy)
    feed(state, [nic_down(f"n{i}", 1.0) for i in range(3)])
    feed(state, [nic_up(f"n{i}", 2.0) for i in range(3)])
    tick(state, 3.0)
    out = feed(state, [preflight_pod(state, f"n{i}", phase="Succeeded", at=4.0) for i in range(3)])
    assert [c.node for c in of(out, StateChanged) if c.state == "healthy"] == ["n0"]
    assert [c.node for c in of(tick(state, 5.0), StateChanged)] == []
    # The first interval used its one return: the next allows two.
    assert [c.node for c in of(tick(state, 14.0), StateChanged)] == ["n1", "n2"]


def test_paused_health_takes_nothing_out_but_still_returns_nodes() -> None:
    state = make(rack(4), msgspec.structs.replace(FAST, drain_grace_s=100.0))
    feed(state, [report("n0", at=0.0, nics_down=("ib0",))])
    feed(state, [Control(at=1.0, paused=True, reason="driver rollout")])
    out = feed(state, [nic_down("n1", 2.0), nic_up("n0", 3.0)])
    assert [(w.node, w.rail, w.reason) for w in of(out, Withheld)] == [
        ("n1", "paused", "health is paused (driver rollout)")
    ]  # fmt: skip
    assert states(state)["n0"] == "validating"  # returning is never paused
    out = feed(state, [Control(at=5.0, paused=False)])
    assert ("n1", "quarantined") in [(c.node, c.state) for c in of(out, StateChanged)]


def test_paused_health_does_not_drain() -> None:
    state = make(rack(4), msgspec.structs.replace(FAST, drain_grace_s=100.0))
    feed(state, [gpus("n0", at=0.0, row_remap_pending=True)])
    feed(state, [Control(at=1.0, paused=True)])
    assert states(state)["n0"] == "remediating"  # idle: nothing to drain before the pause
    state = make(rack(4), msgspec.structs.replace(FAST, drain_grace_s=100.0))
    feed(state, [running("w", "n0"), gpus("n0", at=0.0, row_remap_pending=True)])
    feed(state, [Control(at=1.0, paused=True)])
    out = tick(state, 200.0)
    assert states(state)["n0"] == "quarantined"
    assert [(w.would, w.rail) for w in of(out, Withheld)] == [("drain", "paused")]


def test_an_opted_out_node_is_left_alone_and_its_marks_are_taken_off() -> None:
    nodes = rack(4)
    state = make(nodes)
    feed(state, [xid("n0", 79, at=1.0)])
    n0 = nodes[0]
    out = feed(state, [changed(n0, at=2.0, labels={**n0.labels, keys.HEALTH_OPT_OUT: "true"})])
    assert states(state)["n0"] == "opted-out"
    (off,) = of(out, MarkNode)
    assert (off.taints, {t.key for t in off.untaint}) == ((), {keys.UNHEALTHY, keys.DRAINING})
    assert feed(state, [xid("n0", 48, at=3.0)]) == []


def test_a_restart_resumes_each_node_from_its_annotation() -> None:
    n = rack(3)
    note = Note(state="remediating", since=5.0, reason="xid", remedy="reboot", validated=1.0)
    marked = noted(n[0], note, taints=(TAINTS[keys.UNHEALTHY], TAINTS[keys.DRAINING]),
                   labels={**n[0].labels, keys.REMEDIATION: "reboot"})  # fmt: skip
    state = make([marked, *n[1:]], at=10.0)
    rec = state.nodes["n0"]
    assert (rec.state, rec.remedy, rec.since) == ("remediating", "reboot", 5.0)
    assert state.rails.outs == {"n0"}
    assert [s.rule.name for s in rec.signals.values()] == ["restored"]  # until a preflight
    # Nothing was re-asked: the marks are there already.
    out = tick(state, 11.0)
    assert of(out, MarkNode) == []


def test_a_restart_without_an_annotation_reads_baton_taints() -> None:
    n = rack(2)
    bare = msgspec.structs.replace(n[0], taints=(TAINTS[keys.UNHEALTHY],))
    state = make([bare, n[1]], at=10.0)
    rec = state.nodes["n0"]
    assert "baton.io/unhealthy found on the node" in rec.evidence()[0].detail
    assert rec.state == "remediating"  # quarantined, and idle: on through drain at once


def test_new_nodes_are_checked_before_work_and_at_most_max_testing_at_once() -> None:
    policy = HealthPolicy(max_testing=3)
    nodes: list[Node] = [msgspec.structs.replace(n, created_at=100.0) for n in rack(5)]
    state = make(nodes, policy, at=120.0, validated=False)
    assert set(states(state).values()) == {"validating"}
    asked = [name for name, r in sorted(state.nodes.items()) if r.check and r.check.pod]
    assert asked == ["n0", "n1", "n2"]  # each once its node showed the preflight taint
    assert of(tick(state, 121.0), CreatePod) == []  # no slot is free
    feed(state, [preflight_pod(state, "n0", phase="Succeeded", at=130.0)])
    assert states(state)["n0"] == "healthy"
    assert len([r for r in state.nodes.values() if r.check and r.check.pod]) == 3


def test_new_nodes_take_a_share_of_the_cluster_in_test_slots_rechecks_only_max_testing() -> None:
    policy = HealthPolicy(max_testing=2, testing_share=0.25)
    new = [msgspec.structs.replace(n, created_at=100.0) for n in rack(40)]
    state = make(new, policy, at=120.0, validated=False)
    asked = [r for r in state.nodes.values() if r.check and r.check.pod]
    assert len(asked) == 10  # a quarter of 40 at once, not max_testing's 2

    old = msgspec.structs.replace(QUIET, max_testing=2, testing_share=0.25, recheck_days=1.0)
    state = make(rack(40), old)
    for rec in state.nodes.values():
        rec.validated, rec.recheck_at = 1.0, 1.0 + 86_400.0  # every node due, every one idle
    tick(state, 90_000.0)
    assert sorted(states(state).values()).count("validating") == 2  # in-service nodes


def test_a_new_node_that_joined_under_preflight_is_checked_without_a_write_to_mark_it() -> None:
    # kubelet's --register-with-taints=baton.io/preflight=:NoSchedule (what baton up does)
    joined = Taint(key=keys.PREFLIGHT, effect="NoSchedule")
    nodes = [msgspec.structs.replace(n, created_at=100.0, taints=(joined,)) for n in rack(3)]
    state = core.initial(HealthPolicy())
    out = feed(state, [NodeEvent(op="upsert", at=120.0, node=n) for n in nodes], 120.0)
    assert of(out, MarkNode) == []  # nothing to mark: the taint is on already
    assert sorted(p.pod.node_name for p in of(out, CreatePod)) == ["n0", "n1", "n2"]
    assert state.nodes["n0"].state == "validating"
    assert "joined under preflight" in state.nodes["n0"].reason

    assert state.nodes["n0"].check.why == "first check"  # type: ignore[union-attr]

    passed = [preflight_pod(state, n, phase="Succeeded", at=130.0) for n in ("n0", "n1", "n2")]
    out = feed(state, passed)
    marks = of(out, MarkNode)  # the one write each that lets work land
    assert [(m.node, [t.key for t in m.untaint]) for m in marks] == [
        (n, [keys.PREFLIGHT]) for n in ("n0", "n1", "n2")
    ]
    assert set(states(state).values()) == {"healthy"}  # new, not returning: no slow start
    swept = of(out, DeletePod)  # the pods that passed hold nothing: swept after the binds
    assert len(swept) == 3 and {d.priority for d in swept} == {"balloon"}
    assert {m.priority for m in marks} == {"validation"}


def test_passed_preflight_pods_are_swept_a_few_at_a_time_and_after_a_restart() -> None:
    """Asked all at once (7,500 on a new cluster) and waiting behind the binds for tokens,
    the sweeps filled the actuator's delivery window that the next checks and admission's
    marks needed: at most ``sweeping.AT_ONCE`` are asked, the next when one is answered."""
    joined = Taint(key=keys.PREFLIGHT, effect="NoSchedule")
    nodes = [msgspec.structs.replace(n, created_at=100.0, taints=(joined,)) for n in rack(40)]
    state = core.initial(HealthPolicy(testing_share=1.0))
    feed(state, [NodeEvent(op="upsert", at=120.0, node=n) for n in nodes], 120.0)
    passed = [preflight_pod(state, n.name, phase="Succeeded", at=130.0) for n in nodes]
    swept = of(feed(state, passed), DeletePod)
    assert len(swept) == sweeping.AT_ONCE == 32
    assert set(states(state).values()) == {"healthy"}  # the marks did not wait for them
    answered = [ActionResult(action_id=d.id, action_type="action.delete-pod.v1", by="health",
                             at=131.0, outcome="applied") for d in swept[:3]]  # fmt: skip
    more = of(feed(state, answered), DeletePod)
    assert len(more) == 3 and not {d.pod for d in more} & {d.pod for d in swept}
    gone = [msgspec.structs.replace(e, op="delete") for e in passed]  # the rest, deleted
    assert of(feed(state, gone), DeletePod) == []
    assert not state.sweeps

    restarted = core.initial(HealthPolicy())  # what a last run left is swept when seen
    left = msgspec.structs.replace(passed[0].pod, name="preflight-n0-old")
    out = feed(restarted, [PodEvent(op="upsert", at=200.0, pod=left)])
    assert [(d.pod, d.priority) for d in of(out, DeletePod)] == [("preflight-n0-old", "balloon")]


def test_a_node_seen_long_after_it_joined_is_not_taken_out_for_its_first_check() -> None:
    nodes = [msgspec.structs.replace(n, created_at=0.0) for n in rack(2)]
    state = make(nodes, HealthPolicy(), at=10_000.0, validated=False)
    assert set(states(state).values()) == {"healthy"}
    assert core.wants_tick(state, 10_000.0)  # but it is due for a check when idle
