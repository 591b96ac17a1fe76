"""The whole loop over NATS, with real traffic: the bandwidth service on the runner, the
agent's egress side (follow its node's limits, apply them with tc, count, publish) in a
network namespace, two pods sending to a 100 Mbit/s uplink. A team weight change
published on NATS reaches the kernel's classes; the test prints how long it took.

Needs root, ``ip`` and ``iperf3`` (skipped otherwise); about 20 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import msgspec
import pytest

from baton.libs.bus import Bus
from baton.proto import subjects
from baton.proto.admission import TeamsLoaded
from baton.proto.k8s import PodEvent
from baton.proto.teams import Egress as TeamEgress
from baton.proto.teams import Team, TeamConfig
from baton.services.agent.core.tc import Layout
from baton.services.agent.egress import Egress, Netlink
from baton.services.bandwidth.main import SPEC, Settings
from tests.netns.topology import INTERNAL, INTERNET_HOST, Topology, missing, result
from tests.pipeline import running
from tests.support.builders import pod
from tests.support.nats import running_nats

pytestmark = [
    pytest.mark.netns,
    pytest.mark.timeout(90),
    pytest.mark.skipif(bool(missing()), reason=missing() or "runs"),
]

C = "c1"
M = 1_000_000
LAYOUT = Layout(hooks=("br0",), line_bps=10_000 * M)


@pytest.fixture
def topo() -> Iterator[Topology]:
    t = Topology(prefix=f"bwa{os.getpid() % 100000}")
    try:
        try:
            t.build()
        except Exception as exc:  # no netns/veth/bridge support in this kernel or sandbox
            pytest.skip(f"cannot build the namespaces: {exc}")
        t.serve("inet", 5201, 5202)
        yield t
    finally:
        t.destroy()


def teams(a: float, b: float) -> TeamConfig:
    return TeamConfig(
        teams=(
            Team(name="a", namespaces=("ns-a",), egress=TeamEgress(weight=a)),
            Team(name="b", namespaces=("ns-b",), egress=TeamEgress(weight=b)),
        )
    )


@contextlib.asynccontextmanager
async def agent(bus: Bus, topo: Topology) -> AsyncIterator[tuple[Egress, Netlink]]:
    """The node's agent (egress side only), its netlink socket in the node namespace;
    a second socket for the test to read the kernel with."""
    netlink = await Netlink(LAYOUT, netns=topo.ns("node")).open()
    reader = await Netlink(LAYOUT, netns=topo.ns("node")).open()
    egress = Egress(bus, "n1", netlink=netlink, egress_s=1.0)
    task = asyncio.create_task(egress.run())
    try:
        yield egress, reader
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await netlink.call(netlink.shaper.teardown)
        await netlink.close()
        await reader.close()


async def rates(egress: Egress, kernel: Netlink) -> tuple[int, int]:
    """The two pods' HTB ceilings in the kernel now, bits per second (0: no class yet)."""
    applied = egress.applied
    if applied is None:
        return 0, 0
    read = await kernel.call(kernel.shaper.read)
    slots = {p.pod: s for p in applied.limits for s, rules in read.filters.items()
             if any(r.src == f"{p.ips[0]}/32" for r in rules)}  # fmt: skip
    a, b = (read.classes.get(slots.get(name, -1), (0, 0))[1] * 8 for name in ("a-0", "b-0"))
    return a, b


async def until_rates(egress: Egress, kernel: Netlink, want: tuple[int, int], *, within: float,
                      what: str) -> None:  # fmt: skip
    deadline = time.monotonic() + within
    while await rates(egress, kernel) != want:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.002)


async def test_a_weight_change_on_nats_reaches_tc(topo: Topology, tmp_path: Path) -> None:
    teams_file = tmp_path / "teams.yaml"
    teams_file.write_text(msgspec.json.encode(msgspec.to_builtins(teams(3, 1))).decode())
    settings = Settings(capacity="100M", floor="1M", interval_s=0.1, teams_file=str(teams_file),
                        internal_cidrs=(INTERNAL,))  # fmt: skip
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster=C, name="test")
        try:
            await bus.ensure_streams()
            for i, team in enumerate("ab"):
                p = pod(f"{team}-0", namespace=f"ns-{team}", node_name="n1",
                        labels={"baton.io/team": team})  # fmt: skip
                p = msgspec.structs.replace(p, pod_ip=topo.pod_ip(i))
                event = PodEvent(op="upsert", at=time.time(), pod=p)
                subject = subjects.subject(C, "k8s", "pod", p.namespace, p.name)
                await bus.publish(subject, event, msg_id=p.uid)
            async with running(SPEC, url, settings), agent(bus, topo) as (egress, kernel):
                senders = [topo.send(i, INTERNET_HOST, 5201 + i, 14) for i in range(2)]
                await until_rates(egress, kernel, (75 * M, 25 * M), within=12,
                                  what="75/25 in tc from measured demand")  # fmt: skip
                published = time.monotonic()
                change = TeamsLoaded(config=teams(1, 1), at=time.time())
                await bus.publish(f"baton.{C}.admission.teams", change, msg_id="t2")
                await until_rates(egress, kernel, (50 * M, 50 * M), within=5,
                                  what="50/50 in tc after the weight change")  # fmt: skip
                took = time.monotonic() - published
                print(f"\nweight change published on NATS -> both classes changed in tc: "
                      f"{took * 1e3:.0f} ms (service interval 0.1 s)")  # fmt: skip
                for sender in senders:
                    await asyncio.to_thread(result, sender, within=30)
        finally:
            await bus.close()
