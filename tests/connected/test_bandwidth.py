"""The bandwidth service on the runner and the agent's NATS side, on a real nats-server:
pods on K8S and egress telemetry in, per-node limits out on each node's own subject;
a team config change moves them; a restarted agent finds its limits by direct get."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from baton.libs.bus import Bus
from baton.libs.runner import Runner
from baton.proto import subjects
from baton.proto.actions import Annotate
from baton.proto.admission import TeamsLoaded
from baton.proto.bandwidth import Allocation, NodeEgress, PodEgress, egress_subject
from baton.proto.codec import decode
from baton.proto.k8s import PodEvent
from baton.proto.teams import Egress, Team, TeamConfig
from baton.services.agent.egress import FleetEgress, Follower
from baton.services.bandwidth import core
from baton.services.bandwidth.main import SPEC, Settings
from tests.pipeline import running, until
from tests.support.builders import pod
from tests.support.nats import running_nats

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]
C = "c1"
M = 1_000_000
TEAMS = """
teams:
  - {name: a, namespaces: [ns-a], egress: {weight: 3}}
  - {name: b, namespaces: [ns-b], egress: {weight: 1, tier: normal}}
"""


@contextlib.asynccontextmanager
async def bandwidth(url: str, tmp_path: Path, **settings: Any) -> AsyncIterator[Runner[core.State]]:
    teams = tmp_path / "teams.yaml"
    teams.write_text(TEAMS)
    defaults: dict[str, Any] = {"capacity": "100M", "interval_s": 0.1, "floor": "1M"}
    config = Settings(teams_file=str(teams), **{**defaults, **settings})
    async with running(SPEC, url, config) as runner:
        yield runner


async def publish_pods(bus: Bus, *specs: tuple[str, str, str]) -> None:
    """(name, team, node) each: a Running pod in the team's namespace, with an address."""
    for i, (name, team, node) in enumerate(specs):
        p = pod(name, namespace=f"ns-{team}", node_name=node, labels={"baton.io/team": team})
        p = msgspec.structs.replace(p, pod_ip=f"10.7.0.{i + 2}")
        subject = subjects.subject(C, "k8s", "pod", p.namespace, p.name)
        await bus.publish(subject, PodEvent(op="upsert", at=time.time(), pod=p), msg_id=p.uid)


def limit(follower: Follower, name: str) -> int:
    latest = follower.latest
    if latest is None:
        return -1
    return next((p.ceil_bps for p in latest.limits if p.pod == name), -1)


async def saturate(bus: Bus, follower: Follower) -> None:
    """The node's agent reports every pod sending at its limit (they want more)."""
    limits = follower.latest
    assert limits is not None
    pods = tuple(
        PodEgress(namespace=p.namespace, pod=p.pod, uid=p.uid, internet_bps=p.ceil_bps,
                  limit_bps=p.ceil_bps)
        for p in limits.limits
    )  # fmt: skip
    report = NodeEgress(node=limits.node, at=time.time(), interval_s=1.0, pods=pods,
                        generation=limits.generation)  # fmt: skip
    await bus.publish(egress_subject(C, limits.node), report, msg_id=f"{limits.node}:{report.at}")


@contextlib.asynccontextmanager
async def following(bus: Bus, node: str) -> AsyncIterator[Follower]:
    follower = Follower(bus, node)
    task = asyncio.create_task(follower.run())
    try:
        yield follower
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_limits_reach_each_node_and_follow_a_team_weight_change(tmp_path: Path) -> None:
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster=C, name="test")
        try:
            await bus.ensure_streams()
            await publish_pods(bus, ("a-0", "a", "n1"), ("b-0", "b", "n2"))
            async with (
                bandwidth(url, tmp_path),
                following(bus, "n1") as n1,
                following(bus, "n2") as n2,
            ):
                await until(lambda: limit(n1, "a-0") > 0 and limit(n2, "b-0") > 0,
                            within=10, what="first limits on both nodes")  # fmt: skip
                assert [p.pod for p in n1.latest.limits] == ["a-0"]  # type: ignore[union-attr]
                assert [p.pod for p in n2.latest.limits] == ["b-0"]  # type: ignore[union-attr]

                async def contended(a: int, b: int) -> bool:
                    await saturate(bus, n1)
                    await saturate(bus, n2)
                    await asyncio.sleep(0.3)
                    return (limit(n1, "a-0"), limit(n2, "b-0")) == (a, b)

                await _eventually(lambda: contended(75 * M, 25 * M), what="75/25 split")
                before = n1.latest.generation  # type: ignore[union-attr]
                even = TeamConfig(teams=tuple(
                    Team(name=t, namespaces=(f"ns-{t}",), egress=Egress(weight=1)) for t in "ab"
                ))  # fmt: skip
                changed_at = time.monotonic()
                await bus.publish(f"baton.{C}.admission.teams", TeamsLoaded(config=even, at=1.0),
                                  msg_id="teams-1")  # fmt: skip
                await until(lambda: limit(n1, "a-0") == 50 * M and limit(n2, "b-0") == 50 * M,
                            within=10, what="50/50 after the weight change")  # fmt: skip
                print(
                    f"\nweight change -> both nodes' limits: {time.monotonic() - changed_at:.2f}s"
                )
                assert n1.latest.generation > before  # type: ignore[union-attr]
            # A restarted agent reads its node's latest limits, and only its node's.
            async with following(bus, "n2") as again:
                await until(lambda: again.latest is not None, within=10, what="fetched limits")
                assert [(p.pod, p.ceil_bps) for p in again.latest.limits] == [("b-0", 50 * M)]  # type: ignore[union-attr]
        finally:
            await bus.close()


