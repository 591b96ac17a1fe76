"""The whole path on simcluster: bridge -> gang -> actuator -> simcluster's API.

- Deadlock: 150 free 8-GPU nodes, two 100-node gangs at once. One runs with all 100
  pods, the other has none bound until the first finishes, then runs whole.
- Restart: a running gang of bare pods whose node the health service drains is recreated whole
  (same names, same containers) and placed again off the failed node.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from baton.libs.runner import Runner
from baton.services.gang.core import State
from baton.services.simcluster.world.workload import Job
from tests.pipeline import drain_as_health_does, stack, until
from tests.support.sim import Sim

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
C = "c1"
NS = "team-t1"


@dataclass
class System:
    sim: Sim
    gang: Runner[State]

    def pods(self, job: str) -> list[dict[str, Any]]:
        objs, _ = self.sim.store.list(
            "pods", namespace=NS, label_selector=f"sim.baton.io/job={job}"
        )
        return list(objs)

    def bound(self, job: str) -> int:
        return sum(1 for p in self.pods(job) if p["spec"].get("nodeName"))

    def finished(self, job: str) -> bool:
        return all(
            p.get("status", {}).get("phase") in ("Succeeded", "Failed") for p in self.pods(job)
        )


@contextlib.asynccontextmanager
async def system(nodes: int) -> AsyncIterator[System]:
    """nats-server, simcluster, and the bridge, gang and actuator services in this loop."""
    async with stack(nodes=nodes, cluster=C) as s:
        yield System(sim=s.sim, gang=s.gang)


async def test_two_gangs_that_cannot_both_fit_run_one_after_the_other_never_half() -> None:
    async with system(150) as s:
        jobs = [Job(job_id=j, submit_s=0, gpus=800, duration_s=4.0, team="t1") for j in ("a", "b")]
        s.sim.cluster.replay(jobs)
        await until(
            lambda: len(s.pods("a")) == len(s.pods("b")) == 100, within=30, what="pods created"
        )
        first = ""
        deadline = time.monotonic() + 120
        while not (s.bound("a") == s.bound("b") == 100):
            assert time.monotonic() < deadline, f"bound: a={s.bound('a')} b={s.bound('b')}"
            a, b = s.bound("a"), s.bound("b")
            if not first and (a or b):
                first = "a" if a else "b"
            if first:
                second = "b" if first == "a" else "a"
                # The second gang has nothing bound while the first still runs.
                assert s.bound(second) == 0 or s.finished(first), f"a={a} b={b}"
            await asyncio.sleep(0.05)
        assert s.finished(first) or s.bound(first) == 100


async def test_a_gang_whose_node_health_drains_is_restarted_whole() -> None:
    async with system(8) as s:
        s.sim.cluster.replay([Job(job_id="r", submit_s=0, gpus=32, duration_s=3600, team="t1")])
        await until(lambda: s.bound("r") == 4, within=30, what="the gang to be bound")
        old = {p["metadata"]["uid"]: p for p in s.pods("r")}
        victim = sorted(p["spec"]["nodeName"] for p in old.values())[0]
        drain_as_health_does(s.sim, victim)

        def restarted() -> bool:
            fresh = [p for p in s.pods("r") if p["metadata"]["uid"] not in old]
            return len(fresh) == len(s.pods("r")) == 4 and s.bound("r") == 4

        await until(restarted, within=60, what="the gang to be recreated and placed again")
        assert victim not in {p["spec"]["nodeName"] for p in s.pods("r")}
        # Bare pods come back under their own names, as written (not as a pause pod).
        names = sorted(p["metadata"]["name"] for p in old.values())
        assert sorted(p["metadata"]["name"] for p in s.pods("r")) == names
        was = {p["metadata"]["name"]: p["spec"]["containers"] for p in old.values()}
        assert all(p["spec"]["containers"] == was[p["metadata"]["name"]] for p in s.pods("r"))
