"""`baton up --devices dra`: the demo with the DRA drivers on, its jobs asking for GPUs
(and, for multi-node jobs, GPU+NIC pairs under one PCIe root) through ResourceClaims,
read as a user reads it, with kubectl."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.upping import baton_up, endpoints_of
from tests.pipeline import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture
def endpoints(tmp_path: Path) -> Iterator[Path]:
    with baton_up(tmp_path, "--nodes", "16", "--devices", "dra", "--workload", "synthetic") as up:
        yield up[0]


def kubectl(env: dict[str, str], *args: str) -> Any:
    done = subprocess.run(["kubectl", *args, "-o", "json"], capture_output=True, text=True,
                          env={**os.environ, "KUBECONFIG": env["KUBECONFIG"]},
                          timeout=60, check=True)  # fmt: skip
    return json.loads(done.stdout)["items"]


def running_with_claims(env: dict[str, str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Running workload pods, each with the claim it uses, where that claim is (still)
    reserved for it: the claims are listed after the pods, in one list (one moment)."""
    pods = [p for p in kubectl(env, "get", "pods", "-A")
            if p["status"].get("phase") == "Running"
            and (p.get("status") or {}).get("resourceClaimStatuses")]  # fmt: skip
    claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c
              for c in kubectl(env, "get", "resourceclaims", "-A")}  # fmt: skip
    out = []
    for pod in pods:
        name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        claim = claims.get((pod["metadata"]["namespace"], name))
        reserved = ((claim or {}).get("status") or {}).get("reservedFor") or ()
        if claim is not None and pod["metadata"]["uid"] in {r["uid"] for r in reserved}:
            out.append((pod, claim))
    return out


async def test_the_dra_demo_runs_jobs_on_devices_allocated_to_their_claims(
    endpoints: Path,
) -> None:
    await until(lambda: endpoints.exists() and "KUBECONFIG" in endpoints.read_text(),
                what="baton up to write its endpoints file", within=120, step=0.5)  # fmt: skip
    env = endpoints_of(endpoints)
    pairs = await until(lambda: len(found := running_with_claims(env)) >= 10 and found,
                        what="10 workload pods Running on claimed devices", within=180,
                        step=2.0)  # fmt: skip
    given: set[tuple[str, str, str]] = set()
    for pod, claim in pairs:
        node, name = pod["spec"]["nodeName"], pod["metadata"]["name"]
        limits = pod["spec"]["containers"][0]["resources"].get("limits") or {}
        assert "nvidia.com/gpu" not in limits, f"{name} still counts GPUs: {limits}"
        status = claim["status"]
        assert [r["uid"] for r in status["reservedFor"]] == [pod["metadata"]["uid"]]
        results = status["allocation"]["devices"]["results"]
        assert results and all(r["pool"] == node for r in results), f"{name}: {results}"
        for r in results:
            device = (node, r["driver"], r["device"])
            assert device not in given, f"{device} given to two running pods"
            given.add(device)
