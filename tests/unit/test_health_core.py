"""The health core, table-driven where it can be: evidence in, moves, marks and events out."""

from __future__ import annotations

import msgspec
import pytest

from baton.proto import keys
from baton.proto.actions import (
    ActionResult,
    Cordon,
    CreatePod,
    DeletePod,
    Evict,
    MarkNode,
    SetTaint,
)
from baton.proto.health import HealthPolicy, Heard, Note, Remediate, Silence, StateChanged
from baton.proto.k8s import NodeEvent
from baton.proto.runner import Tick
from baton.services.health import core
from baton.services.health.core import states
from tests.unit.health_helpers import (
    QUIET,
    changed,
    feed,
    gone,
    gpus,
    make,
    marked,
    not_ready,
    of,
    preflight_pod,
    rack,
    ready,
    report,
    running,
    tick,
    xid,
)

pytestmark = pytest.mark.unit


def taints(outputs: list[object]) -> list[tuple[str, str, bool]]:
    """(node, taint key, present) for every taint change, in the order asked."""
    found = []
    for m in of(outputs, MarkNode):
        found += [(m.node, t.key, True) for t in m.taints]
        found += [(m.node, t.key, False) for t in m.untaint]
    return found


def labels(outputs: list[object]) -> list[dict[str, str | None]]:
    return [m.labels for m in of(outputs, MarkNode) if m.labels]


def moves(outputs: list[object]) -> list[tuple[str, str]]:
    return [(c.node, c.state) for c in of(outputs, StateChanged)]


def test_xid_79_on_an_idle_node_goes_straight_to_remediation() -> None:
    state = make(rack(4))
    out = feed(state, [xid("n0", 79, at=10.0, gpu=3)])
    assert moves(out) == [("n0", "quarantined"), ("n0", "draining"), ("n0", "remediating")]
    # One patch: the quarantine and drain taints together, never half-marked.
    assert taints(out) == [
        ("n0", keys.UNHEALTHY, True), ("n0", keys.DRAINING, True)
    ]  # fmt: skip
    assert labels(out) == [{keys.REMEDIATION: "reboot"}]
    (fix,) = of(out, Remediate)
    assert (fix.remedy, [e.rule for e in fix.evidence]) == ("reboot", ["xid-79"])
    (note,) = of(out, MarkNode)  # one API write for the whole decision
    assert note.node == "n0"
    written = msgspec.json.decode(note.annotations[keys.HEALTH] or "", type=Note)
    assert (written.state, written.by, written.since) == ("remediating", "baton-health", 10.0)
    assert written.evidence[0].detail == "GPU 3 (0000:3b:00): Xid 79"
    assert (note.priority, note.by) == ("health", "health")
    assert not of(out, SetTaint)


def test_an_xid_on_a_mig_instance_quarantines_its_node_as_its_gpus_would() -> None:
    state = make(rack(2))
    event = msgspec.structs.replace(xid("n0", 48, at=10.0, gpu=3), gpu_instance=9)
    out = feed(state, [event])
    assert moves(out)[0] == ("n0", "quarantined")
    (signal,) = state.nodes["n0"].signals.values()
    assert signal.detail == "GPU 3 (0000:3b:00), MIG instance 9: Xid 48"
    again = msgspec.structs.replace(event, gpu_instance=10, at=11.0)  # another part, same GPU
    assert feed(state, [again]) == [] and len(state.nodes["n0"].signals) == 1


def test_an_application_xid_moves_nothing() -> None:
    state = make(rack(2))
    assert feed(state, [xid("n0", 13, at=1.0), xid("n0", 43, at=2.0)]) == []


def test_not_ready_counts_after_its_duration_and_a_blip_does_not() -> None:
    nodes = rack(2)
    state = make(nodes)
    out = feed(state, [not_ready(nodes[0], at=100.0)])
    assert moves(out) == [("n0", "suspect")] and taints(out) == []
    assert core.wants_tick(state, 219.0) is False and core.wants_tick(state, 220.0)
    assert moves(tick(state, 219.0)) == []
    assert moves(tick(state, 220.0))[0] == ("n0", "quarantined")
    # n1 is back within the 120 s: never counted.
    feed(state, [not_ready(nodes[1], at=300.0)])
    out = feed(state, [ready(nodes[1], at=400.0)]) + tick(state, 500.0)
    assert ("n1", "healthy") in moves(out) and not [t for t in taints(out) if t[0] == "n1"]


