"""Volcano's own e2e scheduling tests, replayed on simcluster with Volcano PodGroups
(``scheduling.volcano.sh/v1beta1``) and pods that join them by Volcano's annotation,
as Volcano's job controller creates them: bridge -> gang -> actuator -> the reporter.
Each test names the Volcano test it mirrors; where Baton differs on purpose
(whole-gang preemption) it asserts Baton's behaviour, and docs/gang.md says why.
Volcano's e2e cluster is measured in CPU slots; here a slot is 4 or 8 GPUs of the
simulated 8-GPU nodes."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from baton.libs.runner import serve
from baton.proto import keys
from baton.services.cli.status import status as baton_status
from baton.services.gang import main as gang
from baton.services.reporter import main as reporter
from tests.e2e.admitting import admitting, common
from tests.e2e.test_gang_formats import member, pods
from tests.e2e.test_gang_quorum import bound
from tests.pipeline import Stack, stack, until
from tests.support.sim import Sim

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
VOLCANO = ("scheduling.volcano.sh", "v1beta1")
STORED = "podgroups.scheduling.volcano.sh"  # where simcluster keeps them
NS = "vc"
TOLD = reporter.Settings(pod_every=0.2, tick_every=0.1)
# no minimum run time and no grace, so preemption tests do not wait for them
PREEMPTING = gang.Settings(cycle_interval=0.1, preempt_min_run_s=0, preempt_grace_s=0)


async def job(
    api: Any, custom: Any, name: str, *, min_member: int, tasks: list[tuple[int, int]],
    priority_class: str = "", with_pods: bool = True, ns: str = NS, **pod_spec: Any,
) -> list[dict[str, Any]]:  # fmt: skip
    """A Volcano PodGroup of ``min_member`` (Volcano's job minAvailable) and its pods:
    ``tasks`` is (replicas, GPUs each) per task (0 GPUs: a best-effort task). Without
    ``with_pods`` the pods are returned, not created."""
    spec: dict[str, Any] = {"minMember": min_member, "queue": "default"}
    if priority_class:
        spec["priorityClassName"] = priority_class
    body = {"apiVersion": "/".join(VOLCANO), "kind": "PodGroup", "metadata": {"name": name},
            "spec": spec}  # fmt: skip
    await custom.create_namespaced_custom_object(*VOLCANO, ns, "podgroups", body)
    extra = {"priorityClassName": priority_class} if priority_class else {}
    extra.update(pod_spec)
    made = []
    for t, (replicas, gpus) in enumerate(tasks):
        for i in range(replicas):
            pod = member(f"{name}-t{t}-{i}", gpus=gpus,
                         annotations={keys.VOLCANO_GROUP: name}, **extra)  # fmt: skip
            if not gpus:
                pod["spec"]["containers"][0].pop("resources")
            made.append(pod)
    for pod in made if with_pods else ():
        await api.create_namespaced_pod(ns, pod)
    return made


def status(sim: Sim, name: str, ns: str = NS) -> dict[str, Any]:
    return sim.store.get(STORED, ns, name).get("status") or {}


def condition(sim: Sim, name: str, kind: str, ns: str = NS) -> dict[str, Any]:
    """The Volcano PodGroup's condition of that type ({} when none)."""
    found = [c for c in status(sim, name, ns).get("conditions") or () if c["type"] == kind]
    return found[0] if found else {}


def told(sim: Sim, name: str, ns: str = NS) -> str:
    """The message of its Unschedulable condition while True ('' otherwise)."""
    found = condition(sim, name, "Unschedulable", ns)
    return str(found.get("message", "")) if found.get("status") == "True" else ""


def phase(sim: Sim, name: str, ns: str = NS) -> str:
    return str(status(sim, name, ns).get("phase", ""))


def ready(sim: Sim, name: str, count: int) -> bool:
    """Volcano's WaitJobReady: at least ``count`` members hold a node, and its PodGroup
    says Running."""
    return len(bound(sim, NS, f"{name}-")) >= count and phase(sim, name) == "Running"


def uids(sim: Sim, prefix: str) -> dict[str, tuple[str, str]]:
    """name -> (uid, node) of the members whose names start with ``prefix``."""
    return {
        p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"].get("nodeName", ""))
        for p in pods(sim, NS)
        if p["metadata"]["name"].startswith(prefix)
    }


async def occupy(api: Any, count: int) -> list[str]:
    """Volcano's ReplicaSet that holds ``count`` slots: lone 8-GPU Baton pods."""
    names = [f"rs-{i}" for i in range(count)]
    for name in names:
        await api.create_namespaced_pod(NS, member(name, gpus=8))
    return names


async def priority_classes(custom: Any) -> None:
    for name, value in (("low", 0), ("high", 1000)):
        await custom.create_cluster_custom_object(
            "scheduling.k8s.io", "v1", "priorityclasses",
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
             "metadata": {"name": name}, "value": value},
        )  # fmt: skip


