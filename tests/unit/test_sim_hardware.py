"""Simulated node hardware as pure data: the document, Xids, fault kinds, the feed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from baton.services.simcluster.api.history import Expired
from baton.services.simcluster.world import faults, hardware, xids
from baton.services.simcluster.world.hardware import Gpu, NodeHardware
from baton.services.simcluster.world.hardware_feed import HardwareFeed

pytestmark = pytest.mark.unit

# The document's shape is a contract with the node agent: exactly these fields.
SHAPE = {
    "node": ["node", "up", "expected_gpus", "gpus", "disks", "nics", "pods", "kernel_log",
             "kernel_log_seq"],
    "gpu": ["index", "uuid", "bus_id", "present", "temperature_c", "ecc_volatile_sbe",
            "ecc_volatile_dbe", "ecc_aggregate_sbe", "ecc_aggregate_dbe", "retired_pages_pending",
            "retired_pages", "row_remap_pending", "row_remap_failure", "nvlink_errors",
            "recovery_action", "processes", "pcie_root", "numa_node", "mig_enabled", "mig"],
    "process": ["pid", "used_mib", "pod"],
    "disk": ["mount", "used_ratio", "read_only"],
    "nic": ["name", "up", "rdma", "pcie_root"],
    "line": ["seq", "line"],
}  # fmt: skip


def node(gpus: int = 8, nics: int = 8) -> NodeHardware:
    return hardware.healthy("gpu-00001", gpus=gpus, nics=nics)


def test_the_document_has_exactly_the_agreed_fields() -> None:
    doc = node()
    doc.gpus[0].processes.append(hardware.GpuProcess(pid=1, used_mib=2, pod="a/b"))
    wire = json.loads(msgspec.json.encode(doc))
    assert list(wire) == SHAPE["node"]
    assert list(wire["gpus"][0]) == SHAPE["gpu"]
    assert list(wire["gpus"][0]["processes"][0]) == SHAPE["process"]
    assert list(wire["disks"][0]) == SHAPE["disk"]
    assert list(wire["nics"][0]) == SHAPE["nic"]
    assert list(wire["kernel_log"][0]) == SHAPE["line"]


def test_a_healthy_hgx_node() -> None:
    doc = node()
    assert (doc.up, doc.expected_gpus, len(doc.gpus)) == (True, 8, 8)
    assert [g.bus_id for g in doc.gpus[:2]] == ["0000:18:00.0", "0000:3b:00.0"]
    assert len({g.uuid for g in doc.gpus}) == 8
    assert doc.gpus[3].uuid == hardware.gpu_uuid("gpu-00001", 3)  # stable
    assert doc.gpus[3].uuid.startswith("GPU-") and len(doc.gpus[3].uuid) == 40
    assert [n.name for n in doc.nics] == ["eth0", *(f"ib{i}" for i in range(8))]
    assert [d.mount for d in doc.disks] == ["/", "/var/lib/containerd", "/raid"]
    assert doc.kernel_log_seq == 1 and "NVRM: loading NVIDIA" in doc.kernel_log[0].line
    assert hardware.problems(doc) == [] and hardware.unhealthy_gpus(doc) == 0
    assert hardware.healthy("cpu-1", gpus=0, nics=0).kernel_log == []


def test_the_kernel_log_keeps_its_last_64_lines() -> None:
    doc = node()
    for i in range(100):
        hardware.log(doc, f"line {i}")
    assert len(doc.kernel_log) == 64
    assert doc.kernel_log_seq == 101 and doc.kernel_log[-1].seq == 101
    assert doc.kernel_log[0].line == "line 36"


def test_xid_79_takes_the_gpu_off_the_bus_and_asks_for_a_reboot() -> None:
    doc = node()
    xids.raise_xid(doc, doc.gpus[1], 79)
    gpu = doc.gpus[1]
    assert (gpu.present, gpu.recovery_action) == (False, "reboot")
    assert [x.line for x in doc.kernel_log[1:]] == [
        "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:3b:00): 154, pid='<unknown>', name=<unknown>, "
        "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
    ]
    assert hardware.unhealthy_gpus(doc) == 1
    assert hardware.problems(doc) == [
        "7 of 8 GPUs present",
        "GPU 1 (0000:3b:00.0): not present (fallen off the bus)",
    ]


Check = Callable[[Gpu], bool]


@pytest.mark.parametrize(
    ("xid", "effect", "unhealthy"),
    [
        (13, lambda g: g.recovery_action == "" and g.present, False),
        (31, lambda g: g.recovery_action == "", False),
        (43, lambda g: g.recovery_action == "", False),
        (48, lambda g: (g.ecc_volatile_dbe, g.ecc_aggregate_dbe, g.row_remap_pending)
         == (1, 1, True) and g.recovery_action == "reset", True),
        (63, lambda g: g.row_remap_pending and g.recovery_action == "reset", False),
        (64, lambda g: g.row_remap_failure and g.recovery_action == "drain", True),
        (74, lambda g: g.nvlink_errors == 1 and g.recovery_action == "reset", False),
        (92, lambda g: g.ecc_volatile_sbe == 64 and g.recovery_action == "", False),
        (94, lambda g: g.ecc_volatile_dbe == 1 and g.row_remap_pending, True),
        (95, lambda g: g.ecc_volatile_dbe == 1 and g.recovery_action == "drain", True),
        (119, lambda g: g.recovery_action == "reset" and g.present, False),
        (120, lambda g: g.recovery_action == "reset", False),
    ],
)  # fmt: skip
def test_each_xid_logs_its_line_and_changes_the_gpu(
    xid: int, effect: Check, unhealthy: bool
) -> None:
    doc = node()
    xids.raise_xid(doc, doc.gpus[2], xid)
    assert effect(doc.gpus[2])
    assert doc.kernel_log[1].line.startswith(f"NVRM: Xid (PCI:0000:4c:00): {xid}, ")
    assert doc.kernel_log[1].line.endswith(xids.XIDS[xid].text.format(gpu=2))
    assert hardware.unhealthy_gpus(doc) == int(unhealthy)
    assert all(
        g == Gpu(index=g.index, uuid=g.uuid, bus_id=g.bus_id, pcie_root=g.pcie_root,
                 numa_node=g.numa_node)
        for g in doc.gpus if g.index != 2
    )  # fmt: skip


def test_application_xids_name_the_process_on_the_gpu() -> None:
    doc = node()
    doc.gpus[0].processes.append(hardware.GpuProcess(pid=4242, used_mib=10, pod="team-a/job-0"))
    xids.raise_xid(doc, doc.gpus[0], 13)
    assert "13, pid=4242, name=python3, Graphics SM Warp Exception" in doc.kernel_log[-1].line


def test_recovery_action_only_escalates() -> None:
    doc = node()
    xids.raise_xid(doc, doc.gpus[0], 79)
    xids.raise_xid(doc, doc.gpus[0], 74)  # a reset is less than the reboot already asked
    assert doc.gpus[0].recovery_action == "reboot"
    assert sum(" 154, " in x.line for x in doc.kernel_log) == 1
    with pytest.raises(ValueError, match="unknown Xid 7"):
        xids.raise_xid(doc, doc.gpus[0], 7)


# fault kinds: inject, then heal back to a healthy node

Probe = Callable[[NodeHardware], object]
KIND_CASES: list[tuple[str, dict[str, object], Probe]] = [
    ("xid", {"xid": 48, "gpu": 5}, lambda d: d.gpus[5].ecc_volatile_dbe == 1),
    ("ecc", {"gpu": 1, "sbe": 3, "dbe": 2}, lambda d: (d.gpus[1].ecc_volatile_sbe,
        d.gpus[1].ecc_aggregate_dbe, d.gpus[1].row_remap_pending) == (3, 2, True)),
    ("nvlink", {"gpu": 7, "errors": 12}, lambda d: d.gpus[7].nvlink_errors == 12),
    ("gpu-lost", {"gpu": 3}, lambda d: not d.gpus[3].present),
    ("zombie-gpu", {"gpu": 4, "mib": 1000},
     lambda d: [(p.used_mib, p.pod) for p in d.gpus[4].processes] == [(1000, "")]),
    ("disk-full", {"mount": "/"}, lambda d: d.disks[0].used_ratio == 1.0
        and hardware.disk_pressure(d)),
    ("disk-readonly", {"mount": "/raid"}, lambda d: d.disks[2].read_only
        and "EXT4-fs (md0): Remounting filesystem read-only" in d.kernel_log[-1].line),
    ("nic-down", {"nic": "ib3"}, lambda d: not d.nics[4].up
        and d.kernel_log[-1].line.endswith("mlx5_4: Port: 1 Link DOWN")),
    ("agent-down", {}, lambda d: not d.up),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "detail", "probe"), KIND_CASES, ids=[c[0] for c in KIND_CASES])
def test_each_fault_kind_injects_then_heals(
    kind: str, detail: dict[str, object], probe: Probe
) -> None:
    doc, fresh = node(), node()
    fault = faults.fault(kind, **detail)
    faults.KINDS[kind].inject(doc, fault)
    assert probe(doc)
    faults.KINDS[kind].heal(doc, faults.fault(kind))  # heal without details: every GPU
    assert hardware.problems(doc) == [] and not hardware.disk_pressure(doc)
    for got, want in zip(doc.gpus, fresh.gpus, strict=True):  # aggregate counters stay
        assert msgspec.structs.replace(got, ecc_aggregate_sbe=0, ecc_aggregate_dbe=0) == want
    assert (doc.disks, doc.nics, doc.up) == (fresh.disks, fresh.nics, fresh.up)


def test_fault_details_are_checked_and_named() -> None:
    assert faults.parse_detail("xid", "xid=79 gpu=3") == faults.Fault(kind="xid", xid=79, gpu=3)
    assert faults.parse_detail("disk-full", "mount=/raid;ratio=0.97").ratio == 0.97
    for kind, text, message in (
        ("boom", "", "unknown fault 'boom'"),
        ("xid", "xid=7", "unknown Xid 7"),
        ("xid", "gpu=-1", "gpu: expected >= 0"),
        ("xid", "gpu", "key=value"),
        ("nvlink", "errors=many", "errors"),
        ("nic-down", "colour=red", "colour"),
    ):
        with pytest.raises(faults.FaultError, match=message):
            faults.parse_detail(kind, text)
    with pytest.raises(faults.FaultError, match="no GPU 9"):
        faults.check(node(), faults.fault("gpu-lost", gpu=9))
    with pytest.raises(faults.FaultError, match="no disk"):
        faults.check(node(), faults.fault("disk-full", mount="/data"))
    with pytest.raises(faults.FaultError, match="no NIC"):
        faults.check(node(nics=2), faults.fault("nic-down", nic="ib7"))


# the feed


def events(lines: bytes) -> list[tuple[str, str, str]]:
    out = []
    for line in lines.splitlines():
        e = json.loads(line)
        out.append((e["type"], e["object"]["node"], e["resourceVersion"]))
    return out


def test_feed_publishes_coalesced_changes_with_its_own_versions() -> None:
    feed = HardwareFeed()
    feed.add("a", gpus=8, nics=8)
    feed.add("b", gpus=8, nics=8)
    assert feed.rv == 0  # nobody has read: nothing published, nothing built
    rv, items = feed.list()
    assert rv == 1 and [json.loads(i)["node"] for i in items] == ["a", "b"]
    watcher = feed.watch(since=rv, node=None, capacity=100)
    only_b = feed.watch(since=rv, node="b", capacity=100)
    for _ in range(3):  # three edits before a flush: one MODIFIED
        xids.raise_xid(feed.machine("b"), feed.machine("b").gpus[0], 13)
        feed.touch("b")
    feed.add("c", gpus=0, nics=0)
    feed.remove("c")  # never published, never announced
    feed.remove("a")
    feed.flush()
    assert events(watcher.drain()) == [("DELETED", "a", "2"), ("MODIFIED", "b", "3")]
    assert events(only_b.drain()) == [("MODIFIED", "b", "3")]
    assert json.loads(feed.list("b")[1][0])["kernel_log_seq"] == 4
    assert feed.list("a")[1] == [] and "a" not in feed
    with pytest.raises(Expired):  # before the first reader there is no history
        feed.watch(since=0, node=None, capacity=10)


def test_watch_from_a_version_older_than_the_history_is_expired() -> None:
    feed = HardwareFeed(history=3)
    feed.add("a", gpus=1, nics=0)
    feed.list()
    for _ in range(5):
        feed.touch("a")
        feed.flush()
    assert feed.rv == 6
    with pytest.raises(Expired):
        feed.watch(since=2, node=None, capacity=10)
    resumed = feed.watch(since=4, node=None, capacity=10)
    assert [rv for *_, rv in events(resumed.drain())] == ["5", "6"]


def test_running_pods_hold_healthy_gpus_first() -> None:
    feed = HardwareFeed()
    feed.add("n", gpus=4, nics=0)
    xids.raise_xid(feed.machine("n"), feed.machine("n").gpus[0], 79)
    feed.pod_started("n", "ns/a", gpus=2)
    feed.pod_started("n", "ns/b", gpus=1)
    assert (feed.gpus_of("n", "ns/a"), feed.gpus_of("n", "ns/b")) == ([1, 2], [3])
    doc = feed.machine("n")
    assert doc.pods == ["ns/a", "ns/b"]
    pids = [p.pid for g in doc.gpus for p in g.processes]
    assert len(set(pids)) == 3 and doc.gpus[1].processes[0].pod == "ns/a"
    feed.pod_stopped("n", "ns/a")
    assert doc.pods == ["ns/b"] and not doc.gpus[1].processes and doc.gpus[3].processes
    feed.pod_stopped("n", "ns/unknown")  # never started: nothing to do


def test_a_pod_runs_on_the_gpus_its_claims_gave_and_its_mig_devices_exist_while_it_runs() -> None:
    feed = HardwareFeed()
    feed.add("n", gpus=4, nics=0, mig=True)
    feed.pod_started("n", "ns/whole", gpus=1, on=[3])
    feed.pod_started("n", "ns/small", gpus=0, mig=[(1, 5), (1, 6)])
    doc = feed.machine("n")
    assert feed.gpus_of("n", "ns/whole") == [3] and doc.gpus[3].processes[0].pod == "ns/whole"
    assert all(g.mig_enabled for g in doc.gpus)
    uuid = hardware.gpu_uuid("n", 1)
    assert [(m.uuid, m.profile, m.pod) for m in doc.gpus[1].mig] == [
        (f"MIG-{uuid[4:]}-5", "1g.10gb", "ns/small"), (f"MIG-{uuid[4:]}-6", "1g.10gb", "ns/small")
    ]  # fmt: skip
    feed.pod_stopped("n", "ns/small")
    assert doc.gpus[1].mig == [] and doc.pods == ["ns/whole"]
    feed.pod_started("n", "ns/late", gpus=0, mig=[(0, 0)])
    feed._docs.clear()  # built again (a node's document is made on first use)
    assert [m.pod for m in feed.machine("n").gpus[0].mig] == ["ns/late"]


def test_a_gpu_and_its_rdma_nic_share_a_pcie_root() -> None:
    doc = node()
    roots = [g.pcie_root for g in doc.gpus]
    assert roots[0] == roots[1] != roots[2]  # two GPUs per PCIe switch
    assert [n.pcie_root for n in doc.nics[1:]] == roots and all(n.rdma for n in doc.nics[1:])
    assert not doc.nics[0].rdma and doc.nics[0].pcie_root not in roots
    assert [g.numa_node for g in doc.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(g.mig_enabled is None for g in doc.gpus)  # not a MIG pool


def test_a_document_built_late_shows_the_pods_already_running() -> None:
    feed = HardwareFeed()
    feed.add("n", gpus=8, nics=8)
    feed.pod_started("n", "ns/a", gpus=8)
    feed.pod_started("n", "ns/b", gpus=0)
    feed.pod_stopped("n", "ns/b")
    doc = feed.machine("n")  # built now, from the GPUs the pods hold
    assert doc.pods == ["ns/a"]
    assert [p.pod for g in doc.gpus for p in g.processes] == ["ns/a"] * 8
    assert {g.temperature_c for g in doc.gpus} == {67}


def test_the_docs_list_every_fault_kind_and_xid() -> None:
    text = (Path(__file__).parents[2] / "docs" / "simcluster.md").read_text()
    for kind in faults.KINDS:
        assert f"| `{kind}` |" in text, kind
    for number, xid in xids.XIDS.items():
        assert f"| {number} | {xid.name} |" in text, number
