"""Property fuzz of the admission webhook: whatever the body, the answer is an
AdmissionReview (allowed or refused with a message) or a 400, never a 5xx or a crash;
absurd quantities are refused with a message a user can act on."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baton.proto import keys
from baton.proto.k8s import GPU, Node, NodeEvent
from baton.services.admission import core
from baton.services.admission.core import webhook
from baton.services.admission.teams import parse

pytestmark = pytest.mark.unit

TEAMS = {"teams": [{"name": "a", "namespaces": ["ml"], "pools": ["pa"], "quota": {"gpus": 16}}]}
KINDS = [("", "v1", "Pod"), ("scheduling.x-k8s.io", "v1alpha1", "PodGroup"),
         ("scheduling.k8s.io", "v1beta1", "PodGroup"), ("scheduling.k8s.io", "v1beta1",
         "Workload"), ("apps", "v1", "Deployment")]  # fmt: skip


def make_state() -> core.State:
    s = core.initial(parse(TEAMS))
    for i in range(2):
        n = Node(name=f"n{i}", uid=f"n{i}", labels={"baton.io/pool": "pa"}, allocatable={GPU: 8})
        core.step(s, NodeEvent(op="upsert", at=0.0, node=n), 0.0)
    return s


STATE = make_state()

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=False), st.text(max_size=30),
    st.sampled_from(["8", "-8", "1e12", "1000000000000", "1Ki", "lots", "", "0.5", "NaN"]),
)  # fmt: skip
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
quantities = st.one_of(
    st.sampled_from(["8", "-8", "-1", "0", "1e12", "1000000000000", "10e9", "1Ki", "1.5", "x"]),
    st.integers(min_value=-(10**13), max_value=10**13).map(str),
    json_values,
)
labels = st.one_of(
    st.dictionaries(
        st.sampled_from([keys.POD_GROUP, keys.KUEUE_GROUP, "baton.io/team", "x" * 300, "a"]),
        st.one_of(st.text(max_size=20), st.just("v" * 70_000), json_values),
        max_size=3,
    ),
    json_values,
)
annotations = st.dictionaries(
    st.sampled_from(
        [
            keys.KUEUE_TOTAL,
            keys.VOLCANO_GROUP,
            keys.VOLCANO_MIN_MEMBER,
            keys.GPUS_PER_POD,
            "baton.io/x",
        ]
    ),
    st.one_of(st.sampled_from(["2", "-1", "0", "1000000000", "1e9", "j"]), json_values),
    max_size=3,
)


@st.composite
def objects(draw: st.DrawFn) -> Any:
    container = {"name": "c", "resources": {
        draw(st.sampled_from(["limits", "requests"])): {draw(st.sampled_from([GPU, "cpu"])):
                                                         draw(quantities)}}}  # fmt: skip
    obj: dict[str, Any] = {
        "metadata": {"name": draw(st.sampled_from(["w-0", "g", "", "A_B"])),
                     "labels": draw(labels), "annotations": draw(annotations)},
        "spec": {"schedulerName": draw(st.sampled_from(["baton", "default", 7])),
                 "containers": [container],
                 "minMember": draw(st.one_of(st.integers(-(10**10), 10**10), json_values)),
                 "minResources": {GPU: draw(quantities)},
                 "schedulingPolicy": {"gang": {"minCount": draw(st.integers(-5, 10**10))}}},
    }  # fmt: skip
    if draw(st.booleans()):  # drop or retype a field at random
        where = draw(st.sampled_from(["metadata", "spec"]))
        obj[where] = draw(json_values)
    return obj


@st.composite
def reviews(draw: st.DrawFn) -> bytes:
    group, version, kind = draw(st.sampled_from(KINDS))
    request: dict[str, Any] = {
        "uid": draw(st.one_of(st.just("r"), json_values)),
        "kind": {"group": group, "version": version, "kind": kind},
        "namespace": draw(st.sampled_from(["ml", "other", ""])),
        "operation": draw(st.sampled_from(["CREATE", "UPDATE", "DELETE", 5])),
        "object": draw(objects()),
    }
    for field in draw(st.lists(st.sampled_from(sorted(request)), max_size=2)):
        if draw(st.booleans()):
            request.pop(field, None)
        else:
            request[field] = draw(json_values)
    body: dict[str, Any] = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                            "request": request}  # fmt: skip
    return json.dumps(body).encode()


bodies = st.one_of(
    reviews(),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
    reviews().map(lambda b: b[: len(b) // 2]),  # cut short
    reviews().map(lambda b: b.replace(b'"w-0"', b'"w-\xff\xfe"')),  # not UTF-8
)


def answer(state: core.State | None, body: bytes, *, mutate: bool) -> dict[str, Any] | None:
    """The review's response, or None for a 400; anything else raised is a 5xx."""
    try:
        verdict = webhook.review(state, body, mutate=mutate, now=0.0)
    except webhook.BadReview as exc:
        assert str(exc)  # the 400 says what is wrong
        return None
    out = json.loads(verdict.body)
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    response = out["response"]
    assert isinstance(response["uid"], str) and isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert response["status"]["message"]
    return response  # type: ignore[no-any-return]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies, mutate=st.booleans(), ready=st.booleans())
