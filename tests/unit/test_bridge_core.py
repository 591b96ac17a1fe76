from __future__ import annotations

import pytest

from baton.proto import k8s
from baton.services.bridge import core

pytestmark = pytest.mark.unit


def pod_event(name: str, rv: str, *, op: k8s.Op = "upsert", ns: str = "team-a") -> k8s.PodEvent:
    pod = k8s.Pod(namespace=ns, name=name, uid=f"u-{name}", resource_version=rv)
    return k8s.PodEvent(op=op, at=1.0, pod=pod)


def node_event(name: str, rv: str, *, op: k8s.Op = "upsert") -> k8s.NodeEvent:
    return k8s.NodeEvent(
        op=op, at=1.0, node=k8s.Node(name=name, uid=f"n-{name}", resource_version=rv)
    )


@pytest.mark.parametrize(
    ("event", "subject", "msg_id", "ttl"),
    [
        (
            node_event("gpu-1.rack-1", "5"),
            "baton.c1.k8s.node.gpu-1_rack-1",
            "n-gpu-1.rack-1:5",
            None,
        ),
        (pod_event("w-0", "7"), "baton.c1.k8s.pod.team-a.w-0", "u-w-0:7", None),
        (pod_event("w-0", "9", op="delete"), "baton.c1.k8s.pod.team-a.w-0", "u-w-0:9:del", "1h"),
        (
            k8s.PodGroupEvent(
                op="upsert",
                at=1.0,
                pod_group=k8s.PodGroup(namespace="a", name="g", uid="g1", resource_version="3"),
            ),
            "baton.c1.k8s.podgroup.a.g",
            "g1:3",
            None,
        ),
        (
            k8s.EndpointSliceEvent(
                op="upsert",
                at=1.0,
                endpoint_slice=k8s.EndpointSlice(
                    namespace="a", name="s.x", uid="e1", resource_version="4"
                ),
            ),
            "baton.c1.k8s.endpointslice.a.s_x",
            "e1:4",
            None,
        ),
    ],
)
def test_publish_subject_id_and_ttl(
    event: k8s.K8sEvent, subject: str, msg_id: str, ttl: str | None
) -> None:
    _, outputs = core.step(core.initial(core.Policy(cluster="c1")), event, 2.0)
    assert outputs == (core.Publish(subject=subject, event=event, msg_id=msg_id, ttl=ttl),)


def test_the_same_change_twice_is_published_once() -> None:
    state = core.initial(core.Policy(cluster="c1"))
    state, first = core.step(state, pod_event("w-0", "7"), 1.0)
    state, again = core.step(state, pod_event("w-0", "7"), 2.0)
    state, newer = core.step(state, pod_event("w-0", "8"), 3.0)
    assert len(first) == 1 and again == () and len(newer) == 1


def test_what_the_stream_holds_is_not_published_again() -> None:
    held = [pod_event("w-0", "7"), pod_event("w-1", "3", op="delete")]
    state = core.step(core.initial(core.Policy(cluster="c1")), core.Held(events=list(held)), 0.0)[0]
    assert core.step(state, pod_event("w-0", "7"), 1.0)[1] == ()
    assert core.step(state, pod_event("w-1", "3", op="delete"), 1.0)[1] == ()
    # a deletion of what the stream holds as live is news
    (out,) = core.step(state, pod_event("w-0", "7", op="delete"), 1.0)[1]
    assert isinstance(out, core.Publish) and out.msg_id == "u-w-0:7:del"


def test_a_name_that_cannot_be_a_token_is_rejected_with_the_reason() -> None:
    state = core.initial(core.Policy(cluster="c1"))
    state, outputs = core.step(state, pod_event("Bad_Name", "1"), 1.0)
    (rejected,) = outputs
    assert isinstance(rejected, core.Rejected)
    assert rejected.kind == "pod" and rejected.key == "team-a/Bad_Name"
    assert "DNS-1123" in rejected.reason
    assert state.held == {}


def test_seeds_are_live_objects_of_one_kind() -> None:
    held = [pod_event("a", "1"), pod_event("b", "2", op="delete"), node_event("n", "3")]
    assert [o.name for o in core.seeds(held, "pod")] == ["a"]
    assert [o.name for o in core.seeds(held, "node")] == ["n"]


def test_replaying_events_gives_the_same_outputs() -> None:
    events = [
        pod_event("a", "1"),
        node_event("n", "2"),
        pod_event("a", "1"),
        pod_event("a", "3", op="delete"),
    ]

    def run() -> list[core.Output]:
        state, outs = core.initial(core.Policy(cluster="c1")), []
        for e in events:
            state, produced = core.step(state, e, e.at)
            outs.extend(produced)
        return outs

    assert run() == run() and len(run()) == 3
