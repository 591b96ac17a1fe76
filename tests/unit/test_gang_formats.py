"""Gang formats users already have: which pods form a gang (slimming decides once), how
many members it needs (the view), and how the gang core places each format."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from baton.libs.kube import kinds, slimming, wire
from baton.libs.view import quorum
from baton.proto import keys
from baton.proto.k8s import UPSTREAM_API, VOLCANO_API, GangRef, Node, PodGroupEvent
from baton.services.bridge import core as bridge
from tests.support.builders import RACK, node, pod, pod_group, view
from tests.unit.gang_helpers import binds, make, tick, verdicts

pytestmark = pytest.mark.unit


def wire_pod(
    *, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
) -> wire.WirePod:  # fmt: skip
    raw = {
        "metadata": {"name": "w-0", "namespace": "ml", "uid": "u", "labels": labels or {},
                     "annotations": annotations or {}},
        "spec": {"schedulerName": "baton", **(spec or {})},
    }  # fmt: skip
    return msgspec.json.decode(json.dumps(raw), type=wire.WirePod)


FORMATS = [
    # (case, labels, annotations, spec, the pod's GangRef)
    ("scheduler-plugins label", {keys.POD_GROUP: "job"}, {}, {}, GangRef(name="job")),
    (
        "upstream spec.schedulingGroup", {}, {}, {"schedulingGroup": {"podGroupName": "job"}},
        GangRef(name="job", source="kubernetes"),
    ),
    (
        "Volcano annotation with a member count", {},
        {keys.VOLCANO_GROUP: "job", keys.VOLCANO_MIN_MEMBER: "4"}, {},
        GangRef(name="job", source="volcano", min_member=4),
    ),
    (
        "Volcano's newer annotation, no count (a PodGroup must say)", {},
        {keys.VOLCANO_GROUP_ALIAS: "job"}, {}, GangRef(name="job", source="volcano"),
    ),
    (
        "Kueue label and total-count annotation", {keys.KUEUE_GROUP: "job"},
        {keys.KUEUE_TOTAL: "3"}, {}, GangRef(name="job", source="kueue", min_member=3),
    ),
    (
        "Kueue count that is not a number counts as none", {keys.KUEUE_GROUP: "job"},
        {keys.KUEUE_TOTAL: "three"}, {}, GangRef(name="job", source="kueue"),
    ),
    (
        "two formats: scheduler-plugins wins", {keys.POD_GROUP: "a", keys.KUEUE_GROUP: "b"},
        {keys.KUEUE_TOTAL: "2"}, {}, GangRef(name="a"),
    ),
    (
        "JobSet pods with Baton's member count: one gang per JobSet", {keys.JOBSET_NAME: "llm"},
        {keys.GANG_MEMBERS: "32"}, {}, GangRef(name="llm", source="jobset", min_member=32),
    ),
    ("JobSet pods without a member count are not a gang", {keys.JOBSET_NAME: "llm"}, {}, {},
     None),
    ("no group: a gang of one", {}, {}, {}, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "labels", "annotations", "spec", "want"), FORMATS, ids=[c[0] for c in FORMATS]
)
def test_a_pod_names_its_gang_in_any_format(
    case: str, labels: dict[str, str], annotations: dict[str, str], spec: dict[str, Any],
    want: GangRef | None,
) -> None:  # fmt: skip
    slim = slimming.pod(wire_pod(labels=labels, annotations=annotations, spec=spec))
    assert slim.group == want
    assert slim.gang == (want.name if want else "")


def test_an_old_recording_without_group_still_names_the_plugins_gang() -> None:
    recorded = pod("w-0", labels={keys.POD_GROUP: "job"})
    recorded = msgspec.structs.replace(recorded, group=None)
    assert recorded.gang == "job"


UPSTREAM = [
    # (case, spec, min_member, topology)
    ("gang policy", {"schedulingPolicy": {"gang": {"minCount": 4}}}, 4, ""),
    ("basic policy: pod by pod", {"schedulingPolicy": {"basic": {}}}, 1, ""),
    (
        "topology constraint",
        {"schedulingPolicy": {"gang": {"minCount": 2}},
         "schedulingConstraints": {"topology": [{"key": RACK}]}},
        2, RACK,
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "spec", "min_member", "topology"), UPSTREAM, ids=[c[0] for c in UPSTREAM]
)
def test_upstream_pod_groups_decode_from_either_version(
    case: str, spec: dict[str, Any], min_member: int, topology: str
) -> None:
    for version in ("v1beta1", "v1alpha2"):
        body = {
            "apiVersion": f"scheduling.k8s.io/{version}", "metadata": {"resourceVersion": "9"},
            "items": [{"metadata": {"name": "train", "namespace": "ml", "uid": "u"},
                       "spec": spec}],
        }  # fmt: skip
        (group,) = kinds.UPSTREAM_POD_GROUPS.decode_page(json.dumps(body).encode()).items
        assert isinstance(group, type(pod_group("x")))
        want = (UPSTREAM_API, min_member, topology)
        assert (group.api, group.min_member, group.topology) == want
        assert group.upstream


def test_the_upstream_kind_tries_the_other_served_version_after_a_404() -> None:
    kind = kinds.UPSTREAM_POD_GROUPS
    other = kind.next_path(kind.path)
    assert "v1alpha2" in other and kind.next_path(other) == kind.path
    assert kinds.PODS.next_path(kinds.PODS.path) == kinds.PODS.path


def test_upstream_pod_groups_travel_on_their_own_subjects() -> None:
    group = pod_group("train", namespace="ml", api=UPSTREAM_API)
    event = PodGroupEvent(op="upsert", at=1.0, pod_group=group)
    assert bridge.subject_of("c1", event) == "baton.c1.k8s.upstream-podgroup.ml.train"
    plugins = PodGroupEvent(op="upsert", at=1.0, pod_group=pod_group("train", namespace="ml"))
    assert bridge.subject_of("c1", plugins) == "baton.c1.k8s.podgroup.ml.train"


def test_volcano_pod_groups_decode_and_travel_on_their_own_subjects() -> None:
    body = {
        "apiVersion": VOLCANO_API, "metadata": {"resourceVersion": "9"},
        "items": [{"metadata": {"name": "train", "namespace": "ml", "uid": "u"},
                   "spec": {"minMember": 3, "minResources": {keys.GPU: "24", "cpu": "1500m"},
                            "queue": "research", "priorityClassName": "high"},
                   "status": {"phase": "Inqueue"}}],
    }  # fmt: skip
    (group,) = kinds.VOLCANO_POD_GROUPS.decode_page(json.dumps(body).encode()).items
    assert isinstance(group, type(pod_group("x")))
    assert (group.api, group.min_member, group.min_resources, group.phase) == (
        VOLCANO_API, 3, {keys.GPU: 24, "cpu": 1500}, "Inqueue"
    )  # fmt: skip
    assert group.volcano and not group.upstream
    event = PodGroupEvent(op="upsert", at=1.0, pod_group=group)
    assert bridge.subject_of("c1", event) == "baton.c1.k8s.volcano-podgroup.ml.train"
    assert kinds.KINDS["volcano-podgroup"] is kinds.VOLCANO_POD_GROUPS


def test_min_resources_are_canonical_and_a_malformed_one_is_dropped() -> None:
    def decode(resources: dict[str, str]) -> dict[str, int]:
        raw = {"metadata": {"name": "g"}, "spec": {"minMember": 2, "minResources": resources}}
        return slimming.pod_group(msgspec.convert(raw, wire.WirePodGroup)).min_resources

    assert decode({"nvidia.com/gpu": "16", "cpu": "1500m"}) == {"nvidia.com/gpu": 16, "cpu": 1500}
    assert decode({"nvidia.com/gpu": "lots"}) == {}


QUORUM = [
    # (case, pods' refs, a PodGroup's minMember or None, quorum)
    ("Kueue: the pods' total count", [GangRef(name="j", source="kueue", min_member=3)] * 2,
     None, 3),
    ("Volcano: the largest count any pod says",
     [GangRef(name="j", source="volcano", min_member=2),
      GangRef(name="j", source="volcano", min_member=4)], None, 4),
    ("Volcano without a count waits for a PodGroup", [GangRef(name="j", source="volcano")],
     None, 0),
    ("a PodGroup of that name says, whatever the pods say",
     [GangRef(name="j", source="volcano", min_member=2)], 5, 5),
    ("upstream pods wait for their PodGroup", [GangRef(name="j", source="kubernetes")], None, 0),
]  # fmt: skip


@pytest.mark.parametrize(("case", "refs", "group", "want"), QUORUM, ids=[c[0] for c in QUORUM])
def test_the_view_knows_how_many_members_each_format_needs(
    case: str, refs: list[GangRef], group: int | None, want: int
) -> None:
    pods = [pod(f"w-{i}", namespace="ml", ref=ref) for i, ref in enumerate(refs)]
    objs = [*pods, *([pod_group("j", namespace="ml", min_member=group)] if group else [])]
    seen = view(*objs)
    assert quorum(seen.gangs["ml/j"], seen.pods) == want


def test_a_lone_pod_needs_itself() -> None:
    seen = view(pod("solo", namespace="ml"))
    assert quorum(seen.gangs["ml/solo"], seen.pods) == 1


def test_deleting_the_other_api_s_pod_group_of_the_same_name_keeps_this_one() -> None:
    mine = pod_group("j", namespace="ml", min_member=2)
    other = msgspec.structs.replace(mine, uid="other", api=UPSTREAM_API)
    seen = view(pod("w-0", namespace="ml", group="j"), mine)
    seen.delete_group(other)
    assert seen.gangs["ml/j"].group == mine


# -- the gang core places each format whole ------------------------------------------


def flat(count: int) -> list[Node]:
    return [node(f"n{i}", gpus=8).build() for i in range(count)]


def members(ref: GangRef, count: int) -> list[Any]:
    return [pod(f"{ref.name}-{i}", namespace="ml", gpus=8, ref=ref) for i in range(count)]


@pytest.mark.parametrize("source", ["kueue", "volcano"])
def test_label_gangs_are_placed_whole_once_every_member_exists(source: str) -> None:
    ref = GangRef(name="job", source=source, min_member=4)  # type: ignore[arg-type]
    pods = members(ref, 4)
    state = make(flat(4), pods[:3])
    assert binds(tick(state, 1.0)) == []  # 3 of 4: not a gang of one each
    state = make(flat(4), pods)
    (bind,) = binds(tick(state, 1.0))
    assert bind.gang == "ml/job" and len(bind.bindings) == 4


def test_volcano_pods_without_a_count_wait_for_a_pod_group_of_that_name() -> None:
    pods = members(GangRef(name="job", source="volcano"), 2)
    state = make(flat(2), pods)
    assert binds(tick(state, 1.0)) == []
    state = make(flat(2), pods, pod_group("job", namespace="ml", min_member=2))
    (bind,) = binds(tick(state, 1.0))
    assert len(bind.bindings) == 2


def test_an_upstream_pod_group_s_topology_constraint_keeps_the_gang_in_one_rack() -> None:
    nodes = [node(f"a{i}").in_rack("ra").build() for i in range(3)]
    nodes += [node(f"b{i}").in_rack("rb").build() for i in range(2)]
    group = pod_group("job", namespace="ml", min_member=4, api=UPSTREAM_API, topology=RACK)
    state = make(nodes, group, members(GangRef(name="job", source="kubernetes"), 4))
    assert binds(tick(state, 1.0)) == []  # 5 nodes, but no rack holds 4
    state = make(nodes, msgspec.structs.replace(group, min_member=3),
                 members(GangRef(name="job", source="kubernetes"), 3))  # fmt: skip
    (bind,) = binds(tick(state, 1.0))
    assert {b.node[0] for b in bind.bindings} == {"a"}


def test_a_topology_key_the_search_does_not_know_is_never_ignored() -> None:
    group = pod_group("job", namespace="ml", min_member=2, api=UPSTREAM_API,
                      topology="example.com/pod")  # fmt: skip
    state = make(flat(2), group, members(GangRef(name="job", source="kubernetes"), 2))
    out = tick(state, 1.0)
    assert binds(out) == []
    (verdict,) = verdicts(out)
    assert "'example.com/pod' is not one of the gang service's topology levels" in verdict.reason


def test_min_resources_larger_than_the_members_ask_hold_the_gang_back() -> None:
    group = pod_group("job", namespace="ml", min_member=2, min_resources={keys.GPU: 32})
    state = make(flat(3), group, members(GangRef(name="job"), 2))
    out = tick(state, 1.0)
    assert binds(out) == []
    (verdict,) = verdicts(out)
    assert verdict.reason.startswith("short of the PodGroup's minResources (nvidia.com/gpu 8")
    state = make(flat(4), group, members(GangRef(name="job"), 2))
    assert len(binds(tick(state, 1.0))) == 1


def jobset_members(jobs: int, pods: int, *, exclusive: str = RACK) -> list[Any]:
    """A JobSet's pods as its controller labels them: one job-key per Job."""
    ref = GangRef(name="llm", source="jobset", min_member=jobs * pods)
    notes = {keys.JOBSET_EXCLUSIVE: exclusive} if exclusive else {}
    return [
        pod(f"llm-w-{j}-{i}", namespace="ml", gpus=8, ref=ref, annotations=notes,
            labels={keys.JOBSET_NAME: "llm", keys.JOBSET_JOB_KEY: f"key{j}"})
        for j in range(jobs) for i in range(pods)
    ]  # fmt: skip


