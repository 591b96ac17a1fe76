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
