"""The kernel log parser on real Xid lines and real /dev/kmsg and journald records."""

from __future__ import annotations

import json

import pytest

from baton.services.agent.core import kmsg

pytestmark = pytest.mark.unit

# Xid lines as drivers of several generations wrote them (from public bug reports and
# health checkers' fixtures): (line, bus id, xid, pid, process, text).
XID_LINES = [
    (
        "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.",
        "0000:3b:00", 79, None, "", "GPU has fallen off the bus.",
    ),
    (
        "[1235733.431527] NVRM: Xid (PCI:0000:4e:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.",
        "0000:4e:00", 79, None, "", "GPU has fallen off the bus.",
    ),
    (
        "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
        "0000:01:00", 79, None, "", "GPU has fallen off the bus.",
    ),
    (
        "[...] NVRM: Xid (0000:03:00): 14, Channel 00000001",
        "0000:03:00", 14, None, "", "Channel 00000001",
    ),
    (
        "NVRM: Xid (PCI:0000:61:00): 119, pid=123417, name=nv-hostengine, Timeout after 6s of "
        "waiting for RPC response from GPU0 GSP! Expected function 10 (FREE) (0xc0000005 0x0).",
        "0000:61:00", 119, 123417, "nv-hostengine",
        "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 10 "
        "(FREE) (0xc0000005 0x0).",
    ),
    (
        "kernel: [16450076.435595] NVRM: Xid (PCI:0002:00:00): 119, pid=1582259, "
        "name=nvc:[driver], Timeout after 6s of waiting for RPC response from GPU1 GSP! "
        "Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8).",
        "0002:00:00", 119, 1582259, "nvc:[driver]",
        "Timeout after 6s of waiting for RPC response from GPU1 GSP! Expected function 76 "
        "(GSP_RM_CONTROL) (0x20802a02 0x8).",
    ),
    (
        "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, "
        "reset gpu to activate.",
        "0000:10:1c", 63, 1896, "",
        "Row Remapper: New row marked for remapping, reset gpu to activate.",
    ),
    (
        "NVRM: Xid (PCI:0000:52:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row "
        "(0x0000000018f31d80) marked for remapping, reset gpu to activate.",
        "0000:52:00", 63, None, "",
        "Row Remapper: New row (0x0000000018f31d80) marked for remapping, reset gpu to activate.",
    ),
    (
        "NVRM: Xid (PCI:0000:81:00): 31, pid='<unknown>', name=<unknown>, Ch 00000016, intr "
        "10000000. MMU Fault: ENGINE GRAPHICS HUBCLIENT_FECS faulted @ 0x0_00000000. Fault is of "
        "type FAULT_PDE ACCESS_TYPE_READ",
        "0000:81:00", 31, None, "",
        "Ch 00000016, intr 10000000. MMU Fault: ENGINE GRAPHICS HUBCLIENT_FECS faulted @ "
        "0x0_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_READ",
    ),
    (
        "NVRM: Xid (PCI:0000:01:00): 95, pid=7062, Uncontained: LTC TAG (0x2,0x0). RST: Yes, "
        "D-RST: No",
        "0000:01:00", 95, 7062, "", "Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No",
    ),
    (
        "Feb 01 14:25:31 archbox kernel: NVRM: Xid (PCI:0000:01:00): 38, pid=1659,",
        "0000:01:00", 38, 1659, "", "",
    ),
    (
        "error: NVRM: Xid (PCI:0000:03:00): 48, pid='<unknown>', name=<unknown>",
        "0000:03:00", 48, None, "", "",
    ),
    (
        "NVRM: Xid (PCI:0000:2b:00): 31, pid=1942, name=llama-bench, channel 0x00000002, "
        "intr 00000000. MMU Fault: ENGINE GRAPHICS",
        "0000:2b:00", 31, 1942, "llama-bench",
        "channel 0x00000002, intr 00000000. MMU Fault: ENGINE GRAPHICS",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("line", "bus", "xid", "pid", "process", "text"), XID_LINES)
def test_xid_lines_of_every_driver_format_parse(
    line: str, bus: str, xid: int, pid: int | None, process: str, text: str
) -> None:
    assert kmsg.parse_xid(line) == kmsg.Xid(
        bus_id=bus, xid=xid, pid=pid, process=process, text=text
    )


@pytest.mark.parametrize(
    "line",
    [
        "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted",
        "NVRM: GPU at PCI:0000:81:00: GPU-71dcdf29-68ae-87d1-b57b-86d9f8f01ffc",
        "NVRM: Xid error: xyz, invalid data",
        "NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has",
        "pci 0000:00:03.0: [1af4:1041] type 00 class 0x020000 conventional PCI endpoint",
    ],
)
def test_lines_that_are_not_xids_give_none(line: str) -> None:
    assert kmsg.parse_xid(line) is None


@pytest.mark.parametrize(
    ("text", "bus"),
    [
        ("00000000:3B:00.0", "0000:3b:00"),  # NVML's busId
        ("PCI:0000:3b:00", "0000:3b:00"),  # an Xid line's
        ("0000:3b:00.0", "0000:3b:00"),  # sysfs
        ("0002:00:00", "0002:00:00"),
        ("gpu-0", ""),
    ],
)
def test_bus_ids_from_nvml_kernel_and_sysfs_agree(text: str, bus: str) -> None:
    assert kmsg.bus_id(text) == bus


# Real records read from this kind of machine's /dev/kmsg (bytes as read()).
KMSG_RECORDS = [
    (
        b"6,187,398648,-;acpi PNP0A08:00: _OSC: OS supports [ExtendedConfig ASPM ClockPM "
        b"Segments MSI HPX-Type3]\n SUBSYSTEM=acpi\n DEVICE=+acpi:PNP0A08:00\n",
        kmsg.Record(
            seq=187, priority=6, monotonic_us=398648,
            message="acpi PNP0A08:00: _OSC: OS supports [ExtendedConfig ASPM ClockPM Segments "
            "MSI HPX-Type3]",
        ),
    ),
    (
        b"6,90,316978,-;rcu: \\x09RCU restricting CPUs from NR_CPUS=256 to nr_cpu_ids=2.\n",
        kmsg.Record(
            seq=90, priority=6, monotonic_us=316978,
            message="rcu: \tRCU restricting CPUs from NR_CPUS=256 to nr_cpu_ids=2.",
        ),
    ),
    (
        b"3,2893,812100001,-;NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
        b"GPU has fallen off the bus.\n",
        kmsg.Record(
            seq=2893, priority=3, monotonic_us=812100001,
            message="NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
            "GPU has fallen off the bus.",
        ),
    ),
    (  # facility 0 (kernel) and level 4 in the priority; a flag field beyond the fourth
        b"4,2,0,-,caller=T1;[Firmware Bug]: TSC doesn't count with P0 frequency!\n",
        kmsg.Record(
            seq=2, priority=4, monotonic_us=0,
            message="[Firmware Bug]: TSC doesn't count with P0 frequency!",
        ),
    ),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "record"), KMSG_RECORDS)
