"""EASY backfill through the whole path on simcluster: bridge -> gang -> actuator.

Three 8-GPU nodes. A gang expected to run an hour holds two; a three-node head ("big")
waits for them and reserves the cluster. Of three one-node jobs behind it, only the one
expected to end before the head can start (10 minutes) is bound on the head's free
node; the one with no estimate and the one expected to take two hours wait."""

from __future__ import annotations

import pytest

from baton.proto import keys
from baton.services.gang import main as gang
from tests.e2e.admitting import gang_objects
from tests.pipeline import stack, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
NS = "research"
PODGROUPS = ("scheduling.x-k8s.io", "v1alpha1", NS, "podgroups")
GANG = gang.Settings(cycle_interval=0.1)  # EASY is on by default; estimates from annotations


async def test_only_a_job_expected_to_end_before_the_head_starts_runs_on_its_nodes() -> None:
    async with stack(nodes=3, namespaces=[NS], gang_settings=GANG) as s:
        api, custom, sim = s.api, s.custom, s.sim

        async def submit(name: str, size: int, expected: str = "") -> None:
            group, pods = gang_objects(name, size)
            await custom.create_namespaced_custom_object(*PODGROUPS, group)
            for pod in pods:
                pod["spec"]["schedulerName"] = "baton"  # no webhook here to set it
                if expected:
                    pod["metadata"]["annotations"] = {keys.EXPECTED_DURATION: expected}
                await api.create_namespaced_pod(NS, pod)

        def nodes(group: str) -> dict[str, str]:
            pods = sim.store.list("pods", namespace=NS)[0]
            return {
                p["metadata"]["name"]: p["spec"].get("nodeName", "")
                for p in pods
                if p["metadata"]["name"].startswith(f"{group}-")
            }

        await submit("long", 2, expected="1h")
        await until(lambda: all(nodes("long").values()) and len(nodes("long")) == 2,
                    within=30, what="the one-hour gang bound on two nodes")  # fmt: skip
        # creation times have one-second resolution: in the same second, the queue goes
        # by name, so the names keep the order of submission
        await submit("big", 3)  # needs every node: waits an hour for "long"
        await submit("guess", 1)  # no estimate: never backfilled on a guess
        await submit("overrun", 1, expected="2h")  # would still run when "big" could start
        await submit("short", 1, expected="10m")
        await until(lambda: all(nodes("short").values()) and len(nodes("short")) == 1,
                    within=30, what="the 10-minute job bound on the head's free node")  # fmt: skip
        # "guess" and "overrun" are ahead of "short" in the queue: had either been
        # allowed the free node, it would have had it first
        assert not any(nodes("guess").values()), nodes("guess")
        assert not any(nodes("overrun").values()), nodes("overrun")
        assert not any(nodes("big").values()), nodes("big")