def test_durations_are_settings() -> None:
    nodes = rack(1)
    state = make(nodes, msgspec.structs.replace(QUIET, after_s={"Ready": 5.0}))
    feed(state, [not_ready(nodes[0], at=0.0)])
    assert moves(tick(state, 5.0))[0] == ("n0", "quarantined")


def test_a_flapping_nic_counts_at_its_third_drop_and_stays_counted() -> None:
    state = make(rack(4))
    out: list[object] = []
    for i in range(3):
        out += feed(state, [report("n0", at=100.0 * i, nics_down=("ib0",))])
        out += feed(state, [report("n0", at=100.0 * i + 5, nics_down=())])
    first = moves(out).index(("n0", "quarantined"))
    assert moves(out)[:first] == [("n0", "suspect"), ("n0", "healthy")] * 2
    assert "flapping" in [e.rule for e in of(out, StateChanged)[first].evidence]
    assert state.nodes["n0"].state == "remediating"  # the NIC is up, the flapping is latched


def test_a_checkpoint_grace_before_draining_then_remediation_once_the_pods_left() -> None:
    state = make(rack(4), msgspec.structs.replace(QUIET, drain_grace_s=300.0))
    job = running("w-0", "n0")
    feed(state, [job])
    out = feed(state, [gpus("n0", at=10.0, row_remap_pending=True)])
    assert moves(out) == [("n0", "quarantined")]
    assert moves(tick(state, 309.0)) == []
    out = tick(state, 310.0)
    assert moves(out) == [("n0", "draining")] and taints(out) == [("n0", keys.DRAINING, True)]
    out = feed(state, [gone(job.pod, at=320.0)])
    assert moves(out) == [("n0", "remediating")]


def test_a_broken_job_drains_at_once() -> None:
    state = make(rack(4))
    feed(state, [running("w-0", "n0")])
    out = feed(state, [gpus("n0", at=10.0, present=False)])
    assert moves(out) == [("n0", "quarantined"), ("n0", "draining")]


def test_pods_that_do_not_leave_are_given_up_on_after_the_drain_timeout() -> None:
    policy = msgspec.structs.replace(QUIET, drain_timeout_s=900.0)
    state = make(rack(4), policy)
    feed(state, [running("w-0", "n0")])
    feed(state, [gpus("n0", at=0.0, present=False)])
    assert moves(tick(state, 899.0)) == []
    assert moves(tick(state, 900.0)) == [("n0", "remediating")]


def remediated(policy: HealthPolicy = QUIET) -> core.State:
    state = make(rack(4), policy)
    feed(state, [gpus("n0", at=0.0, present=False), xid("n0", 79, at=0.0)])
    assert state.nodes["n0"].state == "remediating"
    return state


def test_a_remediated_node_returns_after_a_passing_preflight() -> None:
    state = remediated()
    feed(state, [gpus("n0", at=50.0)])  # the GPU is back; the Xid stays latched
    assert state.nodes["n0"].state == "remediating"
    out = tick(state, 600.0)  # remediation_recheck_s
    assert moves(out) == [("n0", "validating")]
    assert taints(out) == [("n0", keys.PREFLIGHT, True), ("n0", keys.UNHEALTHY, False),
                           ("n0", keys.DRAINING, False)]  # fmt: skip
    assert labels(out) == [{keys.REMEDIATION: None}]
    (ask,) = of(out, CreatePod)
    spec = ask.pod
    assert (spec.node_name, spec.restart_policy, spec.labels) == (
        "n0", "Never", {keys.PREFLIGHT: "true"}
    )  # fmt: skip
    assert spec.command == ("dcgmi", "diag", "-r", "2") and spec.requests == {keys.GPU: 8}
    assert {t.key for t in spec.tolerations} == set(keys.HEALTH_TAINTS)
    out = feed(state, [preflight_pod(state, "n0", phase="Succeeded", at=700.0)])
    assert moves(out) == [("n0", "healthy")]
    assert taints(out) == [("n0", keys.PREFLIGHT, False)]
    assert [d.pod for d in of(out, DeletePod)] == [spec.name]
    assert state.nodes["n0"].validated == 700.0 and state.nodes["n0"].clear


