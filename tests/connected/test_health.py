"""From agent telemetry to a taint on simcluster: the agent fleet reads simcluster's
simulated hardware over HTTP and publishes telemetry; the bridge, health and the
actuator run on a real nats-server; taints land on simcluster's API.

Durations are short here (settings), and simcluster's preflight pods take 0.3 s."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
from kubernetes_asyncio.client import CoreV1Api

from baton.libs.bus import Bus
from baton.proto import codec, keys, subjects
from baton.proto.health import Control, Note, Silence, StateChanged, Withheld
from baton.services.cli import recording, replay
from baton.services.health import main as health
from baton.services.health.main import publish_control
from baton.services.simcluster.world.spec import Delays, from_dict
from tests.connected.test_replay import history_settled
from tests.pipeline import Services, running_fleet, running_services, until
from tests.support.nats import running_nats
from tests.support.sim import Sim, running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(120)]
C = "c1"
FAST = health.Settings(
    tick_s=0.1, silence_after_s=2.0, remediation_recheck_s=1.0, release_interval_s=0.5,
    drain_grace_s=1.0, drain_timeout_s=5.0, preflight_timeout_s=20.0,
)  # fmt: skip


@dataclass
class Seen:
    """Health's decisions as they arrive on the bus."""

    events: list[Any] = field(default_factory=list)

    def of(self, type_: type[Any], node: str = "") -> list[Any]:
        return [e for e in self.events if isinstance(e, type_) and (not node or e.node == node)]

    def states(self, node: str) -> list[str]:
        return [e.state for e in self.of(StateChanged, node)]


@dataclass
class System:
    sim: Sim
    services: Services
    seen: Seen
    bus: Bus
    url: str

    def node(self, name: str) -> dict[str, Any]:
        return self.sim.store.get("nodes", None, name)

    def taints(self, name: str) -> set[str]:
        return {t["key"] for t in self.node(name)["spec"].get("taints") or ()}

    def label(self, name: str) -> str:
        return str((self.node(name)["metadata"].get("labels") or {}).get(keys.REMEDIATION, ""))

    def note(self, name: str) -> Note | None:
        raw = (self.node(name)["metadata"].get("annotations") or {}).get(keys.HEALTH)
        return msgspec.json.decode(raw, type=Note) if raw else None

    def validated(self) -> bool:
        names = self.sim.cluster.node_names()
        return all((n := self.note(name)) is not None and n.validated > 0 and n.state == "healthy"
                   and not self.taints(name) for name in names)  # fmt: skip


@contextlib.asynccontextmanager
async def system(
    nodes: int,
    settings: health.Settings = FAST,
    *,
    settle: bool = True,
    heartbeat_s: float = 0.5,
    **sim: Any,
) -> AsyncIterator[System]:
    """simcluster, the agent fleet (a keep-alive every ``heartbeat_s``), bridge, gang,
    health and the actuator; every node has passed its first preflight when the block
    starts (``settle``)."""
    async with (
        running_nats() as url,
        running_sim(nodes=nodes, delays=Delays(preflight_s=0.3), **sim) as cluster,
    ):
        cluster.store.create("namespaces", {"metadata": {"name": settings.preflight_namespace}})
        bus = await Bus.connect(url, cluster=C, name="test-observer")
        await bus.ensure_streams()
        seen = Seen()

        async def collect(msg: Any) -> None:
            with contextlib.suppress(codec.Undecodable):
                seen.events.append(codec.decode(msg.data, StateChanged | Withheld | Silence))

        sub = await bus.nc.subscribe(subjects.wildcard(C, subjects.HEALTH, "*", "*"), cb=collect)
        try:
            async with (
                running_services(url, cluster, health_settings=settings) as services,
                running_fleet(url, cluster, heartbeat_s=heartbeat_s),
            ):
                s = System(sim=cluster, services=services, seen=seen, bus=bus, url=url)
                if settle:
                    await until(s.validated, within=60, what="every node's first preflight")
                yield s
        finally:
            await sub.unsubscribe()
            await bus.close()


async def test_a_gpu_that_falls_off_the_bus_taints_its_node() -> None:
    async with system(4) as s:
        victim = s.sim.cluster.node_names()[1]
        s.sim.cluster.inject("gpu-lost", victim, gpu=2)
        await until(lambda: keys.UNHEALTHY in s.taints(victim), within=20, what="the taint")
        await until(lambda: s.label(victim) == "reboot", within=20, what="remediation asked")

        def noted() -> bool:
            note = s.note(victim)
            return note is not None and note.state == "remediating"

        await until(noted, within=20, what="the node annotated")
        assert s.taints(victim) == {keys.UNHEALTHY, keys.DRAINING}  # idle: drained at once
        note = s.note(victim)
        assert note is not None and note.by == "baton-health"
        assert "gpu-lost" in {e.rule for e in note.evidence}  # what it was decided on
        assert s.services.health is not None
        record = s.services.health.state.nodes[victim]

        def rules() -> set[str]:
            return {x.rule.name for x in record.signals.values()}

        # The kernel line, NVML and the GPU count all say so.
        await until(lambda: {"xid-79", "gpu-lost", "gpu-count"} <= rules(), within=20,
                    what="all the evidence")  # fmt: skip
        others = [n for n in s.sim.cluster.node_names() if n != victim]
        assert not any(s.taints(n) for n in others)


