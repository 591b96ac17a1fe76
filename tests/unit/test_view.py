"""The shared cluster view: what it says of nodes, pods, gangs and free capacity after
each kind of change. The capacity index is checked against a full pass in
test_view_capacity.py."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import pytest

from baton.libs.view import GangView, View, is_bare, is_preemptible
from baton.proto import keys
from baton.proto.k8s import (
    PLUGINS_API,
    UPSTREAM_API,
    VOLCANO_API,
    NodeEvent,
    Pod,
    PodEvent,
    PodGroupEvent,
)
from tests.support.builders import GPU, balloon, node, pod, pod_group, view

pytestmark = pytest.mark.unit


# -- nodes ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("built", "usable", "schedulable", "health"),
    [
        (node("n", gpus=8), True, True, ()),
        (node("n", gpus=8).not_ready(), False, False, ()),
        (node("n", gpus=8).cordoned(), False, False, ()),
        (node("n", gpus=8).tainted(keys.UNHEALTHY), False, True, (keys.UNHEALTHY,)),
        # under a preflight: not usable whatever a pod tolerates (the actuator binds no
        # gang there: a pod tolerating every taint must not be placed there again and again)
        (node("n", gpus=8).tainted(keys.PREFLIGHT), False, True, (keys.PREFLIGHT,)),
        # draining is a NoExecute taint: filtered by tolerations
        (
            node("n", gpus=8).tainted(keys.DRAINING, effect="NoExecute").tainted("other"),
            True,
            True,
            (keys.DRAINING,),
        ),
    ],
)
def test_node_readiness_and_health(
    built: object, usable: bool, schedulable: bool, health: tuple[str, ...]
) -> None:
    found = view(built.build()).nodes["n"]  # type: ignore[attr-defined]
    assert (found.usable, found.schedulable, found.health) == (usable, schedulable, health)


def test_node_pool_team_and_domains() -> None:
    n = node("n", gpus=8).in_pool("a100").of_team("research").in_rack("r1", block="b1", zone="z")
    found = view(n.build(), node("bare", gpus=8).build())
    assert (found.nodes["n"].pool, found.nodes["n"].team) == ("a100", "research")
    assert (found.nodes["bare"].pool, found.nodes["bare"].team) == ("", "")
    assert found.nodes["n"].paths == ("/z", "/z/b1", "/z/b1/r1")
    assert found.nodes["bare"].paths == (None, None, None)
    assert found.in_domain(2, "/z/b1/r1") == {"n"}


def test_a_node_moved_to_another_rack_leaves_the_old_domain() -> None:
    a = node("a", gpus=8).in_rack("r1", block="b1", zone="z").build()
    b = node("b", gpus=8).in_rack("r1", block="b1", zone="z").build()
    found = view(a, b)
    found.upsert_node(msgspec.structs.replace(a, labels={**a.labels, keys.RACK: "r2"}))
    assert found.in_domain(2, "/z/b1/r1") == {"b"}
    assert found.in_domain(2, "/z/b1/r2") == {"a"}
    assert found.in_domain(1, "/z/b1") == {"a", "b"}
    found.delete_node("b")
    assert "/z/b1/r1" not in found.domains[2] and found.in_domain(1, "/z/b1") == {"a"}


# -- free capacity ----------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    pods: tuple[Pod, ...]
    free: int  # GPUs free on node n
    on: tuple[str, ...]  # pod keys accounted on n


RUNNING = pod("run", gpus=4, node_name="n", scheduler="other")
SUCCEEDED = msgspec.structs.replace(RUNNING, phase="Succeeded")
FAILED = msgspec.structs.replace(RUNNING, phase="Failed")
BIG = pod("big", gpus=8, node_name="n", scheduler="other")
CASES = [
    Case("nothing runs", (), 8, ()),
    Case("a bound pod holds its requests", (RUNNING,), 4, ("default/run",)),
    Case("a finished pod holds nothing", (RUNNING, SUCCEEDED), 8, ()),
    Case("a failed pod holds nothing", (FAILED,), 8, ()),
    Case("a pending pod holds nothing", (pod("wait", gpus=4),), 8, ()),
    Case("a changed pod is counted once", (RUNNING, RUNNING), 4, ("default/run",)),
    Case("overcommitted: free goes negative", (RUNNING, BIG), -4, ("default/big", "default/run")),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_free_capacity_per_node(case: Case) -> None:
    found = view(node("n", gpus=8).build(), *case.pods)
    assert found.nodes["n"].free[GPU] == case.free
    assert [p.key for p in found.pods_on("n")] == list(case.on)


def test_pods_seen_before_their_node_count_when_it_arrives() -> None:
    found = view(RUNNING)
    assert found.used == {"n": RUNNING.requests}
    found.upsert_node(node("n", gpus=8).build())
    assert found.nodes["n"].free[GPU] == 4


def test_a_deleted_pod_frees_its_node() -> None:
    found = view(node("n", gpus=8).build(), RUNNING)
    found.delete_pod(RUNNING)
    assert found.nodes["n"].free[GPU] == 8 and found.pods_on("n") == [] and not found.used


def test_free_per_domain_counts_usable_nodes_only() -> None:
    nodes = [
        node("a", gpus=8).in_rack("r1", block="b1", zone="z").build(),
        node("b", gpus=8).in_rack("r1", block="b1", zone="z").build(),
        node("c", gpus=8).in_rack("r1", block="b1", zone="z").not_ready().build(),
        node("d", gpus=8).in_rack("r2", block="b1", zone="z").build(),
    ]
    found = view(*nodes, pod("p", gpus=8, node_name="a", scheduler="other"))
    assert found.free_in(2, "/z/b1/r1")[GPU] == 8  # a full, b free, c not ready
    assert found.free_in(1, "/z/b1")[GPU] == 16
    assert found.free_in(2, "/nowhere") == {}
    assert found.free_totals()[GPU] == 16


# -- preemptible pods -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "preemptible"),
    [
        (balloon("b", node_name="n"), True),
        (pod("low", priority=-1), True),
        (pod("labelled", labels={keys.BALLOON: "true"}, priority=100), True),
        (pod("zero", priority=0), False),
        (pod("high", priority=1000), False),
    ],
)
def test_which_pods_are_preemptible(p: Pod, preemptible: bool) -> None:
    assert is_preemptible(p) is preemptible


def test_free_if_the_balloons_were_gone() -> None:
    found = view(
        node("n", gpus=8).build(),
        balloon("hold", node_name="n", gpus=4),
        pod("train", gpus=2, node_name="n", scheduler="other"),
    )
    assert found.nodes["n"].free[GPU] == 2
    assert found.free_if_preempted("n")[GPU] == 6


# -- gangs ------------------------------------------------------------------------------


def test_gang_members_follow_their_pods() -> None:
    group = pod_group("job", min_member=2)
    w0, w1 = pod("job-0", group="job", gpus=8), pod("job-1", group="job", gpus=8)
    found = view(node("n", gpus=16).build(), group, w0, w1)
    gang = found.gangs["default/job"]
    assert (gang.pending, gang.bound, gang.lone) == (
        {"default/job-0", "default/job-1"},
        set(),
        False,
    )
    found.upsert_pod(msgspec.structs.replace(w0, node_name="n", phase="Running"))
    assert (gang.pending, gang.bound) == ({"default/job-1"}, {"default/job-0"})
    assert [p.name for p in found.members(gang)] == ["job-0", "job-1"]
    found.upsert_pod(msgspec.structs.replace(w0, node_name="n", phase="Succeeded"))
    assert gang.bound == set() and [p.name for p in found.members(gang)] == ["job-1"]


def test_pods_of_other_schedulers_make_no_gang() -> None:
    found = view(pod("web", scheduler="default-scheduler"))
    assert found.gangs == {} and "default/web" in found.pods


@pytest.mark.parametrize(
    ("objs", "gone", "kept"),
    [
        # a lone pod is a gang of one, gone with its pod
        ((pod("solo"),), pod("solo"), False),
        # a PodGroup keeps its gang while it exists, members or not
        ((pod_group("job"), pod("job-0", group="job")), pod("job-0", group="job"), True),
    ],
)
def test_a_gang_nothing_refers_to_is_dropped(
    objs: tuple[object, ...], gone: Pod, kept: bool
) -> None:
    found = view(*objs)  # type: ignore[arg-type]
    key = f"default/{gone.gang or gone.name}"
    assert key in found.gangs
    found.delete_pod(gone)
    assert (key in found.gangs) is kept


def test_deleting_the_pod_group_drops_an_empty_gang() -> None:
    group = pod_group("job")
    found = view(group)
    found.delete_group(group)
    assert found.gangs == {}


@pytest.mark.parametrize("deleted", [0, 1, 2])
def test_pod_groups_of_different_apis_with_one_name_are_one_gang_and_deleting_one_keeps_the_rest(
    deleted: int,
) -> None:
    """docs/gang.md: a gang is one whichever of its PodGroups' APIs said it; deleting
    one PodGroup (even the one read last) keeps the others as the gang's group."""
    groups = [msgspec.structs.replace(pod_group("job", min_member=n + 2, api=api), uid=api)
              for n, api in enumerate((PLUGINS_API, UPSTREAM_API, VOLCANO_API))]  # fmt: skip
    found = view(*groups)
    found.delete_group(groups[deleted])
    group = found.gangs["default/job"].group
    assert group is not None and group.api != groups[deleted].api
    for gone in groups:
        found.delete_group(gone)
    assert found.gangs == {}