def test_the_preflight_pod_is_asked_only_once_the_node_shows_its_preflight_taint() -> None:
    """A gang placed before the gang service saw the taint is then refused by the
    actuator (the taint is on the API before the pod is created), never bound beside
    the preflight pod."""
    state = remediated()
    feed(state, [gpus("n0", at=50.0)])
    out = feed(state, [Tick(at=600.0, service="health")], echo=False)  # not applied yet
    assert moves(out) == [("n0", "validating")] and of(out, CreatePod) == []
    assert of(tick(state, 601.0), CreatePod) == []  # time alone does not ask for it
    assert core.wants_tick(state, 601.0) is False
    n0 = state.view.nodes["n0"].node
    other = feed(state, [changed(n0, at=602.0, labels={**n0.labels, "x": "y"})], echo=False)
    assert of(other, CreatePod) == []  # a node event without the taint
    (shown,) = marked(state, out, at=603.0)
    (ask,) = of(feed(state, [shown]), CreatePod)
    assert ask.pod.node_name == "n0"


def test_a_mark_that_failed_is_asked_again_and_the_preflight_follows() -> None:
    """The actuator gave up on the MarkNode that puts the preflight taint on: without
    asking again the node would wait in validating for ever (its pod is asked for only
    once the taint shows)."""
    state = remediated()
    feed(state, [gpus("n0", at=50.0)])
    out = feed(state, [Tick(at=600.0, service="health")], echo=False)
    (lost,) = of(out, MarkNode)
    assert moves(out) == [("n0", "validating")]
    failed = ActionResult(action_id=lost.id, action_type="action.mark-node.v1", by="actuator",
                          at=601.0, outcome="failed", error="conflict, 5 tries")  # fmt: skip
    assert feed(state, [failed], echo=False) == []
    assert of(tick(state, 620.0), MarkNode) == []  # not at once: the API had just failed
    assert core.wants_tick(state, 631.0)
    again = feed(state, [Tick(at=631.0, service="health")], echo=False)
    (mark,) = of(again, MarkNode)
    assert keys.PREFLIGHT in {t.key for t in mark.taints}  # whole, not a diff of the lost one
    assert mark.labels == {keys.REMEDIATION: None}  # the label it wants, again
    (shown,) = marked(state, again, at=632.0)
    (ask,) = of(feed(state, [shown]), CreatePod)
    assert ask.pod.node_name == "n0"


def test_a_stale_or_applied_mark_is_not_asked_again() -> None:
    state = remediated()
    feed(state, [gpus("n0", at=50.0)])
    (mark,) = of(feed(state, [Tick(at=600.0, service="health")], echo=False), MarkNode)
    stale = ActionResult(action_id=mark.id, action_type="action.mark-node.v1", by="actuator",
                         at=601.0, outcome="stale")  # fmt: skip
    feed(state, [stale], echo=False)
    assert of(tick(state, 700.0), MarkNode) == []


def test_the_fixer_taking_the_label_off_starts_the_preflight_at_once() -> None:
    state = remediated()
    n0 = state.view.nodes["n0"].node
    assert n0.labels[keys.REMEDIATION] == "reboot"  # the actuator put it on, the node shows it
    fixed = {k: v for k, v in n0.labels.items() if k != keys.REMEDIATION}
    out = feed(state, [changed(n0, at=20.0, labels=fixed), gpus("n0", at=20.0)])
    assert ("n0", "validating") in moves(out)


def test_a_failing_preflight_goes_back_out_and_a_second_failure_asks_for_replacement() -> None:
    state = remediated()
    feed(state, [gpus("n0", at=50.0)])
    tick(state, 600.0)
    out = feed(state, [preflight_pod(state, "n0", phase="Failed", at=700.0)])
    assert moves(out)[0] == ("n0", "quarantined")
    assert [e.rule for e in of(out, StateChanged)[0].evidence][-1] == "preflight"
    (fix,) = of(out, Remediate)
    assert fix.remedy == "replace"  # a reboot did not help


def test_a_preflight_that_never_finishes_fails_the_node() -> None:
    policy = msgspec.structs.replace(QUIET, preflight_timeout_s=100.0)
    state = remediated(policy)
    feed(state, [gpus("n0", at=50.0)])
    tick(state, 600.0)
    feed(state, [preflight_pod(state, "n0", phase="Running", at=601.0)])
    assert moves(tick(state, 699.0)) == []
    out = tick(state, 700.0)
    assert moves(out)[0] == ("n0", "quarantined")
    assert "did not finish within 100 s" in of(out, StateChanged)[0].reason


