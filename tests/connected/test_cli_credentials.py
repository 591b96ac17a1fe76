"""The bus tools without credentials (or without a bus): one line naming what to set,
exit status non-zero, never a traceback, never a hang."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from baton.libs.bus.operator import NoBus, connect
from baton.libs.runtime.nkey import SEED_SETTING, seed_file_public_key
from tests.support.nats import running_nats, seed_file

pytestmark = [pytest.mark.connected, pytest.mark.timeout(120)]
COMMANDS = [
    ["status"],
    ["tail"],
    ["tail", "k8s.>", "--since", "all"],
    ["why", "team-a/job7"],
    ["replay", "--record", "run.jsonl"],
    ["health", "pause", "--reason", "a test"],  # retried forever, logging its nkey, before
]


@pytest.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[str]:
    """A NATS that admits one nkey user only (as baton up's does)."""
    public = seed_file_public_key(seed_file(tmp_path), setting=SEED_SETTING)
    config = tmp_path / "nats.conf"
    config.write_text(f'authorization {{ users = [ {{ nkey: "{public}" }} ] }}\n')
    async with running_nats(config=config) as url:
        yield url


async def baton(tmp_path: Path, url: str, *args: str) -> tuple[int | None, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATON_NATS")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "baton.services.cli", *args, "--nats", url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        _, err = await asyncio.wait_for(process.communicate(), timeout=20)
    except TimeoutError:
        process.kill()
        await process.wait()
        return None, "(still running after 20 s)"
    return process.returncode, err.decode()


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
async def test_without_credentials_one_line_names_the_setting(
    guarded: str, tmp_path: Path, command: list[str]
) -> None:
    code, err = await baton(tmp_path, guarded, *command)
    assert code not in (None, 0), err
    assert len(err.strip().splitlines()) == 1, err
    assert SEED_SETTING in err and "Traceback" not in err
    assert "refused the connection" in err, err


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
async def test_without_a_bus_one_line_says_so(tmp_path: Path, command: list[str]) -> None:
    code, err = await baton(tmp_path, "nats://127.0.0.1:1", *command)
    assert code not in (None, 0), err
    assert len(err.strip().splitlines()) == 1, err
    assert "cannot reach NATS at nats://127.0.0.1:1 (connection refused)" in err, err


async def test_a_refused_connection_is_told_as_refused_not_waited_out() -> None:
    """Nothing listens: the refusal itself is the answer (nats-py alone would try again
    every 2 s until the connect deadline, then say only "TimeoutError")."""
    with pytest.raises(NoBus, match=r"nats://127\.0\.0\.1:1 \(connection refused\)"):
        await connect("nats://127.0.0.1:1", name="test")


async def test_health_pause_where_baton_never_ran_says_so_in_one_line(tmp_path: Path) -> None:
    """A NATS with no Baton streams: the switch is stored nowhere, and the tool says so
    (it used to create every stream there, as the operator)."""
    async with running_nats() as url:
        code, err = await baton(tmp_path, url, "health", "pause")
    assert code == 1, err
    assert len(err.strip().splitlines()) == 1, err
    assert "did not store the switch" in err and "is Baton running there" in err, err
