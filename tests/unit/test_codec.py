import pytest

from baton.proto import codec
from baton.proto.actions import AnyAction, BindGang, Binding
from baton.proto.k8s import K8sEvent, Node, NodeEvent, Pod, PodEvent, Taint, Toleration

pytestmark = pytest.mark.unit


def test_events_round_trip_and_omit_defaults() -> None:
    event = PodEvent(op="upsert", at=5.0, pod=Pod(namespace="a", name="p", uid="u"))
    data = codec.encode(event)
    assert b"node_name" not in data  # slim: defaults are not sent
    assert codec.decode(data, K8sEvent) == event


def test_union_picks_the_type_by_tag() -> None:
    node = NodeEvent(op="delete", at=1.0, node=Node(name="n", uid="u"))
    assert isinstance(codec.decode(codec.encode(node), K8sEvent), NodeEvent)


def test_unknown_version_is_named_in_the_error() -> None:
    data = codec.encode(NodeEvent(op="upsert", at=1.0, node=Node(name="n", uid="u")))
    with pytest.raises(codec.Undecodable, match=r"unsupported schema version 'k8s.node.v9'"):
        codec.decode(data.replace(b"k8s.node.v1", b"k8s.node.v9"), K8sEvent)


def test_missing_field_and_garbage_are_undecodable() -> None:
    with pytest.raises(codec.Undecodable, match="missing required field `node`"):
        codec.decode(b'{"type":"k8s.node.v1","op":"upsert","at":1}', K8sEvent)
    with pytest.raises(codec.Undecodable, match="not JSON"):
        codec.decode(b"\x00garbage", K8sEvent)


def test_actions_round_trip() -> None:
    action = BindGang(
        id="g1",
        by="gang",
        at=2.0,
        gang="team-a/job7",
        bindings=(Binding(namespace="team-a", pod="w-0", node="gpu-1"),),
    )
    assert codec.decode(codec.encode(action), AnyAction) == action


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        (Toleration(key="k", value="v"), Taint(key="k", value="v"), True),
        (Toleration(key="k", value="v"), Taint(key="k", value="w"), False),
        (Toleration(key="k", operator="Exists"), Taint(key="k", value="w"), True),
        (Toleration(operator="Exists"), Taint(key="any"), True),
        (Toleration(key="k", operator="Exists", effect="NoExecute"), Taint(key="k"), False),
    ],
)
def test_tolerations_follow_kubernetes_matching(
    toleration: Toleration, taint: Taint, expected: bool
) -> None:
    assert toleration.tolerates(taint) is expected


def _node(gpus: int, **labels: str) -> NodeEvent:
    node = Node(name="gpu-1", uid="u", labels=labels, allocatable={"nvidia.com/gpu": gpus})
    return NodeEvent(op="upsert", at=1.0, node=node)


@pytest.mark.parametrize(
    ("event", "says"),
    [
        (_node(1000), "node gpu-1 claims 1000 nvidia.com/gpu allocatable; at most 64 per node"),
        (_node(16, **{"node.kubernetes.io/instance-type": "p5.48xlarge"}),
         "node gpu-1 claims 16 nvidia.com/gpu allocatable; its instance type p5.48xlarge has 8"),
        (PodEvent(op="upsert", at=1.0, pod=Pod(namespace="a", name="p", uid="u",
                                               requests={"nvidia.com/gpu": -1})),
         "pod a/p has a negative requests nvidia.com/gpu: -1"),
    ],
)  # fmt: skip
def test_every_consumer_refuses_an_object_beyond_its_bounds(event: K8sEvent, says: str) -> None:
    """Whoever published it: the bridge's bounds again, on the consumer's side."""
    with pytest.raises(codec.Unbelievable, match=f"out of bounds: {says}"):
        codec.decode(codec.encode(event), K8sEvent)
    gone = NodeEvent(op="delete", at=1.0, node=Node(name="n", uid="u", allocatable={"x": -1}))
    assert codec.decode(codec.encode(gone), K8sEvent) == gone  # a tombstone always passes
    real = _node(8, **{"node.kubernetes.io/instance-type": "p5.48xlarge"})
    assert codec.decode(codec.encode(real), K8sEvent) == real
