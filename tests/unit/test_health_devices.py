"""Health compares the devices DRA drivers publish with what the node's agent sees: on a
simulated node they agree (both come from simcluster's hardware, as on a real node both
come from sysfs and NVML), and a device the agent lacks, or sees under another PCIe
root, is evidence."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from baton.proto.dra import ResourceSlice
from baton.proto.health import StateChanged
from baton.proto.k8s import ResourceSliceEvent
from baton.proto.telemetry import GpuReport, GpuStatus, NodeReport
from baton.services.agent import simulated
from baton.services.simcluster.world import hardware
from tests.support.dra import published_slices
from tests.unit.health_helpers import QUIET, feed, make, of, rack, tick

pytestmark = pytest.mark.unit

DISAGREE = "devices-disagree"


def slices(name: str, at: float, *, op: str = "upsert", mig: bool = True) -> list[Any]:
    return [
        ResourceSliceEvent(op=op, at=at, resource_slice=msgspec.structs.replace(s, node=name))
        for s in published_slices(name, mig=mig)
    ]


def reports(name: str, at: float, *, mig: bool = True) -> tuple[GpuReport, NodeReport]:
    """What the simulated agent reports of the node simcluster would run as ``name``."""
    doc = msgspec.json.decode(
        msgspec.json.encode(hardware.healthy(name, gpus=8, nics=8, mig=mig)),
        type=simulated.NodeHardware,
    )
    gpus, host, *_ = simulated.readings(doc, at=at, since=doc.kernel_log_seq)
    assert isinstance(gpus, simulated.Gpus) and isinstance(host, simulated.Host)
    return (
        GpuReport(node=name, at=at, gpus=tuple(g.status for g in gpus.gpus)),
        NodeReport(node=name, at=at, disks=host.disks, nics=host.nics, gpus_expected=8,
                   gpus_found=8),
    )  # fmt: skip


def evidence(state: object, node: str) -> dict[str, str]:
    rec = state.nodes[node]  # type: ignore[attr-defined]
    return {k: s.detail for k, s in rec.signals.items() if k.startswith(DISAGREE)}


@pytest.mark.parametrize("mig", [True, False])
def test_a_simulated_nodes_slices_and_its_agents_reports_agree(mig: bool) -> None:
    state = make(rack(2, prefix="gpu-0000"))
    out = feed(state, [*slices("gpu-00000", 1.0, mig=mig), *reports("gpu-00000", 2.0, mig=mig)])
    out += tick(state, 500.0)
    assert evidence(state, "gpu-00000") == {} and not of(out, StateChanged)
    devices = state.nodes["gpu-00000"].devices
    assert sum(len(p) for p in devices.published.values()) == 16  # 8 GPUs, 8 NICs; no MIG


def test_a_gpu_the_driver_publishes_and_the_agent_does_not_see_quarantines_after_60_s() -> None:
    state = make(rack(2, prefix="gpu-0000"))
    gpu_report, node_report = reports("gpu-00000", 2.0)
    missing = gpu_report.gpus[7].uuid
    gpu_report = msgspec.structs.replace(gpu_report, gpus=gpu_report.gpus[:7])
    out = feed(state, [*slices("gpu-00000", 1.0), gpu_report, node_report])
    assert [o.state for o in of(out, StateChanged)] == ["suspect"]
    assert evidence(state, "gpu-00000") == {
        f"{DISAGREE}:{missing}": f"gpu.nvidia.com publishes GPU gpu-7 ({missing}); "
        "the agent does not see it"
    }
    assert of(tick(state, 61.0), StateChanged) == []  # 59 s: a driver may be republishing
    (moved, *_) = of(tick(state, 62.0), StateChanged)
    assert (moved.state, [e.rule for e in moved.evidence]) == ("quarantined", [DISAGREE])


def test_a_nic_under_another_pcie_root_is_named_with_both_roots() -> None:
    state = make(rack(1, prefix="gpu-0000"))
    gpu_report, node_report = reports("gpu-00000", 2.0)
    moved = tuple(msgspec.structs.replace(n, pcie_root="pci0000:90") if n.name == "ib3" else n
                  for n in node_report.nics)  # fmt: skip
    feed(state, [*slices("gpu-00000", 1.0), gpu_report,
                 msgspec.structs.replace(node_report, nics=moved)])  # fmt: skip
    root = hardware.pcie_root(3)
    assert evidence(state, "gpu-00000") == {
        f"{DISAGREE}:ib3": f"dra.net publishes NIC nic-3 (ib3) under {root}; the agent "
        "sees it under pci0000:90"
    }


def test_nics_are_not_compared_when_the_agent_watches_no_rdma_nic() -> None:
    state = make(rack(1, prefix="gpu-0000"))
    gpu_report, node_report = reports("gpu-00000", 2.0)
    only_eth = tuple(n for n in node_report.nics if not n.rdma)
    feed(state, [*slices("gpu-00000", 1.0), gpu_report,
                 msgspec.structs.replace(node_report, nics=only_eth)])  # fmt: skip
    assert evidence(state, "gpu-00000") == {}


def test_nothing_is_compared_before_the_first_report_and_a_deleted_slice_ends_it() -> None:
    state = make(rack(1, prefix="gpu-0000"))
    feed(state, slices("gpu-00000", 1.0))
    assert evidence(state, "gpu-00000") == {}
    gpu_report, _ = reports("gpu-00000", 2.0)
    feed(state, [msgspec.structs.replace(gpu_report, gpus=())])  # NVML answers for none
    assert len(evidence(state, "gpu-00000")) == 8
    feed(state, slices("gpu-00000", 3.0, op="delete"))
    assert evidence(state, "gpu-00000") == {}


def test_a_slice_deleted_after_its_node_leaves_no_record() -> None:
    state = make(rack(1, prefix="gpu-0000"), QUIET)
    piece: ResourceSlice = msgspec.structs.replace(published_slices("gone")[0], node="gone")
    feed(state, [ResourceSliceEvent(op="delete", at=1.0, resource_slice=piece)])
    assert "gone" not in state.nodes


def test_a_gpu_nvml_lost_without_its_uuid_is_gpu_losts_not_unseen() -> None:
    """NVML names a GPU that fell off the bus by index only: the report has it lost,
    with no UUID, and that is gpu-lost's evidence, not a device the driver made up."""
    state = make(rack(1, prefix="gpu-0000"))
    gpu_report, node_report = reports("gpu-00000", 2.0)
    lost = GpuStatus(index=5, present=False)  # what nvml.read_gpu gives a lost GPU
    gpus = tuple(lost if g.index == 5 else g for g in gpu_report.gpus)
    feed(state, [*slices("gpu-00000", 1.0), msgspec.structs.replace(gpu_report, gpus=gpus),
                 node_report])  # fmt: skip
    signals = state.nodes["gpu-00000"].signals
    assert evidence(state, "gpu-00000") == {} and "gpu-lost:5" in signals