async def test_gang_scheduling() -> None:
    """Mirrors volcano job_scheduling.go "Gang scheduling": a ReplicaSet holds half the
    cluster plus one slot; a job of minAvailable = replicas = that many is Pending and
    Unschedulable, none of its pods bound; once the ReplicaSet is deleted it is ready."""
    async with stack(nodes=4, namespaces=[NS], reporter_settings=TOLD) as s:
        api, custom, sim = s.api, s.custom, s.sim
        held = await occupy(api, 3)
        await until(lambda: len(bound(sim, NS, "rs-")) == 3, within=60, what="the occupier bound")
        await job(api, custom, "gang-qj", min_member=3, tasks=[(3, 8)])
        said = "1 of 3 members fit"
        await until(lambda: said in told(sim, "gang-qj"), within=30,
                    what="its Unschedulable condition with the verdict")  # fmt: skip
        assert phase(sim, "gang-qj") == "Pending"  # no admission here: never enqueued
        assert bound(sim, NS, "gang-qj-") == []
        for name in held:
            await api.delete_namespaced_pod(name, NS, grace_period_seconds=0)
        await until(lambda: ready(sim, "gang-qj", 3), within=60, what="gang-qj ready")
        assert condition(sim, "gang-qj", "Scheduled")["status"] == "True"


async def test_schedule_multiple_jobs() -> None:
    """Mirrors volcano job_scheduling.go "Schedule Multiple Jobs": three jobs of
    minAvailable 2, each with as many replicas as the cluster has slots, submitted
    together (their pods created in turn, as three job controllers would): every job
    is ready (Baton places every waiting quorum before members beyond one)."""
    async with stack(nodes=4, namespaces=[NS], reporter_settings=TOLD) as s:
        api, custom, sim = s.api, s.custom, s.sim
        made = [await job(api, custom, name, min_member=2, tasks=[(8, 4)], with_pods=False)
                for name in ("mqj-1", "mqj-2", "mqj-3")]  # fmt: skip
        for one in zip(*made, strict=True):  # jobs submitted together: their pods interleave
            for pod in one:
                await api.create_namespaced_pod(NS, pod)
        for name in ("mqj-1", "mqj-2", "mqj-3"):
            await until(lambda name=name: ready(sim, name, 2),  # type: ignore[misc]
                        within=60, what=f"{name} ready")  # fmt: skip
        await until(lambda: len(bound(sim, NS)) == 8, within=60,
                    what="the members beyond the quorums bound in the room left")  # fmt: skip


async def test_gang_scheduling_full_occupied() -> None:
    """Mirrors volcano job_scheduling.go "Gang scheduling: Full Occupied": a job of
    minAvailable = replicas = the cluster fills it; a second one stays Pending, and the
    first stays ready."""
    async with stack(nodes=4, namespaces=[NS], reporter_settings=TOLD) as s:
        api, custom, sim = s.api, s.custom, s.sim
        await job(api, custom, "gang-fq-qj1", min_member=4, tasks=[(4, 8)])
        await until(lambda: ready(sim, "gang-fq-qj1", 4), within=60, what="gang-fq-qj1 ready")
        await job(api, custom, "gang-fq-qj2", min_member=4, tasks=[(4, 8)])
        await until(lambda: condition(sim, "gang-fq-qj2", "Unschedulable").get("status") == "True",
                    within=30, what="gang-fq-qj2 told it is unschedulable")  # fmt: skip
        assert phase(sim, "gang-fq-qj2") == "Pending"
        assert bound(sim, NS, "gang-fq-qj2-") == []
        assert ready(sim, "gang-fq-qj1", 4)


