"""The validating webhook speaks every gang format with the same actionable messages:
scheduler-plugins' PodGroup (minResources too), upstream PodGroups and Workloads,
Volcano and Kueue pods."""

from __future__ import annotations

import json
from typing import Any

import pytest

from baton.proto import keys
from baton.proto.k8s import GPU, Node, NodeEvent, Pod, PodEvent, PodGroup, PodGroupEvent
from baton.services.admission import core
from baton.services.admission.core import webhook
from baton.services.admission.teams import parse

pytestmark = pytest.mark.unit

TEAMS = {
    "teams": [
        {"name": "a", "namespaces": ["ml"], "pools": ["pa"], "quota": {"gpus": 16}},
        {"name": "b", "namespaces": ["other"], "pools": ["pb"]},
    ]
}
PLUGINS = ("scheduling.x-k8s.io", "v1alpha1")
UPSTREAM = ("scheduling.k8s.io", "v1beta1")


def state() -> core.State:
    s = core.initial(parse(TEAMS))
    for i in range(2):
        n = Node(name=f"n{i}", uid=f"n{i}", labels={"baton.io/pool": "pa"}, allocatable={GPU: 8})
        core.step(s, NodeEvent(op="upsert", at=0.0, node=n), 0.0)
    o = Node(name="o0", uid="o0", labels={"baton.io/pool": "pb"}, allocatable={GPU: 8})
    core.step(s, NodeEvent(op="upsert", at=0.0, node=o), 0.0)
    for name in ("wide", "full"):
        group = PodGroup(namespace="ml", name=name, uid=name, min_member=4)
        core.step(s, PodGroupEvent(op="upsert", at=0.0, pod_group=group), 0.0)
    for i in range(2):  # two 8-GPU members of "full" exist
        member = Pod(namespace="ml", name=f"full-{i}", uid=f"f{i}", requests={GPU: 8},
                     labels={keys.POD_GROUP: "full"}, scheduler_name="baton")  # fmt: skip
        core.step(s, PodEvent(op="upsert", at=0.0, pod=member), 0.0)
    return s


def ask(obj: dict[str, Any], *, kind: str = "Pod", api: tuple[str, str] = ("", "v1")) -> str:
    body = {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "r", "kind": {"group": api[0], "version": api[1], "kind": kind},
                    "namespace": "ml", "name": obj["metadata"]["name"], "operation": "CREATE",
                    "object": obj},
    }  # fmt: skip
    verdict = webhook.review(state(), json.dumps(body).encode(), mutate=False, now=0.0)
    response = json.loads(verdict.body)["response"]
    return "" if response["allowed"] else str(response["status"]["message"])


def pod(
    labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
    gpus: int = 8, **spec: Any,
) -> dict[str, Any]:  # fmt: skip
    container = {"name": "c", "resources": {"limits": {GPU: str(gpus)}}}
    return {
        "metadata": {"name": "w-0", "labels": labels or {}, "annotations": annotations or {}},
        "spec": {"schedulerName": "baton", "containers": [container], **spec},
    }