def test_a_preflight_pod_that_never_appears_is_asked_again_not_held_against_the_node() -> None:
    policy = msgspec.structs.replace(QUIET, preflight_timeout_s=100.0)
    state = remediated(policy)
    feed(state, [gpus("n0", at=50.0)])
    (first,) = of(tick(state, 600.0), CreatePod)
    result = ActionResult(
        action_id=first.id,
        action_type="action.create-pod.v1",
        by="actuator",
        at=601.0,
        outcome="failed",
        error='namespaces "baton-system" not found',
    )
    assert moves(feed(state, [result])) == []
    assert of(tick(state, 603.0), CreatePod) == []  # backing off
    (second,) = of(tick(state, 606.0), CreatePod)
    assert second.pod.name != first.pod.name
    # Asked, and never seen: after the timeout it is asked for once more, and the late
    # one (if it ever comes) is deleted.
    out = tick(state, 706.0)
    (third,) = of(out, CreatePod)
    assert third.pod.name not in (first.pod.name, second.pod.name)
    assert [d.pod for d in of(out, DeletePod)] == [second.pod.name]
    assert state.nodes["n0"].state == "validating"


def test_a_heartbeat_silence_quarantines_and_its_return_releases_through_a_preflight() -> None:
    state = make(rack(4))
    out = feed(state, [Silence(node="n1", at=100.0, last_beat=30.0, after_s=60.0)])
    assert moves(out)[0] == ("n1", "quarantined")
    assert "no heartbeat for 70 s" in of(out, StateChanged)[0].reason
    out = feed(state, [Heard(node="n1", at=200.0, last_beat=199.0)])
    assert moves(out) == [("n1", "validating")]  # healthy evidence: every signal ended


def test_never_cordons_or_uncordons() -> None:
    nodes = rack(4)
    state = make(nodes)
    out = feed(state, [changed(nodes[0], at=1.0, unschedulable=True)])  # a person cordons n0
    out += feed(state, [not_ready(nodes[0], at=2.0)]) + tick(state, 200.0)
    out += feed(state, [ready(nodes[0], at=300.0)]) + tick(state, 301.0)
    out += feed(state, [preflight_pod(state, "n0", phase="Succeeded", at=310.0)])
    assert state.nodes["n0"].state == "healthy"
    assert of(out, Cordon) == []
    assert {t[1] for t in taints(out)} <= set(keys.HEALTH_TAINTS)


def test_states_move_only_along_the_table() -> None:
    with pytest.raises(states.BadMove):
        states.check_move("healthy", "remediating")
    for t in states.TRANSITIONS:
        assert t.to in states.MARKS and all(s in states.MARKS for s in t.sources)


def test_the_same_inputs_give_the_same_outputs() -> None:
    def run() -> list[object]:
        nodes = rack(6)
        state = make(nodes)
        events = [xid("n0", 79, at=1.0), not_ready(nodes[1], at=2.0), gpus("n2", at=3.0,
                  ecc_volatile_dbe=1), report("n3", at=4.0, nics_down=("ib0",))]  # fmt: skip
        return feed(state, events) + tick(state, 200.0) + tick(state, 900.0)

    assert msgspec.json.encode(run()) == msgspec.json.encode(run())


def test_a_deleted_node_leaves_no_trace() -> None:
    nodes = rack(4)
    state = make(nodes)
    feed(state, [xid("n0", 79, at=1.0)])
    feed(state, [NodeEvent(op="delete", at=2.0, node=nodes[0])])
    assert "n0" not in state.nodes and not state.rails.outs


def test_evicting_balloons_before_a_periodic_check() -> None:
    policy = msgspec.structs.replace(QUIET, recheck_days=1.0)
    state = make(rack(2), policy)
    for rec in state.nodes.values():
        rec.validated = rec.recheck_at = 1.0  # validated long ago
        rec.recheck_at = 1.0 + 86_400.0
    hold = running("hold-0", "n1", labels={keys.BALLOON: "pool-a"})
    feed(state, [hold, running("job-0", "n0")])
    out = tick(state, 90_000.0)
    assert moves(out) == [("n1", "validating")]  # n0 is busy: its check waits
    assert [e.pod for e in of(out, Evict)] == ["hold-0"] and of(out, CreatePod) == []
    out = feed(state, [gone(hold.pod, at=90_001.0)]) + tick(state, 90_010.0)
    assert [c.pod.node_name for c in of(out, CreatePod)] == ["n1"]
