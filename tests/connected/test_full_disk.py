"""A JetStream store on a real disk that fills up (a 16 MiB tmpfs in a mount namespace of
our own) and is freed: services are not ready while it is full, and once there is room
``baton up``'s check restarts nats-server (here: a loop in the namespace stands in for
``baton up``'s supervisor) and work resumes by itself. Skipped where no user namespace
can be made."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import msgspec
import pytest

from baton.libs.bus import Bus, storage
from baton.libs.bus.streams import stream_configs
from baton.libs.runtime.stopping import retry
from baton.proto import subjects
from baton.proto.actions import AnyAction
from baton.services.cli.processes import free_port, port_open
from baton.services.cli.store import DOWN_S, Disabled
from tests.connected.test_runner import ACTIONS, running
from tests.connected.test_runner import pod_event as toy_input
from tests.pipeline import until
from tests.support.nats import nats_server_binary

pytestmark = [pytest.mark.connected, pytest.mark.timeout(120)]
C = "c1"


class _Big(msgspec.Struct, frozen=True, tag="test.filler.v1"):
    data: str = "x" * 100_000


@contextlib.asynccontextmanager
async def tmpfs_nats(tmp_path: Path) -> AsyncIterator[tuple[int, int, int]]:
    """nats-server, restarted whenever it exits, on a 16 MiB tmpfs holding a 6 MB filler;
    yields the namespace's shell's pid, the client port and the monitoring port."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare")
    store, port, monitor = tmp_path / "store", free_port(), free_port()
    store.mkdir()
    server = f"{nats_server_binary()} -js -a 127.0.0.1 -p {port} -m {monitor} -sd {store}"
    server += f" -c {tmp_path}/n.conf -l {tmp_path}/nats.log"
    script = (f"mount -t tmpfs -o size=16m none {store} && "
              f"head -c 6000000 /dev/zero > {store}/filler && "
              f"printf 'jetstream {{ max_file_store: 1G }}' > {tmp_path}/n.conf && "
              f"while true; do {server}; done")  # fmt: skip
    shell = await asyncio.create_subprocess_exec(
        "unshare", "-rm", "sh", "-c", script, start_new_session=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        for _ in range(100):
            if port_open(port) or shell.returncode is not None:
                break
            await asyncio.sleep(0.1)
        if not port_open(port):
            shell.kill()
            _, err = await shell.communicate()
            pytest.skip(f"no tmpfs in a user namespace here: {err.decode(errors='replace')[:200]}")
        yield shell.pid, port, monitor
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
        await shell.wait()


def _server_pid(shell: int) -> int:
    """The nats-server the namespace's loop runs now (its child)."""
    children = Path(f"/proc/{shell}/task/{shell}/children").read_text().split()
    return int(children[-1])


async def test_a_full_disk_is_not_ready_and_once_freed_nats_restarts_and_work_resumes(
    tmp_path: Path,
) -> None:
    async with tmpfs_nats(tmp_path) as (shell, port, monitor):
        bus = await Bus.connect(f"nats://127.0.0.1:{port}", cluster=C, name="toy")
        await bus.ensure_streams(stream_configs(C, history_max_bytes=1024**2))
        watch = storage.Watch(bus, every=0.1)
        watching = asyncio.create_task(watch.run())
        disabled = Disabled(tmp_path / "store")
        try:
            async with running(bus) as runner, aiohttp.ClientSession() as http:
                await until(lambda: runner.ready and not watch.problem, what="ready")
                filler = subjects.subject(C, subjects.PLACEMENT, "filler")
                with contextlib.suppress(Exception):
                    for _ in range(200):  # 20 MB into a 10 MB space
                        await bus.publish(filler, _Big())
                await until(lambda: bool(watch.problem), within=30, what="not ready when full")
                os.remove(f"/proc/{_server_pid(shell)}/root{tmp_path}/store/filler")
                # baton up's check, every refresh: /healthz failing DOWN_S with room
                began = asyncio.get_running_loop().time()
                while not await disabled.check(http, monitor=monitor,
                                               now=asyncio.get_running_loop().time()):  # fmt: skip
                    assert asyncio.get_running_loop().time() - began < 3 * DOWN_S + 30
                    await asyncio.sleep(0.5)
                os.kill(_server_pid(shell), signal.SIGTERM)  # baton up's restart_nats
                await retry(lambda: bus.publish(*toy_input("bad-1", "gpu-7")),
                            what="the input, once nats-server is back")  # fmt: skip
                await until(lambda: runner.handled >= 1 and not watch.problem, within=60,
                            what="the input handled and the service ready again")  # fmt: skip
            actions = await bus.snapshot(ACTIONS, AnyAction)
            assert [a.id for a in actions] == ["cordon-gpu-7"]
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
            await bus.close()
