"""What a pod's ResourceClaims lack before its kubelet may start it (world/dra.py)."""

from __future__ import annotations

from typing import Any

import pytest

from baton.services.simcluster.world import dra

pytestmark = pytest.mark.unit


def pod(*claims: dict[str, Any], generated: dict[str, str] | None = None) -> dict[str, Any]:
    status = [{"name": k, "resourceClaimName": v} for k, v in (generated or {}).items()]
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {"resourceClaims": list(claims)},
            "status": {"resourceClaimStatuses": status}}  # fmt: skip


def claim(pool: str = "n1", reserved: str = "u1", allocated: bool = True) -> dict[str, Any]:
    status: dict[str, Any] = {"reservedFor": [{"resource": "pods", "name": "p", "uid": reserved}]}
    if allocated:
        status["allocation"] = {"devices": {"results": [{"pool": pool, "device": "gpu-0"}]}}
    return {"status": status}


def test_each_lack_is_named_until_every_claim_is_allocated_here_and_reserved() -> None:
    entry = {"name": "gpus", "resourceClaimTemplateName": "t"}
    assert "not created yet" in dra.waiting_on(pod(entry), "n1", lambda ns, n: None)
    made = pod(entry, generated={"gpus": "p-gpus-abcde"})
    assert "not found" in dra.waiting_on(made, "n1", lambda ns, n: None)
    assert "not allocated" in dra.waiting_on(made, "n1", lambda ns, n: claim(allocated=False))
    assert "not n1" in dra.waiting_on(made, "n1", lambda ns, n: claim(pool="n2"))
    assert "not reserved" in dra.waiting_on(made, "n1", lambda ns, n: claim(reserved="u9"))
    assert dra.waiting_on(made, "n1", lambda ns, n: claim()) == ""
    shared = pod({"name": "nic", "resourceClaimName": "mine"})  # a claim the user made
    assert dra.waiting_on(shared, "n1", lambda ns, n: claim() if n == "mine" else None) == ""


def test_gpu_i_and_nic_i_share_a_pcie_root_two_of_each_a_switch() -> None:
    gpus, nics = dra.node_slices("n1", gpus=8, nics=8, product="H100", memory="80Gi")
    roots = [d["attributes"][dra.PCIE_ROOT]["string"] for d in gpus["spec"]["devices"]]
    assert roots == [d["attributes"][dra.PCIE_ROOT]["string"] for d in nics["spec"]["devices"]]
    assert [roots.count(r) for r in dict.fromkeys(roots)] == [2, 2, 2, 2]
    assert (
        dra.node_slices("n2", gpus=8, nics=0, product="H100", memory="80Gi")[0]["spec"]["driver"]
        == dra.GPU_DRIVER
    )
