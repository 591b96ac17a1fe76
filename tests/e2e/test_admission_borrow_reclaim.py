"""End to end on simcluster: a team borrows idle nodes for a gang beyond its quota (submitted
before its in-quota gang, which still gets the team's own node); the owner submits work; the
borrower is preempted whole and the owner runs; the borrower's bare pods are recreated and
it runs again once the owner's work ends. The path includes the webhook (simcluster calls
it on create), bridge, admission, gang and actuator, all over a real nats-server.

Mirrors Volcano's ``test/e2e/schedulingaction/reclaim.go`` ("Reclaim": a queue's job
reclaimed for another queue's; its tasks are pending again, not lost, and run when
resources come back) and Kueue's ClusterQueue reclaim-within-cohort preemption tests
(a borrowing workload evicted and requeued, admitted again once quota frees)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tests.e2e.admitting import admitting, gpu_pod, submit
from tests.pipeline import stack, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

TEAMS = """
teams:
  - name: a
    namespaces: [team-a]
    pools: [pa]
    borrow: {gpus: 16}
  - name: b
    namespaces: [team-b]
    pools: [pb]
    priority: 10
"""

wait = functools.partial(until, within=45.0, step=0.2)  # every wait here


async def test_borrower_is_preempted_whole_and_the_owner_runs(tmp_path: Path) -> None:
    pools, namespaces = ["pa", "pb", "pb"], ["team-a", "team-b"]  # nodes in name order
    async with stack(nodes=3, services=False, pools=pools, namespaces=namespaces) as s:
        core_api, custom, sim, url, nodes = s.api, s.custom, s.sim, s.url, s.nodes

        async with admitting(url, sim, custom, teams=TEAMS, folder=tmp_path) as admission:

            async def tainted() -> bool:
                items = (await core_api.list_node()).items
                return all(
                    any(t.key == "baton.io/team" for t in n.spec.taints or []) for n in items
                )

            await wait(tainted, what="team taints on every node")
            await wait(lambda: admission.ready, what="admission caught up")

            async def placement(ns: str) -> dict[str, str]:
                pods = (await core_api.list_namespaced_pod(ns)).items
                return {p.metadata.name: p.spec.node_name or "" for p in pods}

            # the borrower first and the in-quota gang right behind it: the borrower must
            # run wholly on b's idle nodes and leave a's own node to a's in-quota gang
            await submit(core_api, custom, "team-a", "extra", 2)  # 16 GPUs: beyond a's quota
            await submit(core_api, custom, "team-a", "own", 1)  # 8 GPUs: within it

            async def a_running() -> dict[str, str] | None:
                got = await placement("team-a")
                return got if len(got) == 3 and all(got.values()) else None

            first = await wait(a_running, what="team a's two gangs bound")
            uids = {p.metadata.name: p.metadata.uid
                    for p in (await core_api.list_namespaced_pod("team-a")).items}  # fmt: skip
            assert {first["extra-0"], first["extra-1"]} == {nodes[1], nodes[2]}  # b's nodes
            assert first["own-0"] == nodes[0]  # a's own node
            extra = await custom.get_namespaced_custom_object(
                "scheduling.x-k8s.io", "v1alpha1", "team-a", "podgroups", "extra"
            )
            assert extra["metadata"]["annotations"]["baton.io/borrowing"] == "true"

            await submit(core_api, custom, "team-b", "mine", 1)

            async def owner_runs() -> bool:
                b = await placement("team-b")
                a = await placement("team-a")
                return bool(b.get("mine-0")) and "extra-0" not in a and "extra-1" not in a

            await wait(owner_runs, what="the borrower evicted whole and the owner bound")
            after = await placement("team-a")
            assert after["own-0"] == first["own-0"]  # the in-quota gang kept running

            # its bare pods are recreated, unbound, and wait in a's queue for GPUs again
            async def recreated() -> dict[str, str] | None:
                pods = {p.metadata.name: p for p in (await core_api.list_namespaced_pod(
                    "team-a")).items}  # fmt: skip
                copies = {
                    n: (p.metadata.annotations or {}).get("baton.io/recreated-from", "")
                    for n, p in pods.items() if n.startswith("extra-") and not p.spec.node_name
                }  # fmt: skip
                return copies if len(copies) == 2 and all(copies.values()) else None

            copies = await wait(recreated, what="the reclaimed gang's bare pods recreated unbound")
            assert copies == {n: uids[n] for n in ("extra-0", "extra-1")}  # each its own
            waiting = admission.state.gangs["team-a/extra"]
            assert not waiting.admitted and waiting.qkey is not None

            # lone Baton pods are gangs of one: b has 8 GPUs of quota left, for one of them
            for name in ("solo-1", "solo-2"):
                await core_api.create_namespaced_pod("team-b", gpu_pod(name, scheduler="baton"))

            async def one_solo_runs() -> bool:
                b = await placement("team-b")
                state = admission.state
                waiting = state.gangs.get("team-b/solo-2")
                return (
                    bool(b.get("solo-1"))
                    and waiting is not None
                    and ("may not borrow" in waiting.reason)
                )

            await wait(
                one_solo_runs, what="the first lone pod admitted and bound, the second queued"
            )
            assert not (await placement("team-b"))["solo-2"]

            # b's work ends: the recreated gang is admitted again and placed whole
            await custom.delete_namespaced_custom_object(
                "scheduling.x-k8s.io", "v1alpha1", "team-b", "podgroups", "mine"
            )
            for name in ("mine-0", "solo-1", "solo-2"):
                await core_api.delete_namespaced_pod(name, "team-b")

            async def placed_again() -> bool:
                a = await placement("team-a")
                return {a.get("extra-0"), a.get("extra-1")} == {nodes[1], nodes[2]}

            await wait(placed_again, what="the recreated gang placed again on b's idle nodes")