async def test_dra_slices_and_agents_agree_until_a_driver_publishes_a_gpu_its_node_lacks() -> None:
    """simcluster's DRA drivers (a MIG pool) and the simulated agents describe the same
    devices, so health finds no disagreement; a GPU slice republished with a GPU the
    node does not have (a driver that has not noticed) quarantines that node alone."""
    spec = from_dict({"pools": [{"name": "gpu", "count": 3, "mig": True}], "devices": "dra"})
    fast = msgspec.structs.replace(FAST, after_s={"devices-disagree": 0.5})
    async with system(3, fast, spec=spec) as s:
        assert s.services.health is not None
        records = s.services.health.state.nodes
        victim, *others = s.sim.cluster.node_names()
        piece = next(p for p in s.sim.store.list("resourceslices")[0]
                     if p["spec"]["nodeName"] == victim and p["spec"].get("devices"))  # fmt: skip
        stale = {"name": "gpu-8", "attributes": {"type": {"string": "gpu"},
                                                 "uuid": {"string": "GPU-stale"}}}  # fmt: skip

        def republished(obj: dict[str, Any]) -> dict[str, Any]:
            obj["spec"]["devices"] = [*obj["spec"]["devices"], stale]
            return obj

        s.sim.store.mutate("resourceslices", None, piece["metadata"]["name"], republished)
        await until(lambda: keys.UNHEALTHY in s.taints(victim), within=20, what="the taint")
        note = s.note(victim)
        assert note is not None and [e.rule for e in note.evidence] == ["devices-disagree"]
        assert "gpu.nvidia.com publishes GPU gpu-8 (GPU-stale)" in note.evidence[0].detail
        for name in others:  # compared (slices and a report seen), and agreeing
            devices = records[name].devices
            assert len(devices.published) == 2 and devices.gpus is not None, name
            assert not [k for k in records[name].signals if k.startswith("devices")], name
            assert not s.taints(name), name


async def test_a_healed_node_returns_after_a_passing_preflight() -> None:
    async with system(4) as s:
        victim = s.sim.cluster.node_names()[0]
        s.sim.cluster.inject("ecc", victim, gpu=0, dbe=2)
        await until(lambda: s.label(victim) == "reboot", within=20, what="remediation asked")
        s.sim.cluster.heal("ecc", victim)  # the GPU reset a reboot would do
        await until(lambda: not s.taints(victim) and not s.label(victim), within=30,
                    what="the node back in service")  # fmt: skip
        assert s.seen.states(victim)[-2:] == ["validating", "healthy"]
        note = s.note(victim)
        assert note is not None and note.state == "healthy" and note.validated > 0


async def test_an_agent_that_goes_silent_quarantines_its_node_until_it_beats_again() -> None:
    async with system(4) as s:
        victim = s.sim.cluster.node_names()[2]
        s.sim.cluster.inject("agent-down", victim)
        await until(lambda: keys.UNHEALTHY in s.taints(victim), within=20, what="the taint")
        evidence = s.seen.of(StateChanged, victim)[-1].evidence
        assert [e.rule for e in evidence] == ["heartbeat"]
        s.sim.cluster.heal("agent-down", victim)
        await until(lambda: not s.taints(victim), within=30, what="the node back in service")


async def test_idle_agents_that_beat_slower_than_silence_after_s_stay_in_service() -> None:
    """Agents announce a 1 s keep-alive, health counts silence in three of them (3 s), not
    in its 0.5 s floor: the idle nodes stay in while a silent one is still caught."""
    settings = msgspec.structs.replace(FAST, silence_after_s=0.5, silence_beats=3.0)
    async with system(4, settings, heartbeat_s=1.0) as s:
        names = s.sim.cluster.node_names()
        victim = names[2]
        s.sim.cluster.inject("agent-down", victim)
        await until(lambda: keys.UNHEALTHY in s.taints(victim), within=20, what="the taint")
        assert [e.after_s for e in s.seen.of(Silence)] == [3.0]  # the victim's, only
        evidence = s.seen.of(StateChanged, victim)[-1].evidence
        assert [e.rule for e in evidence] == ["heartbeat"]
        for name in names:
            if name != victim:
                assert not s.taints(name) and "quarantined" not in s.seen.states(name), name


