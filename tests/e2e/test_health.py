"""The whole health path on simcluster: the agent fleet reads the simulated hardware,
health judges, the actuator taints, the gang service restarts, the node comes back.

- A fault on a node of a running gang: the node is quarantined (the job may
  checkpoint: nothing restarts yet), then drained; the gang restarts whole on other
  nodes; the node asks for a reboot; after the repair a preflight pod passes on it and
  it returns to service.
- A node a person cordoned stays cordoned: Baton quarantines and returns it with its
  own taints only.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgspec
import nats
import pytest
from kubernetes_asyncio.client import CoreV1Api

from baton.proto import keys, subjects
from baton.proto.health import Note
from baton.services.health import main as health
from baton.services.simcluster.world.spec import Delays
from baton.services.simcluster.world.workload import Job
from tests.pipeline import Services, running_fleet, running_services, until
from tests.support.nats import running_nats
from tests.support.sim import Sim, running_sim

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
NS = "team-t1"
SETTINGS = health.Settings(
    tick_s=0.1, silence_after_s=3.0, drain_grace_s=2.0, drain_timeout_s=30.0,
    remediation_recheck_s=1.0, release_interval_s=0.5, preflight_timeout_s=30.0,
)  # fmt: skip


@dataclass
class System:
    sim: Sim
    services: Services
    url: str

    def node(self, name: str) -> dict[str, Any]:
        return self.sim.store.get("nodes", None, name)

    def taints(self, name: str) -> set[str]:
        return {t["key"] for t in self.node(name)["spec"].get("taints") or ()}

    def note(self, name: str) -> Note | None:
        raw = (self.node(name)["metadata"].get("annotations") or {}).get(keys.HEALTH)
        return msgspec.json.decode(raw, type=Note) if raw else None

    def healthy(self, name: str) -> bool:
        note = self.note(name)
        labels = self.node(name)["metadata"].get("labels") or {}
        return (note is not None and note.state == "healthy" and note.validated > 0
                and not self.taints(name) and keys.REMEDIATION not in labels)  # fmt: skip

    def pods(self, job: str) -> list[dict[str, Any]]:
        found, _ = self.sim.store.list(
            "pods", namespace=NS, label_selector=f"sim.baton.io/job={job}"
        )
        return list(found)

    def bound(self, job: str) -> dict[str, str]:
        """uid -> node of the job's live, bound pods."""
        live = [p for p in self.pods(job) if not p["metadata"].get("deletionTimestamp")]
        return {
            p["metadata"]["uid"]: p["spec"]["nodeName"] for p in live if p["spec"].get("nodeName")
        }


@contextlib.asynccontextmanager
async def system(nodes: int) -> AsyncIterator[System]:
    async with (
        running_nats() as url,
        running_sim(nodes=nodes, delays=Delays(preflight_s=0.3)) as sim,
    ):
        sim.store.create("namespaces", {"metadata": {"name": SETTINGS.preflight_namespace}})
        async with (
            running_services(url, sim, health_settings=SETTINGS) as services,
            running_fleet(url, sim),
        ):
            s = System(sim=sim, services=services, url=url)
            names = sim.cluster.node_names()
            await until(lambda: all(s.healthy(n) for n in names), within=60,
                        what="every node's first preflight")  # fmt: skip
            yield s


async def test_a_fault_under_a_running_gang_restarts_it_elsewhere_and_the_node_returns() -> None:
    async with system(8) as s:
        s.sim.cluster.replay([Job(job_id="r", submit_s=0, gpus=32, duration_s=3600, team="t1")])
        await until(lambda: len(s.bound("r")) == 4, within=30, what="the gang to be bound")
        old = s.bound("r")
        victim = sorted(old.values())[0]

        # Xid 63: a row waits for remapping. The job may checkpoint before the drain.
        s.sim.cluster.inject("xid", victim, xid=63, gpu=0)
        quarantined_first: list[bool] = []

        def drained() -> bool:
            taints = s.taints(victim)
            if taints == {keys.UNHEALTHY}:  # quarantined, not drained: nothing restarted yet
                quarantined_first.append(set(old) <= set(s.bound("r")))
            return keys.DRAINING in taints

        await until(drained, within=30, what="the node quarantined, then drained")
        assert quarantined_first and all(quarantined_first)

        def restarted() -> bool:
            now = s.bound("r")
            return len(now) == 4 and not set(now) & set(old)

        await until(restarted, within=60, what="the gang restarted whole")
        assert victim not in s.bound("r").values()
        await until(lambda: s.note(victim) is not None and s.note(victim).state == "remediating",  # type: ignore[union-attr]
                    within=30, what="the node to ask for a repair")  # fmt: skip
        labels = s.node(victim)["metadata"]["labels"]
        assert labels[keys.REMEDIATION] == "reboot"

        s.sim.cluster.heal("xid", victim)  # the GPU reset a reboot does
        await until(lambda: s.healthy(victim), within=60, what="the node back in service")
        note = s.note(victim)
        assert note is not None and note.reason == "the preflight passed"


async def test_a_node_a_person_cordoned_stays_cordoned() -> None:
    async with system(4) as s:
        victim = s.sim.cluster.node_names()[1]
        api = CoreV1Api(s.services.client)
        await api.patch_node(victim, {"spec": {"unschedulable": True}})  # kubectl cordon
        s.sim.cluster.inject("gpu-lost", victim, gpu=1)
        await until(lambda: keys.DRAINING in s.taints(victim), within=30, what="drained")
        s.sim.cluster.heal("gpu-lost", victim)
        await until(lambda: s.healthy(victim), within=60, what="the node back")
        assert s.node(victim)["spec"].get("unschedulable") is True
        actions = await history_subjects(s.url, f"baton.c1.{subjects.ACTION}.>")
        assert not [a for a in actions if ".cordon." in a]
        assert [a for a in actions if ".mark-node." in a]  # it did act, with its own marks


async def history_subjects(url: str, filter_: str) -> list[str]:
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info(
            subjects.stream_name("c1", "actions"), subjects_filter=filter_
        )
        return list(info.state.subjects or {})
    finally:
        await nc.close()