@dataclass(slots=True)
class Holding(GangView):
    """A service's gang that holds its members' nodes while a placement is in flight."""

    placing: dict[str, str] | None = None

    def holds(self, pod: str) -> bool:
        return self.placing is not None and pod in self.placing

    def settle(self, pods: dict[str, Pod]) -> bool:
        return GangView.settle(self, pods) and self.placing is None


def test_the_hooks_keep_a_placed_member_accounted_and_its_gang_alive() -> None:
    found: View[Holding] = View(levels=(), new_gang=Holding)
    found.upsert_node(node("n", gpus=8).build())
    member = pod("solo", gpus=8)
    found.upsert_pod(member)
    gang = found.gangs["default/solo"]
    gang.placing = {member.key: "n"}
    found.account(member.key, "n", member.requests)  # the service assumed it on n
    found.upsert_pod(msgspec.structs.replace(member, priority=5))  # still unbound
    assert found.nodes["n"].free[GPU] == 0  # held: it stays accounted
    found.delete_pod(member)
    assert found.nodes["n"].free[GPU] == 8  # a deleted pod holds nothing
    assert "default/solo" in found.gangs  # settle said: not idle while placing
    gang.placing = None
    found.upsert_pod(member)
    found.delete_pod(member)
    assert "default/solo" not in found.gangs