async def test_schedule_best_effort_job() -> None:
    """Mirrors volcano job_scheduling.go "Schedule BestEffort Job": a job of two tasks,
    one asking a slot each (minAvailable 2 of as many replicas as slots), one asking
    nothing (best-effort, 2 of half as many), is ready: zero-GPU members count towards
    its quorum and are placed beside the others."""
    async with stack(nodes=4, namespaces=[NS], reporter_settings=TOLD) as s:
        api, custom, sim = s.api, s.custom, s.sim
        await job(api, custom, "test", min_member=4, tasks=[(8, 4), (4, 0)])
        await until(lambda: len(bound(sim, NS, "test-")) == 12, within=60,
                    what="all 12 members bound (8 asking 4 GPUs, 4 best-effort)")  # fmt: skip
        await until(lambda: phase(sim, "test") == "Running", within=30, what="the job Running")


async def test_statement() -> None:
    """Mirrors volcano job_scheduling.go "Statement": a job of minAvailable = replicas =
    the cluster runs; a second one of the same priority is Unschedulable and takes
    nothing from the first (no eviction, no Preempted event: a decision that cannot
    place a whole gang changes nothing)."""
    async with stack(
        nodes=4, namespaces=[NS], gang_settings=PREEMPTING, reporter_settings=TOLD
    ) as s:
        api, custom, sim = s.api, s.custom, s.sim
        await job(api, custom, "st-qj-1", min_member=4, tasks=[(4, 8)])
        await until(lambda: ready(sim, "st-qj-1", 4), within=60, what="st-qj-1 ready")
        first = uids(sim, "st-qj-1-")
        await job(api, custom, "st-qj-2", min_member=4, tasks=[(4, 8)])
        await until(lambda: condition(sim, "st-qj-2", "Unschedulable").get("status") == "True",
                    within=30, what="st-qj-2 told it is unschedulable")  # fmt: skip
        assert uids(sim, "st-qj-1-") == first  # same pods, same nodes
        assert not [e for e in sim.store.list("events", namespace=NS)[0]
                    if e["reason"] == "Preempted"]  # fmt: skip


async def test_job_priority() -> None:
    """Mirrors volcano job_scheduling.go "Job Priority" (older releases): a ReplicaSet
    fills the cluster, a low- and then a high-priority job of the whole cluster wait;
    once the ReplicaSet is gone the high-priority one is ready, the low one waits."""
    async with stack(nodes=4, namespaces=[NS], reporter_settings=TOLD) as s:
        api, custom, sim = s.api, s.custom, s.sim
        await priority_classes(custom)
        held = await occupy(api, 4)
        await until(lambda: len(bound(sim, NS, "rs-")) == 4, within=60, what="the occupier bound")
        await job(api, custom, "pri-job-2", min_member=4, tasks=[(4, 8)], priority_class="low")
        await job(api, custom, "pri-job-1", min_member=4, tasks=[(4, 8)], priority_class="high")
        await until(lambda: condition(sim, "pri-job-1", "Unschedulable").get("status") == "True",
                    within=30, what="the high-priority job told it waits")  # fmt: skip
        for name in held:
            await api.delete_namespaced_pod(name, NS, grace_period_seconds=0)
        await until(lambda: ready(sim, "pri-job-1", 4), within=60, what="pri-job-1 ready")
        assert bound(sim, NS, "pri-job-2-") == []
        assert phase(sim, "pri-job-2") == "Pending"


