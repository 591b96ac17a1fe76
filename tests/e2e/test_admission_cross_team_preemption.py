"""Cross-team preemption end to end on simcluster: team b runs a low-priority gang on GPUs
borrowed from team a (a's nodes, idle); a's high-priority gang comes, needs its quota back,
and b's borrowing gang is preempted whole (every member evicted, none left running), a's
gang is bound on its own nodes, and b's in-quota gang keeps running. Webhook, bridge,
admission, gang and actuator over a real nats-server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.admitting import admitting, submit
from tests.pipeline import stack, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

TEAMS = """
teams:
  - name: a
    namespaces: [team-a]
    pools: [pa]
  - name: b
    namespaces: [team-b]
    pools: [pb]
    borrow: {gpus: 16}
"""


async def test_a_high_priority_gang_takes_its_quota_back_from_another_teams_borrower_whole(
    tmp_path: Path,
) -> None:
    pools, namespaces = ["pa", "pa", "pb"], ["team-a", "team-b"]  # a: 16 GPUs, b: 8
    async with stack(nodes=3, services=False, pools=pools, namespaces=namespaces) as s:
        core_api, custom, sim, url, nodes = s.api, s.custom, s.sim, s.url, s.nodes
        for name, value in (("low", 0), ("high", 1000)):
            await custom.create_cluster_custom_object(
                "scheduling.k8s.io", "v1", "priorityclasses",
                {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                 "metadata": {"name": name}, "value": value},
            )  # fmt: skip

        async with admitting(
            url, sim, custom, teams=TEAMS, folder=tmp_path, cycle_interval=0.5
        ) as admission:

            async def tainted() -> bool:
                items = (await core_api.list_node()).items
                return all(
                    any(t.key == "baton.io/team" for t in n.spec.taints or []) for n in items
                )

            await until(tainted, what="team taints on every node", within=45)
            await until(lambda: admission.ready, what="admission caught up", within=30)

            async def placement(ns: str) -> dict[str, str]:
                pods = (await core_api.list_namespaced_pod(ns)).items
                return {p.metadata.name: p.spec.node_name or "" for p in pods}

            # b fills its own node, then borrows a's two idle nodes for a low-priority gang
            await submit(core_api, custom, "team-b", "own", 1, priority_class="low")
            await submit(core_api, custom, "team-b", "extra", 2, priority_class="low")

            async def b_running() -> dict[str, str] | None:
                got = await placement("team-b")
                return got if len(got) == 3 and all(got.values()) else None

            first = await until(b_running, what="team b's two gangs bound", within=45)
            assert {first["extra-0"], first["extra-1"]} == {nodes[0], nodes[1]}  # a's nodes
            assert first["own-0"] == nodes[2]

            # a's high-priority gang needs all of a's quota: the borrower goes, whole
            await submit(core_api, custom, "team-a", "urgent", 2, priority_class="high")

            async def swapped() -> dict[str, str] | None:
                a, b = await placement("team-a"), await placement("team-b")
                urgent = {a.get("urgent-0"), a.get("urgent-1")}
                left = [n for n in ("extra-0", "extra-1") if b.get(n)]
                return a if urgent == {nodes[0], nodes[1]} and not left else None

            a = await until(swapped, what="the borrower evicted whole, a's gang bound", within=60)
            assert set(a) == {"urgent-0", "urgent-1"}
            after = await placement("team-b")
            assert after.get("own-0") == nodes[2]  # b's in-quota gang kept running
            assert not any(after.get(n) for n in ("extra-0", "extra-1"))  # no member left bound
            extra = admission.state.gangs["team-b/extra"]
            assert not extra.admitted and extra.qkey is not None  # back in b's queue
            assert admission.state.gangs["team-a/urgent"].admitted