def test_kmsg_records_parse(raw: bytes, record: kmsg.Record) -> None:
    assert kmsg.parse_kmsg(raw) == record


@pytest.mark.parametrize("raw", [b"", b"no header here", b"6,x,0,-;text", b"6,1;short"])
def test_kmsg_garbage_gives_none(raw: bytes) -> None:
    assert kmsg.parse_kmsg(raw) is None


JOURNAL_ENTRY = {
    "__CURSOR": "s=a063a22bbb384da0b0412e8f652deabb;i=23c2;b=b03ed610f21d46ab8243a495ba5a0058;"
    "m=6bab28e1;t=5b087959e3cfd;x=20528862f8f765c9",
    "__REALTIME_TIMESTAMP": "1601471260802301",
    "__MONOTONIC_TIMESTAMP": "1806379233",
    "_BOOT_ID": "b03ed610f21d46ab8243a495ba5a0058",
    "_TRANSPORT": "kernel",
    "SYSLOG_FACILITY": "0",
    "SYSLOG_IDENTIFIER": "kernel",
    "_SOURCE_MONOTONIC_TIMESTAMP": "1805611354",
    "PRIORITY": "3",
    "MESSAGE": "NVRM: Xid (PCI:0000:61:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal "
    "error detected on link 5(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
}


def test_journal_entry_takes_its_seq_from_the_cursor() -> None:
    record = kmsg.parse_journal(json.dumps(JOURNAL_ENTRY))
    assert record is not None
    assert (record.seq, record.priority, record.monotonic_us) == (0x23C2, 3, 1805611354)
    xid = kmsg.parse_xid(record.message)
    assert xid is not None and (xid.xid, xid.bus_id) == (74, "0000:61:00")


def test_journal_entry_prefers_seqnum_and_decodes_a_byte_message() -> None:
    message = list("NVRM: Xid (PCI:0000:07:00): 48, caf\xe9".encode("latin-1"))
    entry = {**JOURNAL_ENTRY, "__SEQNUM": "91", "MESSAGE": message}
    record = kmsg.parse_journal(json.dumps(entry).encode())
    assert record is not None and record.seq == 91
    assert record.message.startswith("NVRM: Xid (PCI:0000:07:00): 48, caf")


@pytest.mark.parametrize("line", ["", "not json", "[1, 2]", json.dumps({"MESSAGE": "no seq"})])
def test_journal_garbage_gives_none(line: str) -> None:
    assert kmsg.parse_journal(line) is None


def test_xids_keep_each_records_seq_and_skip_other_lines() -> None:
    records = [kmsg.parse_kmsg(raw) for raw, _ in KMSG_RECORDS]
    seen = kmsg.xids([r for r in records if r is not None], at=5.0)
    assert [(x.seq, x.xid, x.bus_id, x.source, x.at) for x in seen] == [
        (2893, 79, "0000:3b:00", "kmsg", 5.0)
    ]