def racks(*sizes: int) -> list[Node]:
    return [node(f"r{r}n{i}", gpus=8).in_rack(f"r{r}").build()
            for r, size in enumerate(sizes) for i in range(size)]  # fmt: skip


def test_a_jobset_s_exclusive_topology_puts_each_job_in_a_rack_of_its_own() -> None:
    """JobSet exclusive placement (alpha.jobset.sigs.k8s.io/exclusive-topology): the
    pods of one Job share a domain, and no two Jobs share one."""
    state = make(racks(4, 3, 3), jobset_members(2, 3))
    (bind,) = binds(tick(state, 1.0))
    by_job: dict[str, set[str]] = {}
    for b in bind.bindings:
        by_job.setdefault(b.pod.rsplit("-", 1)[0], set()).add(b.node[:2])
    assert sorted(by_job.values(), key=sorted) == [{"r1"}, {"r2"}]  # best fit, one each


def test_an_exclusive_jobset_waits_when_two_jobs_would_share_a_rack() -> None:
    """Room for both Jobs in one big rack is not room: each needs a rack of its own, and
    the gang stays whole (nothing bound) until there is."""
    state = make(racks(6, 2), jobset_members(2, 3))
    assert binds(tick(state, 1.0)) == []
    state = make(racks(6, 2), jobset_members(2, 3, exclusive=""))
    (bind,) = binds(tick(state, 1.0))  # the same pods without the annotation fit
    assert len(bind.bindings) == 6


def test_an_exclusive_jobset_keeps_out_of_a_rack_another_one_runs_in() -> None:
    """JobSet's anti-affinity on the job key: a rack where another exclusive JobSet's Job
    runs is not a domain for this one's, even with room left in it."""
    ref = GangRef(name="other", source="jobset", min_member=1)
    notes = {keys.JOBSET_EXCLUSIVE: RACK}
    labels = {keys.JOBSET_NAME: "other", keys.JOBSET_JOB_KEY: "other0"}
    running = pod("other-0", namespace="ml", gpus=8, ref=ref, annotations=notes, labels=labels,
                  node_name="r0n0")  # fmt: skip
    state = make(racks(4, 2), running, jobset_members(2, 2))
    assert binds(tick(state, 1.0)) == []  # r0 is taken: one rack left for two Jobs
    state = make(racks(4, 2, 2), running, jobset_members(2, 2))
    (bind,) = binds(tick(state, 1.0))
    assert {b.node[:2] for b in bind.bindings} == {"r1", "r2"}