async def test_preempt_when_idle_resource_is_not_enough() -> None:
    """Mirrors volcano preempt.go "schedule high priority job with preemption when idle
    resource is NOT enough but preemptee resource is enough": a low-priority job of
    minAvailable 1 fills the cluster; a high-priority job of half the cluster is ready.
    Volcano evicts half the low job's pods; Baton takes the low gang off whole (its bare
    pods recreated unbound, with new uids), binds the high one, and the low gang starts
    again on the room left (its quorum is 1): half its members run, as in Volcano."""
    async with stack(
        nodes=4, namespaces=[NS], gang_settings=PREEMPTING, reporter_settings=TOLD
    ) as s:
        api, custom, sim = s.api, s.custom, s.sim
        await priority_classes(custom)
        await job(api, custom, "preemptee-qj", min_member=1, tasks=[(4, 8)], priority_class="low")
        await until(lambda: ready(sim, "preemptee-qj", 4), within=60, what="the low job on all")
        before = uids(sim, "preemptee-qj-")
        await job(api, custom, "preemptor-qj", min_member=2, tasks=[(2, 8)], priority_class="high")
        await until(lambda: ready(sim, "preemptor-qj", 2), within=60, what="the high job ready")

        def low_restarted() -> bool:
            now = uids(sim, "preemptee-qj-")
            renewed = all(now[n][0] != before[n][0] for n in before if n in now)
            return len(now) == 4 and renewed and len(bound(sim, NS, "preemptee-qj-")) == 2

        await until(low_restarted, within=60,
                    what="the low job recreated whole, half of it bound again")  # fmt: skip
        await until(lambda: ready(sim, "preemptee-qj", 2), within=30, what="the low job Running")


async def test_no_preemption_when_resource_is_enough() -> None:
    """Mirrors volcano preempt.go "schedule high priority job without preemption when
    resource is enough": a low- and a high-priority job of half the cluster each both
    run, and the low one is not touched."""
    async with stack(
        nodes=4, namespaces=[NS], gang_settings=PREEMPTING, reporter_settings=TOLD
    ) as s:
        api, custom, sim = s.api, s.custom, s.sim
        await priority_classes(custom)
        await job(api, custom, "preemptee-qj", min_member=1, tasks=[(2, 8)], priority_class="low")
        await until(lambda: ready(sim, "preemptee-qj", 2), within=60, what="the low job ready")
        before = uids(sim, "preemptee-qj-")
        await job(api, custom, "preemptor-qj", min_member=2, tasks=[(2, 8)], priority_class="high")
        await until(lambda: ready(sim, "preemptor-qj", 2), within=60, what="the high job ready")
        assert uids(sim, "preemptee-qj-") == before


TEAMS = "teams:\n" + "".join(
    f"  - name: {t}\n    namespaces: [team-{t}]\n    pools: [p{t}]\n" for t in "abc"
)


async def test_without_the_webhook_baton_status_names_the_pods_it_never_saw(
    tmp_path: Path,
) -> None:
    """The webhook registration gone (deleted, or overwritten without its clientConfig),
    a Kueue pod keeps ``default-scheduler`` and waits for a scheduler that does not run
    beside Baton. ``baton status`` says the webhook serves but names that pod as one it
    never saw, and says what to check."""
    async with three_teams(tmp_path) as s:
        api, custom = s.api, s.custom
        await custom.delete_cluster_custom_object(
            "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "baton"
        )
        plain = member("kq-0", gpus=8, labels={keys.KUEUE_GROUP: "kq"},
                       annotations={keys.KUEUE_TOTAL: "1"})  # fmt: skip
        del plain["spec"]["schedulerName"]
        await api.create_namespaced_pod("team-b", plain)

        async def said() -> str | None:
            shown = await baton_status(argparse.Namespace(nats=s.url, cluster="c1"))
            return shown if "pods of gangs never passed it" in shown else None

        shown = await until(said, within=60, step=0.5,
                            what="baton status naming the pod the webhook never saw")  # fmt: skip
    assert ("1 pods of gangs never passed it and wait for no scheduler (team-b/kq-0 kept "
            "schedulerName default-scheduler)") in shown, shown  # fmt: skip
    assert "kubectl get mutatingwebhookconfiguration baton" in shown
    assert "  serving on :" in shown, shown  # admission serves: the registration is what is off