async def test_node_not_ready_counts_after_its_duration() -> None:
    settings = msgspec.structs.replace(FAST, after_s={"Ready": 1.0})
    async with system(4, settings) as s:
        victim = s.sim.cluster.node_names()[3]
        s.sim.cluster.node_not_ready(victim)
        await until(lambda: keys.UNHEALTHY in s.taints(victim), within=20, what="the taint")
        (suspect, quarantined) = s.seen.of(StateChanged, victim)[-4:-2]
        assert (suspect.state, quarantined.state) == ("suspect", "quarantined")
        assert quarantined.at - suspect.at >= 1.0
        s.sim.cluster.node_ready(victim)
        await until(lambda: not s.taints(victim), within=30, what="the node back in service")


def most_out(seen: Seen) -> int:
    """The most nodes health had out at once, from its decisions in their order."""
    out: set[str] = set()
    most = 0
    for e in seen.of(StateChanged):
        (out.add if e.state in ("quarantined", "draining", "remediating") else out.discard)(e.node)
        most = max(most, len(out))
    return most


async def test_forty_percent_of_a_rack_failing_holds_the_level_and_still_releases() -> None:
    async with system(10) as s:  # one rack of 10: cap_rack 25% lets 2 out at once
        names = s.sim.cluster.node_names()
        api = CoreV1Api(s.services.client)
        assert len({n.metadata.labels[keys.RACK] for n in (await api.list_node()).items}) == 1
        failing = names[:4]
        s.sim.cluster.inject("xid", failing, xid=79)

        def tainted() -> set[str]:
            return {n for n in names if keys.UNHEALTHY in s.taints(n)}

        # two nodes withheld (counted by node: a withheld node whose evidence grows may
        # pass through suspect and be withheld again, published again)
        await until(lambda: len({w.node for w in s.seen.of(Withheld)}) == 2, within=20,
                    what="2 nodes withheld")  # fmt: skip
        await until(lambda: len(tainted()) == 2, within=20, what="two nodes quarantined")
        held = s.seen.of(Withheld)
        assert {w.rail for w in held} == {"rack"} and {w.would for w in held} == {"quarantine"}
        out_first = tainted()
        assert {w.node for w in held} == set(failing) - out_first
        s.sim.cluster.heal("xid", sorted(out_first))  # those two are repaired
        await until(lambda: tainted() == set(failing) - out_first, within=40,
                    what="the repaired pair back, the withheld pair out")  # fmt: skip
        await until(lambda: all(s.seen.states(n)[-1] == "healthy" for n in out_first),
                    within=20, what="the repaired pair healthy")  # fmt: skip
        s.sim.cluster.heal("xid", failing)
        await until(lambda: not tainted(), within=40, what="every node back")
        assert most_out(s.seen) == 2  # the level never went past the cap


async def test_a_recorded_session_replays_to_the_same_health_decisions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Silences, the pause switch, ticks and telemetry are all inputs on the bus, so a
    fresh health core fed the recording decides exactly what the live one did."""
    path = tmp_path / "session.jsonl"
    settings = msgspec.structs.replace(FAST, after_s={"nic-down": 0.0})
    async with system(10, settings) as s:  # the rails let 2 of 10 out
        names = s.sim.cluster.node_names()
        s.sim.cluster.inject("gpu-lost", names[0])
        s.sim.cluster.inject("agent-down", names[1])
        await until(lambda: s.label(names[0]) == "reboot", within=20, what="a remediation")
        await until(lambda: keys.UNHEALTHY in s.taints(names[1]), within=20, what="a silence")
        paused = msgspec.structs.replace(FAST, nats_url=s.url)
        await publish_control(paused, Control(at=time.time(), paused=True, reason="replay"))
        s.sim.cluster.inject("nic-down", names[2])
        await until(lambda: s.seen.of(Withheld, names[2]), within=20, what="a paused verdict")
        s.sim.cluster.heal("gpu-lost", names[0])
        await until(lambda: not s.taints(names[0]), within=30, what="a return")
        await history_settled(s.url)
        with path.open("wb") as out:
            await recording.record(s.url, cluster=C, out=out)
    code = replay.run(["--from", str(path), "--service", "health", "--compare"])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    assert "compare: identical" in out


async def test_dry_run_publishes_verdicts_and_touches_no_node() -> None:
    settings = msgspec.structs.replace(FAST, dry_run=True, preflight=False)
    async with system(3, settings, settle=False) as s:
        victim = s.sim.cluster.node_names()[0]
        s.sim.cluster.inject("gpu-lost", victim)
        await until(lambda: "remediating" in s.seen.states(victim), within=20, what="verdict")
        actions = subjects.stream_name(C, "actions")
        info = await s.bus.js.stream_info(actions, subjects_filter=f"baton.{C}.action.>")
        assert not [k for k in (info.state.subjects or {}) if ".mark-node." in k]
        assert not s.taints(victim)
