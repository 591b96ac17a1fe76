"""``/readyz`` says not ready while NATS is away, and ready again once it is back."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import aiohttp
import pytest

from baton.libs.bus import Bus
from baton.libs.runner.serving import serve
from baton.services.cli.processes import free_port
from baton.services.gang import main as gang
from tests.pipeline import stop, until
from tests.support.nats import running_nats

pytestmark = [pytest.mark.connected, pytest.mark.timeout(120)]


async def readyz(http: aiohttp.ClientSession, port: int) -> int:
    try:
        async with http.get(f"http://127.0.0.1:{port}/readyz") as resp:
            return resp.status
    except aiohttp.ClientError:
        return 0


async def test_readyz_follows_the_nats_connection() -> None:
    nats_port, ops_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="baton-ready-") as store:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            async with running_nats(store_dir=Path(store), port=nats_port) as url:
                owner = await Bus.connect(url, cluster="c1", name="test")
                await owner.ensure_streams()  # the actuator's job: gang waits for them
                await owner.close()
                settings = gang.Settings(nats_url=url, ops_port=ops_port, lease_ttl_s=1.0)
                task = asyncio.create_task(serve(gang.SPEC, settings), name="gang")
                try:
                    await until(lambda: _is(readyz(http, ops_port), 200), what="200", within=30)
                except BaseException:
                    await stop(task, within=15.0, what="gang")
                    raise
            # NATS is down now: not ready; back: ready again (then stop while it is up).
            await until(lambda: _is(readyz(http, ops_port), 503), what="503 without NATS")
            async with running_nats(store_dir=Path(store), port=nats_port):
                try:
                    await until(lambda: _is(readyz(http, ops_port), 200), what="200 again",
                                within=30)  # fmt: skip
                finally:
                    await stop(task, within=15.0, what="gang")


async def _is(status: asyncio.Future[int] | object, want: int) -> bool:
    return await status == want  # type: ignore[misc]
