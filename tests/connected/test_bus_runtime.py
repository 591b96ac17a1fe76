"""The runtime pieces over real sockets and signals: ops endpoint, graceful SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import aiohttp
import pytest

from baton.libs.runner.metrics import HANDLED
from baton.libs.runtime import run_until_signalled, serve_ops

pytestmark = [pytest.mark.connected, pytest.mark.timeout(30)]


async def test_ops_endpoint_serves_metrics_health_and_readiness() -> None:
    ready = False
    HANDLED.labels(service="ops-test", type="k8s.pod.v1", outcome="ok").inc()
    ops = await serve_ops(0, lambda: ready, service="ops-test", host="127.0.0.1")
    try:
        base = f"http://127.0.0.1:{ops.port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/healthz") as resp:
                assert resp.status == 200
            async with http.get(f"{base}/readyz") as resp:
                assert resp.status == 503
            ready = True
            async with http.get(f"{base}/readyz") as resp:
                assert resp.status == 200
            async with http.get(f"{base}/metrics") as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"].startswith("text/plain")
                text = await resp.text()
    finally:
        await ops.close()
    assert (
        'baton_runner_inputs_total{outcome="ok",service="ops-test",type="k8s.pod.v1"} 1.0' in text
    )


async def test_sigterm_lets_the_service_finish_its_work() -> None:
    started = asyncio.Event()
    finished: list[str] = []

    async def service() -> str:
        started.set()
        try:
            await asyncio.Event().wait()  # runs until stopped
        except asyncio.CancelledError:
            await asyncio.sleep(0)  # e.g. acking the message in hand
            finished.append("acked")
            raise
        return "never"

    async def send_sigterm() -> None:
        await started.wait()
        os.kill(os.getpid(), signal.SIGTERM)

    sender = asyncio.create_task(send_sigterm())
    result = await run_until_signalled(service)
    await sender
    assert result is None
    assert finished == ["acked"]


async def test_a_service_that_ends_returns_its_result() -> None:
    async def service() -> int:
        return 7

    assert await run_until_signalled(service) == 7
    loop = asyncio.get_running_loop()
    assert not loop.remove_signal_handler(signal.SIGTERM)  # handlers were taken down


def test_logs_are_json_lines_with_the_bound_context() -> None:
    """In a child process: structlog's configuration is global and caches its stream."""
    program = (
        "import logging, structlog\n"
        "from baton.libs.runtime import configure_logging\n"
        "configure_logging(service='gang')\n"
        "with structlog.contextvars.bound_contextvars(subject='baton.c1.k8s.pod.a.b', seq=7):\n"
        "    structlog.get_logger().info('placed', gang='a/j')\n"
        "structlog.get_logger().debug('hidden')\n"
        "logging.getLogger('nats').warning('from a library')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=30, check=True
    )
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert len(lines) == 2
    placed, library = lines
    assert {k: placed[k] for k in ("event", "service", "subject", "seq", "gang", "level")} == {
        "event": "placed",
        "service": "gang",
        "subject": "baton.c1.k8s.pod.a.b",
        "seq": 7,
        "gang": "a/j",
        "level": "info",
    }
    assert (library["event"], library["logger"], library["level"]) == (
        "from a library",
        "nats",
        "warning",
    )