def test_apply_routes_each_object_event() -> None:
    found = view()
    n, p, g = node("n", gpus=8).build(), pod("job-0", group="job", node_name="n"), pod_group("job")
    found.apply(NodeEvent(op="upsert", at=0.0, node=n))
    found.apply(PodGroupEvent(op="upsert", at=0.0, pod_group=g))
    found.apply(PodEvent(op="upsert", at=0.0, pod=p))
    assert found.gangs["default/job"].bound == {"default/job-0"} and found.pods_on("n") == [p]
    found.apply(PodEvent(op="delete", at=0.0, pod=p))
    found.apply(PodGroupEvent(op="delete", at=0.0, pod_group=g))
    found.apply(NodeEvent(op="delete", at=0.0, node=n))
    assert (found.nodes, found.pods, found.gangs) == ({}, {}, {})


@pytest.mark.parametrize(
    ("labels", "annotations", "bare"),
    [
        ({}, {}, True),  # nobody else would recreate it
        ({"batch.kubernetes.io/job-name": "j"}, {}, False),
        ({"jobset.sigs.k8s.io/jobset-name": "js"}, {}, False),
        ({"training.kubeflow.org/job-name": "mpi"}, {}, False),  # the MPI operator's
        ({}, {keys.RECREATE: "false"}, False),  # opted out: only evicted
    ],
)
def test_a_pod_is_bare_unless_a_controller_recreates_it_or_it_opts_out(
    labels: dict[str, str], annotations: dict[str, str], bare: bool
) -> None:
    p = Pod(namespace="ns", name="p", uid="u", labels=labels, annotations=annotations)
    assert is_bare(p) is bare
