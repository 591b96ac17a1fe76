"""``baton up``'s children die with it, even when it is killed with SIGKILL (each child
runs in its own session, so a terminal's Ctrl-C does not reach it: without a parent-death
signal a killed ``baton up`` left its whole stack running)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.connected, pytest.mark.skipif(sys.platform != "linux", reason="prctl")]

PARENT = """
import sys, time
from pathlib import Path
from baton.services.cli.processes import Child
child = Child(name="sleeper", argv=["sleep", "120"], log=Path(sys.argv[1]))
child.start()
print(child.process.pid, flush=True)
time.sleep(120)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie has died; its new parent reaps it


def test_a_child_dies_when_baton_up_is_killed(tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path / "child.log")],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        assert alive(pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while alive(pid):
            assert time.monotonic() < deadline, "the child outlived its killed parent by 10 s"
            time.sleep(0.05)
    finally:
        parent.kill()
        parent.wait(timeout=10)
        if parent.stdout is not None:
            parent.stdout.close()
        if "pid" in locals() and alive(pid):
            os.kill(pid, signal.SIGKILL)
