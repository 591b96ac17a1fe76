"""`baton up` as a child process, as the e2e tests that watch it from outside run it."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def baton_up(folder: Path, *args: str) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """``baton up ARGS``, writing its endpoints to ``folder/up.env`` and its output to
    ``folder/up.log``; stopped at the end as a user does (Ctrl-C), killed if it has not
    stopped within two minutes. Yields the endpoints file (written once it is up) and
    the process."""
    endpoints = folder / "up.env"
    argv = [sys.executable, "-m", "baton.services.cli", "up", *args,
            "--endpoints-file", str(endpoints)]  # fmt: skip
    with (folder / "up.log").open("w") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            yield endpoints, process
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)


def endpoints_of(path: Path) -> dict[str, str]:
    """The ``KEY=VALUE`` lines of an endpoints file."""
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
