"""A simulated node's DRA slices and its agent's telemetry name the same devices: each
GPU's UUID and PCI bus id, each RDMA NIC's interface, index for index (issue 23: "a
simulated or real node's ResourceSlice and its telemetry agree")."""

from __future__ import annotations

import pytest

from baton.services.agent import simulated
from baton.services.simcluster.world import dra, hardware

pytestmark = pytest.mark.unit


def attributes(piece: dict, name: str) -> dict[int, str]:
    """index -> the device's ``name`` attribute."""
    return {
        d["attributes"]["index"]["int"]: d["attributes"][name]["string"]
        for d in piece["spec"]["devices"]
    }


@pytest.mark.parametrize("node", ["gpu-00001", "gpu-00417"])
def test_a_nodes_slices_name_the_gpus_and_nics_its_agent_reports(node: str) -> None:
    doc = hardware.healthy(node, gpus=8, nics=8)
    gpus, host = simulated.readings(doc, at=0.0, since=0)[:2]
    reported = {s.status.index: s.status for s in gpus.gpus}  # type: ignore[attr-defined]
    gpu_slice, nic_slice = dra.node_slices(node, gpus=8, nics=8, product="H100", memory="80Gi")
    assert attributes(gpu_slice, "uuid") == {i: g.uuid for i, g in reported.items()}
    bus = {i: hardware.bus_id(i) for i in reported}
    assert attributes(gpu_slice, "pcieBusID") == bus
    assert {i: g.bus_id for i, g in reported.items()} == {i: b[:-2] for i, b in bus.items()}
    nics = {n.name for n in host.nics}  # type: ignore[attr-defined]
    assert set(attributes(nic_slice, "ifName").values()) <= nics
