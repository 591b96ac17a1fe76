import pytest

from baton.proto import subjects
from baton.proto.subjects import InvalidName

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("name", "token"),
    [
        ("gpu-0001", "gpu-0001"),
        ("job7.w-0", "job7_w-0"),
        ("ip-10-0-0-1.ec2.internal", "ip-10-0-0-1_ec2_internal"),
        ("a", "a"),
    ],
)
def test_names_round_trip_through_tokens(name: str, token: str) -> None:
    assert subjects.encode_name(name) == token
    assert subjects.decode_name(token) == name


@pytest.mark.parametrize(
    ("name", "complaint"),
    [
        ("", "empty"),
        ("Upper", "DNS-1123"),
        ("has space", "DNS-1123"),
        ("under_score", "DNS-1123"),
        ("star*", "DNS-1123"),
        ("gt>", "DNS-1123"),
        ("-lead", "DNS-1123"),
        ("trail.", "DNS-1123"),
        ("x" * 254, "limit is 253"),
    ],
)
def test_names_that_cannot_be_carried_are_refused_with_the_reason(
    name: str, complaint: str
) -> None:
    with pytest.raises(InvalidName, match=complaint):
        subjects.encode_name(name)


def test_subject_layout_and_parse_are_inverse() -> None:
    subj = subjects.subject("c1", subjects.K8S, "pod", "team-a", "job7.w-0")
    assert subj == "baton.c1.k8s.pod.team-a.job7_w-0"
    assert subjects.parse(subj) == ("c1", "k8s", "pod", ("team-a", "job7.w-0"))


def test_cluster_token_must_be_a_dns_label() -> None:
    with pytest.raises(InvalidName, match="cluster name"):
        subjects.subject("c.1", subjects.K8S, "node", "n1")


def test_parse_refuses_foreign_subjects() -> None:
    with pytest.raises(InvalidName, match="not a Baton subject"):
        subjects.parse("other.c1.k8s")


def test_stream_names_have_no_dots_or_dashes() -> None:
    assert subjects.stream_name("prod-east", "k8s") == "BATON_PROD_EAST_K8S"
