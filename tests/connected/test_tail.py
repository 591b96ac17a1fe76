"""`baton tail` against a real bus: history first (--since), then typed one-line events."""

import asyncio
import contextlib
import datetime as dt
import sys
import time

import pytest

from baton.libs.bus import Bus
from baton.proto import subjects
from baton.proto.k8s import Node, NodeEvent
from tests.support.nats import running_nats

pytestmark = pytest.mark.connected


async def tail(url: str, *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "baton.services.cli", "tail", "--nats", url, "--cluster", "c1", *args,
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


async def _publish_nodes(url: str, *nodes: tuple[str, float]) -> None:
    bus = await Bus.connect(url, cluster="c1", name="test")
    try:
        await bus.ensure_streams()
        for name, at in nodes:
            node = Node(name=name, uid=name, resource_version="1")
            subject = subjects.subject("c1", subjects.K8S, "node", name)
            await bus.publish(subject, NodeEvent(op="upsert", at=at, node=node))
    finally:
        await bus.close()


async def test_tail_since_a_duration_reads_that_much_history() -> None:
    """nats-py takes the start time only in the consumer config: --since 10m crashed."""
    async with running_nats() as url:
        await _publish_nodes(url, ("n1", time.time()))
        code, out, err = await tail(url, "k8s.node.>", "--since", "10m", "--count", "1")
    assert code == 0, err
    assert "baton.c1.k8s.node.n1  k8s.node.v1" in out
    assert "Traceback" not in err


async def test_tail_count_holds_with_since_last() -> None:
    async with running_nats() as url:
        await _publish_nodes(url, *((f"n{i}", time.time()) for i in range(5)))
        code, out, err = await tail(url, "k8s.node.>", "--since", "last", "--count", "2")
    assert code == 0, err
    assert len(out.splitlines()) == 2, out


async def test_history_lines_show_the_events_own_time() -> None:
    two_hours_ago = time.time() - 7200
    async with running_nats() as url:
        await _publish_nodes(url, ("old", two_hours_ago))
        code, out, err = await tail(url, "k8s.node.>", "--since", "all", "--count", "1")
    assert code == 0, err
    shown = dt.datetime.fromtimestamp(two_hours_ago).strftime("%H:%M:%S.%f")[:-3]
    assert out.startswith(shown + " "), out


async def test_a_subject_across_streams_is_read_from_history() -> None:
    """'>' spans K8S, EVENTS, ...: no one stream holds it, HISTORY copies them all."""
    async with running_nats() as url:
        await _publish_nodes(url, ("n1", time.time()))
        code, out, err = await tail(url, "--since", "all", "--count", "1", "--json")
    assert code == 0, err
    assert out.startswith('{"type":"k8s.node.v1"'), out


async def test_a_closed_pipe_ends_the_tail_quietly() -> None:
    """`baton tail ... | head -1`: one line, no traceback per further message."""
    async with running_nats() as url:
        await _publish_nodes(url, *((f"n{i}", time.time()) for i in range(50)))
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "baton.services.cli", "tail", "--nats", url, "k8s.node.>",
            "--since", "all", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert process.stdout is not None and process.stderr is not None
        try:
            first = await asyncio.wait_for(process.stdout.readline(), timeout=30)
            process.stdout.feed_eof()
            # The reader goes away, as `head` does after its line: close our end of the pipe.
            transport = process._transport  # type: ignore[attr-defined]
            transport.get_pipe_transport(1).close()
            # It learns of the closed pipe on its next write, as `tail -f | head -1` does: the
            # 50 lines may all be in the pipe already, so more messages come until it exits.
            err_read = asyncio.ensure_future(process.stderr.read())
            deadline = time.monotonic() + 30
            while process.returncode is None:
                assert time.monotonic() < deadline, "baton tail to exit after its reader left"
                await _publish_nodes(url, ("after", time.time()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(process.wait()), timeout=0.5)
            code = process.returncode
            err = await asyncio.wait_for(err_read, timeout=30)
        finally:
            if process.returncode is None:  # the test failed: leave no tail behind
                process.kill()
                await process.wait()
    assert b"k8s.node.v1" in first
    assert code == 0, err.decode()
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()
