"""Simulated hardware documents -> the readings a real node's backends would make."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from baton.proto.telemetry import Disk, GpuReport, GpuStatus, MigDevice, Nic
from baton.services.agent import core, simulated
from baton.services.agent.core.readings import (
    AnyReading,
    GpuProcess,
    Gpus,
    Host,
    Pods,
    Power,
    XidSeen,
)
from baton.services.agent.shell import Agent, latest_reports

pytestmark = pytest.mark.unit

XID_79 = (
    "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
)


def document(**overrides: Any) -> dict[str, Any]:
    """A NodeHardware document in the wire shape simcluster serves (plus an unknown field)."""
    doc: dict[str, Any] = {
        "node": "gpu-00001",
        "up": True,
        "expected_gpus": 2,
        "gpus": [
            {"index": 0, "uuid": "GPU-a", "bus_id": "00000000:18:00.0", "present": True,
             "temperature_c": 41, "ecc_volatile_sbe": 0, "ecc_volatile_dbe": 0,
             "ecc_aggregate_sbe": 3, "ecc_aggregate_dbe": 0, "retired_pages_pending": False,
             "retired_pages": 0, "row_remap_pending": False, "row_remap_failure": False,
             "nvlink_errors": 0, "recovery_action": "",
             "processes": [{"pid": 100, "used_mib": 70000, "pod": "team-a/job-w-0"}]},
            {"index": 1, "uuid": "GPU-b", "bus_id": "00000000:3B:00.0", "present": True,
             "temperature_c": 44, "recovery_action": "", "processes": [],
             "power_w": 650},  # a field this agent does not know
        ],
        "disks": [{"mount": "/", "used_ratio": 0.42, "read_only": False}],
        "nics": [{"name": "ib0", "up": True}],
        "pods": ["team-a/job-w-0"],
        "kernel_log": [{"seq": 11, "line": "pci 0000:3b:00.0: enabling device"}],
        "kernel_log_seq": 11,
        "rack": "r7",
    }  # fmt: skip
    doc.update(overrides)
    return doc


def decode(doc: dict[str, Any]) -> simulated.NodeHardware:
    node = simulated.decode_node(msgspec.json.encode(doc))
    assert node is not None
    return node


def test_a_document_reads_like_a_real_nodes_backends() -> None:
    gpus, host, pods = simulated.readings(decode(document()), at=5.0, since=11)
    assert isinstance(gpus, Gpus) and (gpus.expected, gpus.found) == (2, 2)
    first = gpus.gpus[0]
    assert first.status == GpuStatus(
        index=0, uuid="GPU-a", bus_id="0000:18:00", temperature_c=41, ecc_volatile_sbe=0,
        ecc_volatile_dbe=0, ecc_aggregate_sbe=3, ecc_aggregate_dbe=0, retired_pages=0,
        retired_pages_pending=False, row_remap_pending=False, row_remap_failure=False,
        nvlink_errors=0,
    )  # fmt: skip
    assert first.processes == (GpuProcess(pid=100, used_mib=70000, pod="team-a/job-w-0"),)
    assert host == Host(
        at=5.0, disks=(Disk(mount="/", used_ratio=0.42),), nics=(Nic(name="ib0", up=True),)
    )
    assert pods == Pods(at=5.0, running=frozenset({"team-a/job-w-0"}))


def test_where_a_gpu_sits_and_its_mig_instances_read_as_nvml_and_sysfs_would() -> None:
    doc = document()
    doc["gpus"][1] |= {"pcie_root": "pci0000:10", "numa_node": 0, "mig_enabled": True,
                       "mig": [{"uuid": "MIG-b-3", "profile": "1g.10gb", "gpu_instance": 3,
                                "pod": "team-a/eval-1"}]}  # fmt: skip
    doc["nics"] = [{"name": "ib1", "up": True, "rdma": True, "pcie_root": "pci0000:10"}]
    gpus, host, _ = simulated.readings(decode(doc), at=5.0, since=11)
    assert isinstance(gpus, Gpus) and isinstance(host, Host)
    status = gpus.gpus[1].status
    assert (status.pcie_root, status.numa_node, status.mig_enabled) == ("pci0000:10", 0, True)
    assert status.mig == (MigDevice(uuid="MIG-b-3", profile="1g.10gb", gpu_instance=3),)
    assert gpus.gpus[0].status.mig_enabled is None  # not said: no MIG
    assert host.nics == (Nic(name="ib1", up=True, rdma=True, pcie_root="pci0000:10"),)


def test_a_gpu_that_fell_off_the_bus_reads_nothing_but_its_identity() -> None:
    doc = document()
    doc["gpus"][1] |= {"present": False, "temperature_c": 90, "recovery_action": "reboot"}
    gpus = simulated.readings(decode(doc), at=5.0, since=11)[0]
    assert isinstance(gpus, Gpus) and gpus.found == 1
    assert gpus.gpus[1].status == GpuStatus(
        index=1, uuid="GPU-b", bus_id="0000:3b:00", present=False
    )


def test_an_unknown_recovery_action_is_named_failed_not_guessed() -> None:
    doc = document()
    doc["gpus"][0]["recovery_action"] = "pray"
    status = simulated.gpu_sample(decode(doc).gpus[0]).status
    assert (status.recovery_action, status.failed) == ("", ("recovery_action",))


def test_kernel_lines_go_through_the_kmsg_parser_after_the_mark() -> None:
    lines = [{"seq": 11, "line": "pci 0000:3b:00.0: enabling device"},
             {"seq": 12, "line": XID_79},
             {"seq": 13, "line": "3,13,812,-;NVRM: Xid (PCI:0000:18:00): 48, pid=77, name=python, "
                                 "An uncorrectable double bit error"}]  # fmt: skip
    doc = decode(document(kernel_log=lines, kernel_log_seq=13))
    seen = [r for r in simulated.readings(doc, at=5.0, since=11) if isinstance(r, XidSeen)]
    assert [(x.seq, x.xid, x.bus_id, x.pid, x.process) for x in seen] == [
        (12, 79, "0000:3b:00", None, ""),
        (13, 48, "0000:18:00", 77, "python"),
    ]
    assert all(x.source == "kmsg" for x in seen)


def collect(tracker: simulated.Tracker, *docs: dict[str, Any]) -> list[tuple[str, AnyReading]]:
    out: list[tuple[str, AnyReading]] = []
    for doc in docs:
        tracker.apply(decode(doc), at=1.0, emit=lambda n, r: out.append((n, r)))
    return out


def test_lines_from_before_the_first_sight_are_not_replayed() -> None:
    old = [{"seq": 12, "line": XID_79}]
    new = [*old, {"seq": 13, "line": XID_79}]
    tracker = simulated.Tracker()
    first = collect(tracker, document(kernel_log=old, kernel_log_seq=12))
    later = collect(tracker, document(kernel_log=new, kernel_log_seq=13))
    assert not [r for _, r in first if isinstance(r, XidSeen)]
    assert [r.seq for _, r in later if isinstance(r, XidSeen)] == [13]


def test_power_off_and_on_and_a_fresh_mark_after_power_on() -> None:
    tracker = simulated.Tracker()
    log = [{"seq": 20, "line": XID_79}]
    out = collect(
        tracker,
        document(),
        document(up=False),
        document(up=False, kernel_log=log, kernel_log_seq=20),
        document(up=True, kernel_log=log, kernel_log_seq=20),
    )
    powers = [r.up for _, r in out if isinstance(r, Power)]
    assert powers == [False, True]
    assert not [r for _, r in out if isinstance(r, XidSeen)]  # logged while off: before "now"
    assert isinstance(out[-1][1], Pods)  # readings again once up


def test_a_node_first_seen_powered_off_says_so_and_only_its_own_node_is_tracked() -> None:
    tracker = simulated.Tracker(nodes=["gpu-00002"])
    out = collect(tracker, document(), document(node="gpu-00002", up=False))
    assert out == [("gpu-00002", Power(at=1.0, up=False))]


def test_a_deleted_node_is_powered_off() -> None:
    tracker = simulated.Tracker()
    collect(tracker, document())
    out: list[tuple[str, AnyReading]] = []
    tracker.keep_only(set(), at=2.0, emit=lambda n, r: out.append((n, r)))
    assert out == [("gpu-00001", Power(at=2.0, up=False))]


def test_a_malformed_document_is_skipped() -> None:
    assert simulated.decode_node(b'{"node": "n", "gpus": "eight"}') is None


def test_a_pod_that_starts_is_never_published_as_zombie_memory() -> None:
    """One document is stepped reading by reading (GPUs before pods); the batch publishes
    only its last report per node and kind, so no half-applied state goes out."""
    agent = Agent(config=core.Config(node="", backends=("sim",)), cluster="c1",
                  clock=lambda: 5.0)  # fmt: skip
    idle = document(pods=[], gpus=[{**document()["gpus"][0], "processes": []}])
    for reading in simulated.readings(decode(idle), at=4.0, since=11):
        agent.feed("gpu-00001", reading)
    outputs = [o for r in simulated.readings(decode(document()), at=5.0, since=11)
               for o in agent.feed("gpu-00001", r)]  # fmt: skip
    stepped = [o.event.gpus[0].zombie_mib for o in outputs if isinstance(o.event, GpuReport)]
    assert stepped == [70000, 0]  # half-applied, then whole
    (published,) = [o.event for o in latest_reports(outputs) if isinstance(o.event, GpuReport)]
    assert published.gpus[0].zombie_mib == 0
