"""End to end on simcluster: no head-of-line blocking. The demo's case: the head of a
team's queue needs more than what is left of the team's quota; the smaller gang
behind it is admitted and bound anyway. And a PodGroup whose pods never come does not
block its team: it is set aside after its scheduleTimeoutSeconds, with an Event.
Webhook, bridge, admission, gang, actuator and reporter over a real nats-server."""

from __future__ import annotations

from pathlib import Path

import pytest

from baton.libs.runner import serve
from baton.services.reporter import main as reporter_main
from tests.e2e.admitting import admitting, common, submit
from tests.pipeline import stack, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]  # its waits add up to 165 s

TEAMS = """
teams:
  - name: a
    namespaces: [team-a]
    pools: [pa]
    quota: {gpus: 16}
"""


async def test_a_head_over_quota_and_an_empty_podgroup_block_nobody(tmp_path: Path) -> None:
    async with stack(nodes=3, services=False, pools=["pa"] * 3, namespaces=["team-a"]) as s:
        core_api, custom, sim, url = s.api, s.custom, s.sim, s.url

        reporter = reporter_main.Settings(**common(url), tick_every=0.2)
        async with admitting(
            url, sim, custom, teams=TEAMS, folder=tmp_path, cycle_interval=0.2,
            beside=[serve(reporter_main.SPEC, reporter)],
        ) as admission:  # fmt: skip
            await until(lambda: admission.ready, what="admission caught up", within=30)

            async def placement() -> dict[str, str]:
                pods = (await core_api.list_namespaced_pod("team-a")).items
                return {p.metadata.name: p.spec.node_name or "" for p in pods}

            # a PodGroup whose pods never come, first in the team's queue
            ghost = {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "ghost"},
                "spec": {"minMember": 2, "scheduleTimeoutSeconds": 2},
            }
            await custom.create_namespaced_custom_object(
                "scheduling.x-k8s.io", "v1alpha1", "team-a", "podgroups", ghost
            )
            await submit(core_api, custom, "team-a", "first", 1)  # 8 of 16 GPUs

            async def first_runs() -> bool:
                return bool((await placement()).get("first-0"))

            await until(first_runs, what="the first gang bound behind the empty PodGroup",
                        within=45)  # fmt: skip
            await submit(core_api, custom, "team-a", "big", 2)  # 16 GPUs, 8 left in quota
            await submit(core_api, custom, "team-a", "small", 1)  # 8 GPUs: fits what is left

            async def small_runs() -> bool:
                return bool((await placement()).get("small-0"))

            await until(small_runs, what="the small gang bound past the blocked head", within=45)
            got = await placement()
            assert not got["big-0"] and not got["big-1"]  # the head still waits for quota
            # why it waits is brought up to date on admission's next tick (0.2 s here)
            await until(
                lambda: "uses 16 of its 16 GPU quota" in admission.state.gangs["team-a/big"].reason,
                what="the head told the quota the small gang took", within=10,
            )  # fmt: skip

            async def ghost_event() -> list[str]:
                events = (await core_api.list_namespaced_event("team-a")).items
                return [
                    e.message
                    for e in events
                    if e.involved_object.name == "ghost" and "set aside" in (e.message or "")
                ]

            told = await until(ghost_event, what="an Event setting the empty PodGroup aside",
                               within=45)  # fmt: skip
            assert any("0 of 2 member pods" in m for m in told), told
            # both the gang service (its verdict) and admission (GangQueued) say so
            await until(lambda: admission.state.gangs["team-a/ghost"].aside,
                        what="admission setting the empty PodGroup aside", within=30)  # fmt: skip
