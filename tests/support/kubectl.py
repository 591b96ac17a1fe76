"""Run /usr/bin/kubectl against a test simcluster (tests skip where it is not installed)."""

from __future__ import annotations

import asyncio
import os
import subprocess

import pytest

KUBECTL = "/usr/bin/kubectl"
needs_kubectl = pytest.mark.skipif(not os.path.exists(KUBECTL), reason="no /usr/bin/kubectl")


async def run_kubectl(kubeconfig: str, *args: str, cwd: str | None = None) -> tuple[int, str, str]:
    """kubectl's exit code, stdout and stderr."""
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        f"--kubeconfig={kubeconfig}",
        *args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def kubectl(kubeconfig: str, *args: str, cwd: str | None = None) -> str:
    """kubectl's stdout; fails the test with its stderr when it exits non-zero."""
    code, out, err = await run_kubectl(kubeconfig, *args, cwd=cwd)
    assert code == 0, f"kubectl {' '.join(args)}: {err}"
    return out