@contextlib.asynccontextmanager
async def three_teams(folder: Path) -> AsyncIterator[Stack]:
    """Three teams (Volcano's queues), each with one 8-GPU node of its own, behind the
    webhook and admission, with the reporter, on a stack of its own."""
    pools, namespaces = [f"p{t}" for t in "abc"], [f"team-{t}" for t in "abc"]
    async with stack(nodes=3, services=False, pools=pools, namespaces=namespaces) as s:
        url, sim, custom = s.url, s.sim, s.custom
        told = serve(reporter.SPEC, reporter.Settings(**common(url), pod_every=0.2))
        async with admitting(url, sim, custom, teams=TEAMS, folder=folder, beside=[told]) as adm:
            await until(lambda: adm.ready, within=30, what="admission caught up")
            yield s


def running(sim: Sim, team: str, name: str) -> bool:
    """The team's job bound, admitted (admission's mark on its PodGroup) and Running."""
    ns = f"team-{team}"
    members = [p for p in pods(sim, ns) if p["metadata"]["name"].startswith(f"{name}-")]
    group = sim.store.get(STORED, ns, name)
    marked = (group["metadata"].get("annotations") or {}).get(keys.ADMITTED) == "true"
    placed = bool(members) and all(p["spec"].get("nodeName") for p in members)
    return placed and marked and phase(sim, name, ns) == "Running"