REFUSED = [
    # (case, object, kind, api, what the message says)
    ("Kueue group without its size", pod({keys.KUEUE_GROUP: "j"}), "Pod", ("", "v1"),
     f'add annotation {keys.KUEUE_TOTAL}: "<members>"'),
    ("a Kueue group without its size, of the default scheduler (Baton's all the same)",
     pod({keys.KUEUE_GROUP: "j"}, schedulerName="default-scheduler"), "Pod", ("", "v1"),
     f'add annotation {keys.KUEUE_TOTAL}: "<members>"'),
    ("Volcano pods of Volcano's scheduler are Baton's too",
     pod(annotations={keys.VOLCANO_GROUP: "j", keys.VOLCANO_MIN_MEMBER: "0"},
         schedulerName="volcano"), "Pod", ("", "v1"),
     f"{keys.VOLCANO_MIN_MEMBER}: '0' is not a whole number of members"),
    ("Kueue size that is not a number",
     pod({keys.KUEUE_GROUP: "j"}, {keys.KUEUE_TOTAL: "two"}), "Pod", ("", "v1"),
     f"{keys.KUEUE_TOTAL}: 'two' is not a whole number of members"),
    ("Volcano count that is not a number",
     pod(annotations={keys.VOLCANO_GROUP: "j", keys.VOLCANO_MIN_MEMBER: "0"}), "Pod", ("", "v1"),
     f"{keys.VOLCANO_MIN_MEMBER}: '0' is not a whole number of members"),
    ("JobSet member count that is not a number",
     pod({keys.JOBSET_NAME: "j"}, {keys.GANG_MEMBERS: "all"}), "Pod", ("", "v1"),
     f"{keys.GANG_MEMBERS}: 'all' is not a whole number of members"),
    ("two formats naming two gangs",
     pod({keys.POD_GROUP: "a"}, {keys.VOLCANO_GROUP: "b"}), "Pod", ("", "v1"),
     "a pod belongs to one gang: keep one of them"),
    ("a member of a known PodGroup whose members would ask too much",
     pod({keys.POD_GROUP: "full"}), "Pod", ("", "v1"),
     "needs 24 GPUs (3 member pods with this one: 8 + 8 + 8; every member counts) but team "
     "'a' can never get more than 16"),
    ("minResources beyond the team",
     {"metadata": {"name": "g"}, "spec": {"minMember": 2, "minResources": {GPU: "32"}}},
     "PodGroup", PLUGINS,
     "needs 32 GPUs (spec.minResources) but team 'a' can never get more than 16"),
    ("minResources that is not a quantity",
     {"metadata": {"name": "g"}, "spec": {"minMember": 2, "minResources": {GPU: "lots"}}},
     "PodGroup", PLUGINS, "PodGroup ml/g:"),
    ("an expected duration that is not a duration",
     pod(annotations={keys.EXPECTED_DURATION: "a while"}), "Pod", ("", "v1"),
     f"annotation {keys.EXPECTED_DURATION}: 'a while' is not a duration above zero"),
    ("an expected duration of zero on a PodGroup",
     {"metadata": {"name": "g", "annotations": {keys.EXPECTED_DURATION: "0s"}},
      "spec": {"minMember": 2}},
     "PodGroup", PLUGINS, f"PodGroup ml/g: annotation {keys.EXPECTED_DURATION}: '0s'"),
    ("a schedule timeout of zero",
     {"metadata": {"name": "g"}, "spec": {"minMember": 2, "scheduleTimeoutSeconds": 0}},
     "PodGroup", PLUGINS, "spec.scheduleTimeoutSeconds must be at least 1"),
    ("upstream minCount of zero",
     {"metadata": {"name": "g"}, "spec": {"schedulingPolicy": {"gang": {"minCount": 0}}}},
     "PodGroup", UPSTREAM, "spec.schedulingPolicy.gang.minCount must be at least 1"),
    ("upstream topology key that is not a label key",
     {"metadata": {"name": "g"},
      "spec": {"schedulingPolicy": {"gang": {"minCount": 2}},
               "schedulingConstraints": {"topology": [{"key": "a rack"}]}}},
     "PodGroup", UPSTREAM, "'a rack' is not a node label key"),
    ("upstream gang too large for the team",
     {"metadata": {"name": "g", "annotations": {keys.GPUS_PER_POD: "8"}},
      "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}}},
     "PodGroup", UPSTREAM, "needs 32 GPUs (minCount 4 x 8)"),
    ("a pod more GPUs than any node has (9 on 8-GPU nodes), within its team's quota",
     pod({keys.POD_GROUP: "j"}, gpus=9), "Pod", ("", "v1"),
     "asks 9 nvidia.com/gpu, more than any node has: the largest it could use, node n0, "
     "has 8 of the 9 nvidia.com/gpu asked"),
    ("a pod asking more memory than any node has",
     pod(gpus=1, containers=[{"name": "c", "resources": {"limits": {GPU: "1"},
                                                         "requests": {"memory": "2Ti"}}}]),
     "Pod", ("", "v1"), "has 0Gi of the 2048Gi memory asked"),
    ("a lone Baton pod larger than the team could ever run", pod(gpus=24), "Pod", ("", "v1"),
     "needs 24 GPUs (one pod) but team 'a' can never get more than 16"),
    ("a gang member with a preset nodeName", pod({keys.POD_GROUP: "j"}, nodeName="n0"), "Pod",
     ("", "v1"), "sets spec.nodeName 'n0', but a Baton gang member is placed by Baton"),
    ("a GPU pod of the default scheduler with a preset nodeName",
     pod(schedulerName="default-scheduler", nodeName="n0"), "Pod", ("", "v1"),
     "but a GPU pod is placed by Baton"),
    ("a pod naming another team's node",
     pod(gpus=0, schedulerName="default-scheduler", nodeName="o0"), "Pod", ("", "v1"),
     "a node of team 'b', but its namespace belongs to team 'a'"),
    ("a Workload template with minCount of zero",
     {"metadata": {"name": "w"},
      "spec": {"podGroupTemplates": [
          {"name": "t", "schedulingPolicy": {"gang": {"minCount": 0}}}]}},
     "Workload", UPSTREAM, "spec.podGroupTemplates[0].schedulingPolicy.gang.minCount"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "obj", "kind", "api", "message"), REFUSED, ids=[c[0] for c in REFUSED]
)
def test_each_format_is_refused_with_what_to_do(
    case: str, obj: dict[str, Any], kind: str, api: tuple[str, str], message: str
) -> None:
    got = ask(obj, kind=kind, api=api)
    assert message in got, got


ALLOWED = [
    # a first member says nothing of the others' shapes: never minMember x its GPUs
    ("the first member of a Kueue gang", pod({keys.KUEUE_GROUP: "j"}, {keys.KUEUE_TOTAL: "3"}),
     "Pod", ("", "v1")),
    ("the first member of a known PodGroup", pod({keys.POD_GROUP: "wide"}), "Pod", ("", "v1")),
    ("Kueue gang with its size", pod({keys.KUEUE_GROUP: "j"}, {keys.KUEUE_TOTAL: "2"}), "Pod",
     ("", "v1")),
    ("the first member of a JobSet gang (its other members' shapes are not known yet)",
     pod({keys.JOBSET_NAME: "j"}, {keys.GANG_MEMBERS: "4"}), "Pod", ("", "v1")),
    ("JobSet gang with its size", pod({keys.JOBSET_NAME: "j"}, {keys.GANG_MEMBERS: "2"}), "Pod",
     ("", "v1")),
    ("Volcano gang naming a PodGroup", pod(annotations={keys.VOLCANO_GROUP: "j"}), "Pod",
     ("", "v1")),
    ("upstream member", pod(schedulingGroup={"podGroupName": "j"}), "Pod", ("", "v1")),
    ("a pod with an expected duration", pod(annotations={keys.EXPECTED_DURATION: "1h30m"}),
     "Pod", ("", "v1")),
    ("upstream PodGroup", {"metadata": {"name": "g"},
     "spec": {"schedulingPolicy": {"gang": {"minCount": 2}},
              "schedulingConstraints": {"topology": [{"key": keys.RACK}]}}}, "PodGroup", UPSTREAM),
    ("scheduler-plugins PodGroup with minResources",
     {"metadata": {"name": "g"}, "spec": {"minMember": 2, "minResources": {GPU: "16"}}},
     "PodGroup", PLUGINS),
    ("a CPU pod naming its own team's node",
     pod(gpus=0, schedulerName="default-scheduler", nodeName="n0"), "Pod", ("", "v1")),
]  # fmt: skip


@pytest.mark.parametrize(("case", "obj", "kind", "api"), ALLOWED, ids=[c[0] for c in ALLOWED])
def test_valid_gangs_in_each_format_are_allowed(
    case: str, obj: dict[str, Any], kind: str, api: tuple[str, str]
) -> None:
    assert ask(obj, kind=kind, api=api) == ""


def test_a_quota_that_follows_the_nodes_is_no_never_before_they_are_counted() -> None:
    """Seen at the start of a 7,500-node cluster: with no team file the one team's quota is
    its nodes' GPUs, 0 until admission has counted one, and the webhook refused the first
    jobs' pods: "team 'default' can never get more than 0". Such a quota grows as nodes
    join and pass their preflight, so a gang over it waits; a set quota is still a never."""
    s = core.initial(parse(None))
    body = {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "r", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "namespace": "ml", "name": "w-0", "operation": "CREATE",
                    "object": pod(gpus=8)},
    }  # fmt: skip
    verdict = webhook.review(s, json.dumps(body).encode(), mutate=False, now=0.0)
    assert json.loads(verdict.body)["response"]["allowed"] is True
    assert not s.fixed_ceiling("default") and s.ceiling("default") == 0
    assert "can never get more than 16" in ask(pod(gpus=24))  # team 'a': quota 16, set
