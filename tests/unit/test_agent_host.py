"""Disks and NICs: the mount table, statvfs, and /sys/class/net, on real formats."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from baton.proto.telemetry import Disk, Nic
from baton.services.agent.core import disks, nics, pci

pytestmark = pytest.mark.unit

# A real /proc/mounts (a Kubernetes GPU node), with a space escaped as \040.
MOUNTS = """\
/dev/nvme0n1p1 / ext4 rw,relatime,discard 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
/dev/nvme1n1 /var/lib/kubelet xfs rw,noatime,attr2,inode64,logbufs=8,logbsize=32k,noquota 0 0
/dev/md127 /raid0 ext4 ro,relatime,stripe=256 0 0
tmpfs /run/nvidia/driver tmpfs rw,nosuid,nodev,size=26306544k,mode=755 0 0
/dev/sdb1 /mnt/scratch\\040space ext4 rw,relatime 0 0
overlay /var/lib/kubelet/pods/x/volumes overlay ro,relatime,lowerdir=/a,upperdir=/b 0 0
"""


def test_mount_table_parses_with_escapes() -> None:
    table = disks.parse_mounts(MOUNTS)
    assert [m.point for m in table][:4] == ["/", "/proc", "/var/lib/kubelet", "/raid0"]
    assert table[5].point == "/mnt/scratch space"
    assert "ro" in table[3].options and "ro" not in table[0].options


@pytest.mark.parametrize(
    ("path", "mount"),
    [
        ("/", "/"),
        ("/var/lib/kubelet", "/var/lib/kubelet"),
        ("/var/lib/kubelet/plugins", "/var/lib/kubelet"),
        ("/var/lib/kubeletx", "/"),  # a prefix that is not a parent
        ("/raid0/ckpt", "/raid0"),
        ("/mnt/scratch space", "/mnt/scratch space"),
    ],
)
def test_the_mount_holding_a_path_is_the_longest_parent(path: str, mount: str) -> None:
    found = disks.mount_of(path, disks.parse_mounts(MOUNTS))
    assert found is not None and found.point == mount


def test_used_ratio_is_dfs_use_percent() -> None:
    # 1000 blocks, 400 free of which 300 available to users: used 600 / (600 + 300)
    stat = os.statvfs_result((4096, 4096, 1000, 400, 300, 10, 5, 5, 0, 255))
    assert disks.used_ratio(stat) == pytest.approx(0.6667, abs=1e-4)


def test_disks_read_this_machine_and_name_a_missing_mount(tmp_path: Path) -> None:
    mounts_file = tmp_path / "mounts"
    mounts_file.write_text(MOUNTS)
    found = disks.read_disks(["/", "/raid0", "/no/such/mount"], mounts_file=str(mounts_file))
    root, raid, missing = found
    assert root.mount == "/" and 0.0 < root.used_ratio < 1.0 and not root.error
    assert raid == Disk(mount="/raid0", error="No such file or directory")
    assert missing.error == "No such file or directory"


def test_read_only_comes_from_the_hosts_mount_table_under_a_root(tmp_path: Path) -> None:
    """In the DaemonSet the host's / is at /host; the host's own flags decide."""
    (tmp_path / "raid0").mkdir()
    mounts_file = tmp_path / "mounts"
    mounts_file.write_text(MOUNTS)
    root, raid = disks.read_disks(["/", "/raid0"], root=str(tmp_path), mounts_file=str(mounts_file))
    assert (root.mount, root.read_only) == ("/", False)
    assert (raid.mount, raid.read_only) == ("/raid0", True)


@pytest.mark.parametrize(
    ("operstate", "carrier", "up"),
    [
        ("up", "1", True),
        ("down", "", False),  # carrier of a down link: EINVAL, read as ''
        ("lowerlayerdown", "0", False),
        ("dormant", "1", False),
        ("unknown", "1", True),  # drivers that do not report operstate
        ("unknown", "0", False),
    ],
)
def test_link_up(operstate: str, carrier: str, up: bool) -> None:
    assert nics.link_up(operstate, carrier) is up


def sysfs(root: Path, name: str, *, operstate: str, carrier: str | None, device: bool) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "operstate").write_text(operstate + "\n")
    if carrier is not None:
        (folder / "carrier").write_text(carrier + "\n")
    if device:
        (folder / "device").mkdir()


def test_physical_nics_by_default_and_globs_when_named(tmp_path: Path) -> None:
    sysfs(tmp_path, "eth0", operstate="up", carrier="1", device=True)
    sysfs(tmp_path, "ib0", operstate="down", carrier=None, device=True)
    sysfs(tmp_path, "lo", operstate="unknown", carrier="1", device=False)
    sysfs(tmp_path, "veth12ab", operstate="up", carrier="1", device=False)
    assert nics.read_nics(sys_net=str(tmp_path)) == (
        Nic(name="eth0", up=True),
        Nic(name="ib0", up=False),
    )
    assert nics.read_nics(sys_net=str(tmp_path), names=["ib*", "lo"]) == (
        Nic(name="ib0", up=False),
        Nic(name="lo", up=True),
    )


def test_this_machines_loopback_reads_up() -> None:
    assert nics.read_nics(names=["lo"]) == (Nic(name="lo", up=True),)


def pci_device(root: Path, path: str, *, numa: str | None) -> Path:
    """A device directory under a fake ``/sys/devices`` (``pci0000:3a/0000:3a:00.0/...``)."""
    folder = root / "devices" / path
    folder.mkdir(parents=True)
    if numa is not None:
        (folder / "numa_node").write_text(numa + "\n")
    return folder


def test_an_rdma_nic_says_so_and_names_its_pcie_root(tmp_path: Path) -> None:
    net = tmp_path / "class" / "net"
    sysfs(net, "ib0", operstate="up", carrier="1", device=False)
    sysfs(net, "eth0", operstate="up", carrier="1", device=False)
    ib = pci_device(tmp_path, "pci0000:3a/0000:3a:00.0/0000:3b:00.0", numa="1")
    (ib / "infiniband" / "mlx5_0").mkdir(parents=True)
    eth = pci_device(tmp_path, "pci0000:c0/0000:c0:01.0/0000:c1:00.0", numa="-1")
    (net / "ib0" / "device").symlink_to(ib)
    (net / "eth0" / "device").symlink_to(eth)
    assert nics.read_nics(sys_net=str(net)) == (
        Nic(name="eth0", up=True, pcie_root="pci0000:c0"),
        Nic(name="ib0", up=True, rdma=True, pcie_root="pci0000:3a"),
    )
    assert pci.locate(str(net / "ib0" / "device")) == ("pci0000:3a", 1)
    assert pci.locate(str(net / "eth0" / "device")) == ("pci0000:c0", None)  # -1: not said


def test_a_gpu_is_located_by_nvmls_bus_id(tmp_path: Path) -> None:
    gpu = pci_device(tmp_path, "pci0000:10/0000:10:01.0/0000:18:00.0", numa="0")
    bus = tmp_path / "bus"
    bus.mkdir()
    (bus / "0000:18:00.0").symlink_to(gpu)
    assert pci.sysfs_address("00000000:18:00.0") == "0000:18:00.0"
    assert pci.sysfs_address("00000001:3B:00.1") == "0001:3b:00.1"
    assert pci.sysfs_address("not a bus") == ""
    assert pci.locate_bus("00000000:18:00.0", sys_pci=str(bus)) == ("pci0000:10", 0)
    assert pci.locate_bus("00000000:99:00.0", sys_pci=str(bus)) == ("", None)  # not there


def test_this_machines_physical_nics_sit_under_a_pcie_root_and_loopback_under_none() -> None:
    found = {n.name: n for n in nics.read_nics(names=["*"])}
    assert found["lo"].pcie_root == "" and not found["lo"].rdma
    physical = [n for n in nics.read_nics() if n.name in found]
    for nic in physical:  # a VM's virtio NIC is PCI too; a container may show none
        assert re.fullmatch(r"pci[0-9a-f]{4}:[0-9a-f]{2}", nic.pcie_root), nic
