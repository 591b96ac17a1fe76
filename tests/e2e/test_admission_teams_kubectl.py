"""End to end on simcluster: a kubectl user sees each team's quota, usage and queue with
real ``kubectl get teams`` (no NATS credentials): gangs that wait are listed in order
with their positions and reasons, and the queue moves up when one is placed. The path
is the webhook, bridge, admission (which computes each team's status), gang and the
actuator (which writes the ``Team`` objects), over a real nats-server.

Mirrors what Kueue users read with ``kubectl get clusterqueue`` and the visibility API's
pending workloads (positions in the queue)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.e2e.admitting import admitting, submit
from tests.pipeline import stack, until
from tests.support.kubectl import kubectl, needs_kubectl

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120), needs_kubectl]

TEAMS = """
teams:
  - name: a
    namespaces: [team-a]
    pools: [pa]
    quota: {gpus: 16}
  - name: b
    namespaces: [team-b]
    pools: [pb]
"""
POSITIONS = "jsonpath={range .status.queue[*]}{.position} {.name}{'\\n'}{end}"


def rows(table: str) -> dict[str, dict[str, str]]:
    """``kubectl get -o wide`` as {name: {column: cell}}: each column starts where its
    header does (an empty cell is blank, as kubectl prints a JSONPath that found nothing)."""
    lines = [line for line in table.splitlines() if line.strip()]
    if not lines:
        return {}  # "No resources found" (on stderr)
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", lines[0])]
    names = [lines[0][a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    out = {}
    for line in lines[1:]:
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        out[cells[0]] = dict(zip(names, cells, strict=True))
    return out


async def test_kubectl_get_teams_shows_queues_with_positions(tmp_path: Path) -> None:
    pools, namespaces = ["pa", "pa", "pb"], ["team-a", "team-b"]  # nodes in name order
    async with stack(nodes=3, services=False, pools=pools, namespaces=namespaces) as s:
        core_api, custom, sim, url = s.api, s.custom, s.sim, s.url
        config = sim.kubeconfig

        async def teams() -> dict[str, dict[str, str]]:
            return rows(await kubectl(config, "get", "teams", "-o", "wide"))

        async def placed(*names: str) -> bool:
            pods = (await core_api.list_namespaced_pod("team-a")).items
            return set(names) <= {p.metadata.name for p in pods if p.spec.node_name}

        async with admitting(
            url, sim, custom, teams=TEAMS, folder=tmp_path, cycle_interval=0.3
        ) as admission:
            await until(lambda: admission.ready, what="admission caught up", within=30)
            await submit(core_api, custom, "team-a", "r1", 1)  # 8 of a's 16
            await submit(core_api, custom, "team-a", "r2", 1)  # 16 of 16
            await until(lambda: placed("r1-0", "r2-0"), what="r1 and r2 bound", within=45)
            await submit(core_api, custom, "team-a", "first", 1)
            await submit(core_api, custom, "team-a", "second", 1)

            async def queued() -> dict[str, str] | None:
                got = (await teams()).get("a")
                return got if got and got["WAITING"] == "2" else None

            a = await until(queued, what="team a's two waiting gangs in kubectl", within=45)
            counts = [a[k] for k in ("QUOTA", "USED", "BORROWED", "ADMITTED")]
            assert counts == ["16", "16", "0", "2"]
            assert (a["HEAD"], a["NEXT"]) == ("team-a/first", "team-a/second")
            assert "team 'a' uses 16 of its 16 GPU quota" in a["WHY"], a["WHY"]
            b = (await teams())["b"]
            assert (b["QUOTA"], b["USED"], b["WAITING"], b["HEAD"]) == ("8", "0", "0", "")
            positions = await kubectl(config, "get", "team", "a", "-o", POSITIONS)
            assert positions.split("\n")[:2] == ["0 team-a/first", "1 team-a/second"]

            # r1 ends: its 8 GPUs go to the head, and the queue moves up
            await core_api.delete_namespaced_pod("r1-0", "team-a")
            await custom.delete_namespaced_custom_object(
                "scheduling.x-k8s.io", "v1alpha1", "team-a", "podgroups", "r1"
            )

            async def moved() -> dict[str, str] | None:
                got = (await teams()).get("a")
                return got if got and got["WAITING"] == "1" else None

            a = await until(moved, what="the queue moved up after r1 ended", within=45)
            assert (a["HEAD"], a["NEXT"], a["USED"]) == ("team-a/second", "", "16")
            await until(lambda: placed("first-0"), what="first placed", within=45)
            shown = json.loads(await kubectl(config, "get", "team", "a", "-o", "json"))
            assert [(g["position"], g["name"]) for g in shown["status"]["queue"]] == [
                (0, "team-a/second")
            ]