def test_any_body_gets_an_admission_review_or_a_400(body: bytes, mutate: bool, ready: bool) -> None:
    answer(STATE if ready else None, body, mutate=mutate)


NASTY = [
    b"[" * 100_000 + b"]" * 100_000,  # deep nesting
    b'{"request": ' * 50_000 + b"1" + b"}" * 50_000,
    b'{"apiVersion": "admission.k8s.io/v1", "request": {"uid": "\xff\xfe"}}',
    b"\xff" * 262_144,
    b"",
]


@pytest.mark.parametrize("body", NASTY, ids=["deep-list", "deep-object", "not-utf8", "binary",
                                             "empty"])  # fmt: skip
def test_nasty_bodies_are_a_400_or_an_answer(body: bytes) -> None:
    for mutate in (True, False):
        answer(STATE, body, mutate=mutate)


def ask(obj: dict[str, Any], *, kind: str = "Pod", api: tuple[str, str] = ("", "v1"),
        mutate: bool = False, old: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """CREATE ``obj``; with ``old``, an UPDATE from ``old`` to ``obj``."""
    request = {"uid": "r", "kind": {"group": api[0], "version": api[1], "kind": kind},
               "namespace": "ml", "name": "x", "operation": "UPDATE" if old else "CREATE",
               "object": obj, "oldObject": old}  # fmt: skip
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    response = answer(STATE, json.dumps(body).encode(), mutate=mutate)
    assert response is not None
    return response


def gang_pod(gpus: str, *, where: str = "limits", init: str = "") -> dict[str, Any]:
    container = {"name": "c", "resources": {where: {GPU: gpus}}}
    spec: dict[str, Any] = {"schedulerName": "baton", "containers": [container]}
    if init:
        spec["initContainers"] = [{"name": "i", "resources": {"limits": {GPU: init}}}]
    return {"metadata": {"name": "w-0", "labels": {keys.POD_GROUP: "g"}}, "spec": spec}


@pytest.mark.parametrize(
    ("obj", "kind", "api", "says"),
    [
        (gang_pod("-8"), "Pod", ("", "v1"), "nvidia.com/gpu"),
        (gang_pod("-1", where="requests"), "Pod", ("", "v1"), "nvidia.com/gpu"),
        (gang_pod("1000000000000"), "Pod", ("", "v1"), "nvidia.com/gpu"),
        (gang_pod("1e12"), "Pod", ("", "v1"), "nvidia.com/gpu"),
        ({"metadata": {"name": "g"}, "spec": {"minMember": 10**9}},
         "PodGroup", ("scheduling.x-k8s.io", "v1alpha1"), "minMember"),
        ({"metadata": {"name": "g"}, "spec": {"minMember": -3}},
         "PodGroup", ("scheduling.x-k8s.io", "v1alpha1"), "minMember"),
        ({"metadata": {"name": "g"}, "spec": {"schedulingPolicy": {"gang": {"minCount": 10**9}}}},
         "PodGroup", ("scheduling.k8s.io", "v1beta1"), "minCount"),
        ({"metadata": {"name": "g"}, "spec": {"minMember": 2, "minResources": {GPU: "-16"}}},
         "PodGroup", ("scheduling.x-k8s.io", "v1alpha1"), "minResources"),
        (gang_pod("1", init="-1"), "Pod", ("", "v1"), "initContainers[0] ('i')"),
        (gang_pod("1", init="1000000000000"), "Pod", ("", "v1"), "initContainers[0] ('i')"),
        (gang_pod("0.5"), "Pod", ("", "v1"), "GPUs are whole devices"),
        (gang_pod("1", init="1500m"), "Pod", ("", "v1"), "GPUs are whole devices"),
        (gang_pod("-0.5"), "Pod", ("", "v1"), "GPUs are whole devices"),
        ({"metadata": {"name": "g"}, "spec": {"minMember": 4097}},
         "PodGroup", ("scheduling.x-k8s.io", "v1alpha1"), "more than the 4096 members"),
        ({"metadata": {"name": "g"}, "spec": {"schedulingPolicy": {"gang": {"minCount": 5000}}}},
         "PodGroup", ("scheduling.k8s.io", "v1beta1"), "more than the 4096 members"),
        ({"metadata": {"name": "g"}, "spec": {"minMember": 4097, "queue": "q"}},
         "PodGroup", ("scheduling.volcano.sh", "v1beta1"), "more than the 4096 members"),
        ({"metadata": {"name": "g"}, "spec": {"minMember": 2, "minResources": {GPU: "-16"}}},
         "PodGroup", ("scheduling.volcano.sh", "v1beta1"), "minResources"),
    ],
)  # fmt: skip
def test_absurd_quantities_are_refused_with_a_message_a_user_can_act_on(
    obj: dict[str, Any], kind: str, api: tuple[str, str], says: str
) -> None:
    response = ask(obj, kind=kind, api=api)
    assert response["allowed"] is False, response
    message = response["status"]["message"]
    assert says in message, message


def test_an_update_that_makes_a_gang_or_its_gpus_impossible_is_refused() -> None:
    """UPDATEs are validated: a PodGroup grown past 4,096 members or a pod whose GPUs go
    fractional is refused; an update that keeps a problem the object already had (made
    before the webhook) or changes nothing that matters is allowed."""
    api = ("scheduling.x-k8s.io", "v1alpha1")
    small = {"metadata": {"name": "g"}, "spec": {"minMember": 8}}
    big = {"metadata": {"name": "g"}, "spec": {"minMember": 5000}}
    grown = ask(big, kind="PodGroup", api=api, old=small)
    assert grown["allowed"] is False and "4096" in grown["status"]["message"]
    assert ask(big, kind="PodGroup", api=api, old=big)["allowed"] is True
    relabelled = {**small, "metadata": {"name": "g", "labels": {"x": "y"}}}
    assert ask(relabelled, kind="PodGroup", api=api, old=small)["allowed"] is True
    fractional = ask(gang_pod("0.5"), old=gang_pod("1"))
    assert fractional["allowed"] is False and "whole" in fractional["status"]["message"]
    assert ask(gang_pod("1"), old=gang_pod("1"))["allowed"] is True


def test_an_init_container_counts_toward_the_pods_gpus() -> None:
    """The effective request is the larger of the containers' sum and any init container's."""
    response = ask(gang_pod("1", init="65"))
    assert response["allowed"] is False and "65" in response["status"]["message"]
