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


def test_a_mig_capable_node_publishes_partitionable_gpus_within_the_api_s_limits() -> None:
    """NVIDIA's layout: per GPU a counter set of eight memory slices in a slice of its
    own (a slice holds devices or counters), the whole GPU consuming all eight, seven
    1g.10gb MIG devices one each; 64 devices a slice at most when they consume counters."""
    gpus, counters, nics = dra.node_slices("n1", gpus=8, nics=8, product="H100",
                                           memory="80Gi", mig=True)  # fmt: skip
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in (gpus, counters)} == {2}
    assert "devices" not in counters["spec"] and "sharedCounters" not in gpus["spec"]
    devices = gpus["spec"]["devices"]
    assert len(devices) == 64
    sets = {c["name"]: set(c["counters"]) for c in counters["spec"]["sharedCounters"]}
    used: dict[str, list[str]] = {}
    for device in devices:
        (consumes,) = device["consumesCounters"]
        assert set(consumes["counters"]) <= sets[consumes["counterSet"]]
        if device["attributes"]["type"]["string"] == "mig":
            used.setdefault(consumes["counterSet"], []).extend(consumes["counters"])
        else:
            assert set(consumes["counters"]) == sets[consumes["counterSet"]]  # whole: all
    assert all(len(v) == len(set(v)) == dra.MIG_SLOTS for v in used.values())  # no overlap
    assert nics["spec"]["driver"] == dra.NIC_DRIVER
    assert dra.slice_names("n1") == [s["metadata"]["name"] for s in (gpus, counters, nics)]


def test_a_pod_is_given_the_whole_gpus_and_the_mig_devices_its_claims_name() -> None:
    results = [{"driver": dra.GPU_DRIVER, "device": "gpu-3-mig-1g10gb-5"},
               {"driver": dra.GPU_DRIVER, "device": "gpu-4"},
               {"driver": dra.NIC_DRIVER, "device": "nic-4"}]  # fmt: skip
    allocated = {"status": {"allocation": {"devices": {"results": results}}}}
    made = pod({"name": "d", "resourceClaimName": "mine"})
    assert dra.devices_allocated(made, lambda ns, n: allocated) == ([4], [(3, 5)])
