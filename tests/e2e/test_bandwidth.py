"""Egress shares on simcluster, through the whole path: pods placed and started by the
simulated cluster, their addresses from the bridge, the bandwidth service on the runner,
the agent fleet's simulated egress, per-node limits on each node's subject; a team
weight change moves them; with annotations on, the actuator writes each pod's limit
into ``kubernetes.io/egress-bandwidth`` (what Cilium's bandwidth manager reads)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from kubernetes_asyncio.client import CoreV1Api

from baton.libs.bus import Bus
from baton.proto.admission import TeamsLoaded
from baton.proto.bandwidth import NodeLimits
from baton.proto.codec import Undecodable, decode
from baton.proto.teams import Egress, Team, TeamConfig
from baton.services.agent.egress import FleetEgress
from baton.services.bandwidth.main import SPEC, Settings
from tests.pipeline import running, running_services, until
from tests.support.nats import running_nats
from tests.support.sim import running_sim

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
C = "c1"
M = 1_000_000


def teams(a: float, b: float) -> TeamConfig:
    return TeamConfig(teams=(
        Team(name="a", namespaces=("ns-a",), egress=Egress(weight=a)),
        Team(name="b", namespaces=("ns-b",), egress=Egress(weight=b)),
    ))  # fmt: skip


def worker(name: str, team: str) -> dict[str, Any]:
    container = {"name": "w", "image": "ghcr.io/acme/fetch:1",
                 "resources": {"requests": {"nvidia.com/gpu": "1"},
                               "limits": {"nvidia.com/gpu": "1"}}}  # fmt: skip
    return {
        "metadata": {"name": name, "labels": {"baton.io/team": team}},
        "spec": {"schedulerName": "baton", "containers": [container]},
    }


@contextlib.asynccontextmanager
async def fleet(bus: Bus) -> AsyncIterator[FleetEgress]:
    """Every pod wants far more than the 200 Mbit/s capacity: shares are the weights."""
    sim = FleetEgress(bus, seed=1, mean_bps=10_000 * M, egress_s=0.3)
    sim.reports = lambda at: [  # type: ignore[method-assign]
        _saturated(r) for r in FleetEgress.reports(sim, at)
    ]
    task = asyncio.create_task(sim.run())
    try:
        yield sim
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _saturated(report: Any) -> Any:
    """Pods that send at their limits (the seeded demand could leave one idle)."""
    pods = tuple(msgspec.structs.replace(p, internet_bps=p.limit_bps) for p in report.pods)
    return msgspec.structs.replace(report, pods=pods)


async def test_shares_follow_weights_and_annotations_follow_limits(tmp_path: Path) -> None:
    teams_file = tmp_path / "teams.yaml"
    teams_file.write_text(msgspec.json.encode(msgspec.to_builtins(teams(3, 1))).decode())
    settings = Settings(capacity="200M", floor="1M", interval_s=0.2, teams_file=str(teams_file),
                        annotate=True, annotate_every_s=1.0)  # fmt: skip
    latest: dict[str, NodeLimits] = {}
    async with (
        running_nats() as url,
        running_sim(nodes=4) as sim,
        running_services(url, sim) as services,
        running(SPEC, url, settings),
    ):
        bus = await Bus.connect(url, cluster=C, name="test")
        try:

            async def on_limits(msg: Any) -> None:
                with contextlib.suppress(Undecodable):
                    limits = decode(msg.data, NodeLimits)
                    latest[limits.node] = limits

            await bus.nc.subscribe(f"baton.{C}.bandwidth.limits.*", cb=on_limits)
            api = CoreV1Api(services.client)
            for team in "ab":
                await api.create_namespace({"metadata": {"name": f"ns-{team}"}})
                for i in range(2):
                    await api.create_namespaced_pod(f"ns-{team}", worker(f"{team}-{i}", team))

            def shares() -> dict[str, int]:
                out: dict[str, int] = {}
                for limits in latest.values():
                    for p in limits.limits:
                        out[p.team] = out.get(p.team, 0) + p.ceil_bps
                return out

            def nodes_hold_their_own_pods() -> bool:
                placed = {p["metadata"]["name"]: p["spec"].get("nodeName")
                          for p in sim.store.list("pods")[0]}  # fmt: skip
                listed = {p.pod: n for n, lim in latest.items() for p in lim.limits}
                return len(listed) == 4 and all(placed[pod] == n for pod, n in listed.items())

            async with fleet(bus):
                await until(lambda: shares() == {"a": 150 * M, "b": 50 * M}, within=60,
                            what="a 150 and b 50 of 200 Mbit/s (weights 3:1)")  # fmt: skip
                assert nodes_hold_their_own_pods()
                even = TeamsLoaded(config=teams(1, 1), at=0.0)
                await bus.publish(f"baton.{C}.admission.teams", even, msg_id="even")
                await until(
                    lambda: shares() == {"a": 100 * M, "b": 100 * M},
                    within=30,
                    what="100/100 after the weight change",
                )

                def annotated() -> bool:
                    limits = {p.pod: p.ceil_bps for lim in latest.values() for p in lim.limits}
                    pods = sim.store.list("pods")[0]
                    notes = {p["metadata"]["name"]: (p["metadata"].get("annotations") or {})
                             for p in pods}  # fmt: skip
                    return all(
                        notes[pod].get("kubernetes.io/egress-bandwidth") == f"{bps // M}M"
                        and notes[pod].get("baton.io/egress-limit") == f"{bps // M}M"
                        for pod, bps in limits.items()
                    )

                await until(annotated, within=30, what="each pod annotated with its limit")
        finally:
            await bus.close()
