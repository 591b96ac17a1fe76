"""The real-node backends on this machine: /dev/kmsg, a journalctl-shaped process, and
``baton agent --once --json`` end to end (no GPU here: NVML must say it is unavailable)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from baton.services.agent.backends import KernelLogPoller
from baton.services.agent.core import kmsg
from baton.services.agent.core.readings import Backend
from tests.unit.test_agent_kmsg import JOURNAL_ENTRY

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]


def _kmsg_writable() -> bool:
    return os.access("/dev/kmsg", os.R_OK | os.W_OK)


@pytest.mark.skipif(not _kmsg_writable(), reason="needs read and write access to /dev/kmsg")
def test_kmsg_reader_starts_at_now_and_reads_new_records_without_blocking() -> None:
    """Writes a harmless marker (never an Xid: a real node's health pipeline would act)."""
    reader = kmsg.KmsgReader()
    try:
        assert all("baton-agent-test" not in r.message for r in reader.read())
        marker = f"baton-agent-test {uuid.uuid4()}"
        with open("/dev/kmsg", "w") as log:
            log.write(f"<6>{marker}\n")
        deadline = time.monotonic() + 5
        found: list[kmsg.Record] = []
        while not found and time.monotonic() < deadline:
            found = [r for r in reader.read() if marker in r.message]
        (record,) = found
        assert record.seq > 0 and record.priority == 6
        assert all(marker not in r.message for r in reader.read())  # read once
    finally:
        reader.close()


def test_journal_reader_follows_a_process_writing_journal_json() -> None:
    """A stand-in for ``journalctl -k -f -o json`` that writes two entries, one split
    across writes, then waits (as journalctl does)."""
    entries = [
        json.dumps({**JOURNAL_ENTRY, "__SEQNUM": "100"}),
        json.dumps({**JOURNAL_ENTRY, "__SEQNUM": "101", "MESSAGE": "usb 2-3: USB disconnect"}),
    ]
    script = (
        "import sys, time\n"
        f"a, b = {entries!r}\n"
        "sys.stdout.write(a + '\\n' + b[:40]); sys.stdout.flush(); time.sleep(0.3)\n"
        "sys.stdout.write(b[40:] + '\\n'); sys.stdout.flush(); time.sleep(30)\n"
    )
    reader = kmsg.JournalReader((sys.executable, "-c", script))
    try:
        records: list[kmsg.Record] = []
        deadline = time.monotonic() + 10
        while len(records) < 2 and time.monotonic() < deadline:
            records += reader.read()
            time.sleep(0.05)
        assert [r.seq for r in records] == [100, 101]
        assert kmsg.xids(records, at=1.0)[0].xid == 74
    finally:
        reader.close()


def test_journal_reader_says_when_journalctl_exits() -> None:
    reader = kmsg.JournalReader((sys.executable, "-c", "import sys; sys.exit(3)"))
    try:
        deadline = time.monotonic() + 10
        with pytest.raises(kmsg.KernelLogGone, match="status 3"):
            while time.monotonic() < deadline:
                reader.read()
                time.sleep(0.05)
    finally:
        reader.close()


def test_kernel_log_poller_names_why_it_cannot_read() -> None:
    poller = KernelLogPoller("kmsg", kmsg_path="/nonexistent/kmsg")
    (note,) = poller.poll(1.0)
    assert isinstance(note, Backend) and note.name == "kmsg"
    assert "cannot read /nonexistent/kmsg" in note.reason
    assert poller.poll(2.0) == []  # said once


def test_baton_agent_once_json_on_this_machine() -> None:
    """The command as an operator runs it on a node (a process: it configures logging)."""
    command = [sys.executable, "-m", "baton.services.cli", "agent", "--once", "--json"]
    done = subprocess.run(
        [*command, "--node", "test-node-1"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    kinds = {m["subject"]: m["event"] for m in result["telemetry"]}
    beat = kinds["baton.c1.telemetry.heartbeat.test-node-1"]
    assert beat["seq"] == 1 and "host" in beat["backends"]
    assert "pods" in beat["unavailable"]
    node = kinds["baton.c1.telemetry.node.test-node-1"]
    assert node["disks"][0]["mount"] == "/"
    readings = {r["reading"] for r in result["readings"]}
    assert {"host", "gpus", "backend"} <= readings
    if "nvml" in beat.get("unavailable", {}):  # no GPU on this machine
        assert "libnvidia-ml.so.1" in beat["unavailable"]["nvml"]
        assert "gpus_found" not in node