def team_terms(sim: Sim, ns: str) -> dict[str, list[int]]:
    """pod name -> how many ``baton.io/team`` requirements each of its required node
    selector terms has (the webhook ANDs exactly one into each)."""
    out = {}
    for p in pods(sim, ns):
        node = ((p["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or {}
        out[p["metadata"]["name"]] = [
            sum(e.get("key") == keys.TEAM for e in term.get("matchExpressions") or [])
            for term in node.get("nodeSelectorTerms") or []
        ]
    return out


def team_uids(sim: Sim) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"]
            for t in "abc" for p in pods(sim, f"team-{t}")}  # fmt: skip


async def test_reclaim_case_1_no_reclaim_when_resource_is_enough(tmp_path: Path) -> None:
    """Mirrors volcano reclaim.go "Reclaim Case 1: New queue with job created no reclaim
    when resource is enough": jobs of two queues run; a job of a new queue runs too and
    nothing is reclaimed. Queues are Baton teams (the team file), so the path includes
    the webhook and admission, which admits each Volcano PodGroup (its mark on it)."""
    async with three_teams(tmp_path) as s:
        api, custom, sim = s.api, s.custom, s.sim
        for team in "ab":
            await job(api, custom, f"reclaim-j{team}", min_member=1, tasks=[(1, 8)],
                      ns=f"team-{team}")  # fmt: skip
            await until(lambda team=team: running(sim, team, f"reclaim-j{team}"),  # type: ignore[misc]
                        within=60, what=f"team {team}'s job admitted and Running")  # fmt: skip
        before = team_uids(sim)
        await job(api, custom, "reclaim-jc", min_member=1, tasks=[(1, 8)], ns="team-c")
        await until(lambda: running(sim, "c", "reclaim-jc"), within=60,
                    what="the new team's job admitted and Running")  # fmt: skip
        assert {n: u for n, u in team_uids(sim).items() if n in before} == before
        for team in "abc":  # the webhook's node requirement, once per term
            terms = team_terms(sim, f"team-{team}")
            assert terms and all(counts == [1] for counts in terms.values()), terms


async def test_reclaim_case_6_no_reclaim_when_overused(tmp_path: Path) -> None:
    """Mirrors volcano reclaim.go "Reclaim Case 6: New queue with job created no reclaim
    when overused": each of three queues runs a job; a second job of the third queue
    reclaims nothing. Volcano leaves it Inqueue (enqueue looks at the cluster's idle
    room); Baton does not admit a gang beyond its team's quota that may not borrow, so
    its Volcano PodGroup stays Pending and says it waits for admission."""
    async with three_teams(tmp_path) as s:
        api, custom, sim = s.api, s.custom, s.sim
        for team in "abc":
            await job(api, custom, f"reclaim-j{team}", min_member=1, tasks=[(1, 8)],
                      ns=f"team-{team}")  # fmt: skip
        for team in "abc":
            await until(lambda team=team: running(sim, team, f"reclaim-j{team}"),  # type: ignore[misc]
                        within=60, what=f"team {team}'s job admitted and Running")  # fmt: skip
        before = team_uids(sim)
        await job(api, custom, "reclaim-j4", min_member=1, tasks=[(1, 8)], ns="team-c")
        await until(lambda: "waiting for admission" in told(sim, "reclaim-j4", "team-c"),
                    within=60, what="the overused team's second job told it waits")  # fmt: skip
        assert phase(sim, "reclaim-j4", "team-c") == "Pending"
        assert not sim.store.get("pods", "team-c", "reclaim-j4-t0-0")["spec"].get("nodeName")
        assert {n: u for n, u in team_uids(sim).items() if n in before} == before


async def test_reclaim_case_7_no_reclaim_when_job_not_satisfied_with_predicates(
    tmp_path: Path,
) -> None:
    """Mirrors volcano reclaim.go "Reclaim Case 7: New queue with job created no reclaim
    when job not satisfied with predicates": a new queue's job that no node admits (it
    names a node that does not exist) reclaims nothing. Volcano's test expects its
    PodGroup Running and calls that a bug; Baton's is Inqueue (admitted within its
    team's quota), Unschedulable with the verdict, and the others keep running."""
    async with three_teams(tmp_path) as s:
        api, custom, sim = s.api, s.custom, s.sim
        for team in "ab":
            await job(api, custom, f"reclaim-j{team}", min_member=1, tasks=[(1, 8)],
                      ns=f"team-{team}")  # fmt: skip
        for team in "ab":
            await until(lambda team=team: running(sim, team, f"reclaim-j{team}"),  # type: ignore[misc]
                        within=60, what=f"team {team}'s job admitted and Running")  # fmt: skip
        before = team_uids(sim)
        await job(api, custom, "reclaim-jc", min_member=1, tasks=[(1, 8)], ns="team-c",
                  nodeSelector={"kubernetes.io/hostname": "fake-node"})  # fmt: skip
        await until(lambda: phase(sim, "reclaim-jc", "team-c") == "Inqueue"
                    and "no node takes a member: 0/3 nodes are available: 1 node(s) didn't "
                    "match Pod's node affinity/selector, 1 node(s) had untolerated taint "
                    "{baton.io/team: a}" in told(sim, "reclaim-jc", "team-c"),
                    within=60, what="the new team's job Inqueue and told why it waits")  # fmt: skip
        assert not sim.store.get("pods", "team-c", "reclaim-jc-t0-0")["spec"].get("nodeName")
        assert {n: u for n, u in team_uids(sim).items() if n in before} == before


async def test_pods_written_for_volcano_or_kueue_are_placed_by_baton(tmp_path: Path) -> None:
    """A Volcano job's pods name Volcano's scheduler (its job controller writes
    ``schedulerName: volcano``), and Kueue's plain pods name none, so the API server
    fills in ``default-scheduler``. Neither scheduler runs beside Baton: the webhook
    hands every pod that names a gang to Baton, and both gangs are placed whole."""
    async with three_teams(tmp_path) as s:
        api, custom, sim = s.api, s.custom, s.sim
        await job(api, custom, "vc-job", min_member=1, tasks=[(1, 8)], ns="team-a",
                  schedulerName="volcano")  # fmt: skip
        labels, notes = {keys.KUEUE_GROUP: "kq"}, {keys.KUEUE_TOTAL: "1"}
        plain = member("kq-0", gpus=8, labels=labels, annotations=notes)
        del plain["spec"]["schedulerName"]
        await api.create_namespaced_pod("team-b", plain)
        await until(lambda: running(sim, "a", "vc-job"), within=60,
                    what="the Volcano job (schedulerName volcano) Running")  # fmt: skip
        await until(lambda: bool(bound(sim, "team-b", "kq-")), within=60,
                    what="the Kueue pod (no schedulerName) bound")  # fmt: skip
        for ns, name in (("team-a", "vc-job-t0-0"), ("team-b", "kq-0")):
            assert sim.store.get("pods", ns, name)["spec"]["schedulerName"] == "baton"
