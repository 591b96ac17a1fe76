"""`baton tail` against a real bus: history first (--since), then typed one-line events."""

import asyncio
import sys

import pytest

from libs.bus import Bus
from libs.testing.nats import running_nats
from proto import subjects
from proto.k8s import Node, NodeEvent

pytestmark = pytest.mark.connected


async def tail(url: str, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli", "tail", "--nats", url, "--cluster", "c1", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_tail_reads_history_and_current_state() -> None:
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster="c1", name="test")
        try:
            await bus.ensure_streams()
            for rv in ("1", "2"):
                node = Node(name="gpu-0001.rack-a", uid="u1", resource_version=rv)
                subject = subjects.subject("c1", subjects.K8S, "node", node.name)
                await bus.publish(subject, NodeEvent(op="upsert", at=1.0, node=node))
        finally:
            await bus.close()

        code, out, err = await tail(url, "k8s.node.>", "--since", "last", "--count", "1")
        assert code == 0, err
        lines = out.splitlines()
        assert len(lines) == 1
        assert "baton.c1.k8s.node.gpu-0001_rack-a  k8s.node.v1" in lines[0]
        assert '"resource_version":"2"' in lines[0] or "resource_version=2" in lines[0]

        code, out, _ = await tail(url, "k8s.>", "--since", "all", "--count", "1", "--json")
        assert code == 0
        assert out.strip().startswith('{"type":"k8s.node.v1"')


async def test_tail_says_when_no_stream_holds_the_subject() -> None:
    async with running_nats() as url:
        code, _, err = await tail(url, "k8s.>", "--since", "all", "--count", "1")
    assert code == 1
    assert "no stream holds 'baton.c1.k8s.>'" in err
