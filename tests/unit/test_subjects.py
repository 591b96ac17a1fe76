import itertools

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


OVERLAPS = [
    ("baton.c1.>", "baton.*.action.>", "baton.c1.action.>"),
    ("baton.*.action.taint.>", "baton.c1.action.>", "baton.c1.action.taint.>"),
    ("baton.c1.action.taint.n1", "baton.*.action.>", "baton.c1.action.taint.n1"),
    (">", "baton.*.action.>", "baton.*.action.>"),
    ("baton.c1.placement.>", "baton.*.action.>", None),
    ("baton.c2.*", "baton.*.action.>", None),  # one token fewer than any action subject
    ("baton.*", "baton.c1", "baton.c1"),
]


@pytest.mark.parametrize(("a", "b", "both"), OVERLAPS)
def test_the_overlap_of_two_filters_matches_what_both_match(a: str, b: str, both: str) -> None:
    assert subjects.overlap(a, b) == both
    assert subjects.overlap(b, a) == both


def test_overlap_agrees_with_matching_on_every_small_subject() -> None:
    tokens = ("a", "b")
    filters = [
        ".".join(p) for n in (1, 2, 3) for p in itertools.product((*tokens, "*", ">"), repeat=n)
    ]
    filters = [f for f in filters if ">" not in f[:-1]]  # ">" only last
    names = [".".join(p) for n in (1, 2, 3, 4) for p in itertools.product(tokens, repeat=n)]
    for a, b in itertools.product(filters, repeat=2):
        both = subjects.overlap(a, b)
        for name in names:
            want = subjects.matches(a, name) and subjects.matches(b, name)
            got = both is not None and subjects.matches(both, name)
            assert got == want, (a, b, both, name)