async def _eventually(check: Any, *, what: str, within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")


async def test_the_fleet_sends_simulated_egress_and_shares_follow_it(tmp_path: Path) -> None:
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster=C, name="test")
        try:
            await bus.ensure_streams()
            await publish_pods(bus, *((f"a-{i}", "a", f"n{i % 2}") for i in range(4)),
                               *((f"b-{i}", "b", f"n{i % 2}") for i in range(4)))  # fmt: skip
            summaries: list[Allocation] = []

            async def on_summary(msg: Any) -> None:
                summaries.append(decode(msg.data, Allocation))

            await bus.nc.subscribe(f"baton.{C}.bandwidth.allocation", cb=on_summary)
            fleet = FleetEgress(bus, seed=3, mean_bps=20 * M, egress_s=0.2)
            async with bandwidth(url, tmp_path):
                task = asyncio.create_task(fleet.run())
                try:
                    await until(lambda: any(t.used_bps for s in summaries[-1:] for t in s.teams),
                                within=15, what="measured use in the allocation")  # fmt: skip
                finally:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            last = summaries[-1]
            assert {t.team for t in last.teams} == {"a", "b"}
            assert sum(t.assigned_bps for t in last.teams) <= 100 * M
            assert sorted(fleet.limits) == ["n0", "n1"]
        finally:
            await bus.close()


async def test_annotations_go_to_the_actuator_only_when_asked(tmp_path: Path) -> None:
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster=C, name="test")
        try:
            await bus.ensure_streams()
            await publish_pods(bus, ("a-0", "a", "n1"))
            seen: list[bytes] = []

            async def on_action(msg: Any) -> None:
                seen.append(msg.data)

            await bus.nc.subscribe(f"baton.{C}.action.annotate.>", cb=on_action)
            async with bandwidth(url, tmp_path, annotate=True), following(bus, "n1") as n1:
                await until(lambda: bool(seen) and n1.latest is not None, within=10,
                            what="an Annotate action and the limits")  # fmt: skip
            action: Annotate = decode(seen[0], Annotate)
            assert (action.namespace, action.name) == ("ns-a", "a-0")
            assert action.annotations["kubernetes.io/egress-bandwidth"] == "95M"  # 5% reserve
        finally:
            await bus.close()


async def test_a_recorded_session_replays_to_the_same_limits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from baton.services.cli import recording, replay
    from tests.connected.test_replay import history_settled

    path = tmp_path / "session.jsonl"
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster=C, name="test")
        try:
            await bus.ensure_streams()
            await publish_pods(bus, ("a-0", "a", "n1"), ("a-1", "a", "n2"), ("b-0", "b", "n2"))
            async with bandwidth(url, tmp_path), following(bus, "n2") as n2:
                await until(lambda: limit(n2, "b-0") > 0, within=10, what="limits on n2")
                await saturate(bus, n2)
                await bus.publish(f"baton.{C}.admission.teams",
                                  TeamsLoaded(config=TeamConfig(), at=1.0), msg_id="t")  # fmt: skip
                await until(lambda: limit(n2, "a-1") == limit(n2, "b-0"), within=10,
                            what="one default team: equal limits")  # fmt: skip
            await history_settled(url)
            with path.open("wb") as out:
                assert await recording.record(url, cluster=C, out=out) > 0
        finally:
            await bus.close()
    code = replay.run(["--from", str(path), "--service", "bandwidth", "--compare"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "compare: identical" in out
