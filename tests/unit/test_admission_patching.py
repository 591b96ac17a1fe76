"""The webhook's node requirement (``baton.io/team In [...]``) is in each required node
selector term exactly once, whatever the pod already carries: a copy of a pod it
admitted before (a gang recreated whole, a pod exported and created again), the values
in another order, a narrower requirement its author wrote, or a stale wider one."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from baton.proto import keys
from baton.proto.k8s import GPU, Node, NodeEvent
from baton.services.admission import core
from baton.services.admission.core import webhook
from baton.services.admission.core.objects import PatchOp
from baton.services.admission.core.patching import REQUIRED, affinity_patch
from baton.services.admission.teams import parse
from baton.services.simcluster.api.patching import json_patch

pytestmark = pytest.mark.unit


def requirement(*values: str) -> dict[str, Any]:
    return {"key": keys.TEAM, "operator": "In", "values": list(values)}


def affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    required = {"nodeSelectorTerms": [{"matchExpressions": list(t)} for t in terms]}
    return {"nodeAffinity": {REQUIRED: required}}


def applied(have: dict[str, Any] | None, values: tuple[str, ...]) -> list[list[dict[str, Any]]]:
    """Each term's ``baton.io/team`` requirements once the patch is applied."""
    pod: dict[str, Any] = {"spec": {} if have is None else {"affinity": have}}
    ops = affinity_patch(have, key=keys.TEAM, values=values)
    patched = json_patch(pod, [{"op": o.op, "path": o.path, "value": o.value} for o in ops])
    terms = patched["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    return [[e for e in t["matchExpressions"] if e["key"] == keys.TEAM] for t in terms]


ZONE = {"key": "zone", "operator": "In", "values": ["z1"]}
ONCE = [
    # (case, the pod's affinity, the teams the webhook allows, each term's requirements after)
    ("no affinity", None, ("a", "b"), [[requirement("a", "b")]]),
    ("its own term", affinity([ZONE]), ("a",), [[requirement("a")]]),
    ("admitted before", affinity([ZONE, requirement("a", "b")]), ("a", "b"),
     [[requirement("a", "b")]]),
    ("values in another order", affinity([requirement("b", "a")]), ("a", "b"),
     [[requirement("b", "a")]]),
    ("its author narrowed it", affinity([requirement("a")]), ("a", "b"), [[requirement("a")]]),
    ("a stale copy that allows more", affinity([requirement("a", "b", "c")], [ZONE]), ("a",),
     [[requirement("a")], [requirement("a")]]),
]  # fmt: skip


@pytest.mark.parametrize(("have", "values", "after"), [c[1:] for c in ONCE],
                         ids=[c[0] for c in ONCE])  # fmt: skip
def test_the_team_requirement_is_in_each_term_once(
    have: dict[str, Any] | None, values: tuple[str, ...], after: list[list[dict[str, Any]]]
) -> None:
    assert applied(have, values) == after


def test_a_stale_requirement_is_replaced_in_place() -> None:
    base = f"/spec/affinity/nodeAffinity/{REQUIRED}/nodeSelectorTerms/0/matchExpressions"
    ops = affinity_patch(affinity([ZONE, requirement("a", "b")]), key=keys.TEAM, values=("a",))
    assert ops == [PatchOp(op="replace", path=f"{base}/1", value=requirement("a"))]


# every way a pod joins a gang, and a bare pod: what the webhook patches into its spec
FORMATS = {
    "scheduler-plugins": ({"labels": {keys.POD_GROUP: "j"}}, {}),
    "upstream": ({}, {"schedulingGroup": {"podGroupName": "j"}}),
    "volcano": ({"annotations": {keys.VOLCANO_GROUP: "j"}}, {}),
    "volcano alias": ({"annotations": {keys.VOLCANO_GROUP_ALIAS: "j"}}, {}),
    "kueue": ({"labels": {keys.KUEUE_GROUP: "j"}, "annotations": {keys.KUEUE_TOTAL: "2"}}, {}),
    "jobset": ({"labels": {keys.JOBSET_NAME: "j"}, "annotations": {keys.GANG_MEMBERS: "2"}}, {}),
    "bare": ({}, {}),
}


def state() -> core.State:
    """Team a (namespace ml) may borrow from team b: its pods may use both teams' nodes."""
    teams = {"teams": [
        {"name": "a", "namespaces": ["ml"], "pools": ["pa"], "borrow": {"gpus": 8}},
        {"name": "b", "namespaces": ["other"], "pools": ["pb"]},
    ]}  # fmt: skip
    s = core.initial(parse(teams))
    for name, pool in (("n0", "pa"), ("o0", "pb")):
        node = Node(name=name, uid=name, labels={"baton.io/pool": pool}, allocatable={GPU: 8})
        s, _ = core.step(s, NodeEvent(op="upsert", at=0.0, node=node), 0.0)
    return s


def mutated(pod: dict[str, Any]) -> dict[str, Any]:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "r", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "namespace": "ml", "name": pod["metadata"]["name"],
                        "operation": "CREATE", "object": pod}}  # fmt: skip
    verdict = webhook.review(state(), json.dumps(body).encode(), mutate=True, now=0.0)
    response = json.loads(verdict.body)["response"]
    assert response["allowed"], response
    patch = json.loads(base64.b64decode(response["patch"])) if response.get("patch") else []
    return json_patch(pod, patch)


@pytest.mark.parametrize("joins", FORMATS.values(), ids=FORMATS.keys())
def test_every_format_gets_the_requirement_once_also_when_created_again(
    joins: tuple[dict[str, dict[str, str]], dict[str, Any]],
) -> None:
    meta, spec = joins
    container = {"name": "c", "resources": {"limits": {keys.GPU: "8"}}}
    pod = {"metadata": {"name": "w-0", **meta},
           "spec": {"schedulerName": "baton", "containers": [container], **spec}}  # fmt: skip
    first = mutated(pod)
    terms = first["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["a", "b"]
    terms[0]["matchExpressions"][0]["values"].reverse()  # as a copy may carry them
    for admitted in (first, mutated(first)):  # a recreated copy goes through it again
        terms = admitted["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
        assert [[e["key"] for e in t["matchExpressions"]] for t in terms] == [[keys.TEAM]]


@pytest.mark.parametrize("joins", [v for k, v in FORMATS.items() if k != "bare"],
                         ids=[k for k in FORMATS if k != "bare"])  # fmt: skip
@pytest.mark.parametrize("named", ["default-scheduler", "volcano", "scheduler-plugins-scheduler"])
def test_a_member_of_every_format_is_handed_to_baton_whatever_scheduler_it_named(
    joins: tuple[dict[str, dict[str, str]], dict[str, Any]], named: str
) -> None:
    """The API server fills in ``default-scheduler`` before the webhook sees a pod, and a
    pod written for Volcano or scheduler-plugins names their scheduler: a gang member left
    with either waits for a scheduler that is not Baton, or is placed pod by pod."""
    meta, spec = joins
    container = {"name": "c", "resources": {"limits": {keys.GPU: "8"}}}
    pod = {"metadata": {"name": "w-0", **meta},
           "spec": {"schedulerName": named, "containers": [container], **spec}}  # fmt: skip
    assert mutated(pod)["spec"]["schedulerName"] == "baton"


def test_a_pod_of_no_gang_keeps_the_scheduler_it_named() -> None:
    container = {"name": "c", "resources": {"limits": {keys.GPU: "8"}}}
    pod = {
        "metadata": {"name": "w-0"},
        "spec": {"schedulerName": "default-scheduler", "containers": [container]},
    }
    assert mutated(pod)["spec"]["schedulerName"] == "default-scheduler"
