"""The kernel log: parse records and NVIDIA Xid lines; read new records without blocking.

Three record formats, one parser for the message:

* ``/dev/kmsg``: ``<priority>,<seq>,<usec since boot>,<flags>[,...];<message>``, then
  continuation lines starting with a space (``SUBSYSTEM=pci``, ignored); characters
  outside printable ASCII come escaped as ``\\xNN``. One ``read`` returns one record.
* ``journalctl -k -o json``: one JSON object per line, ``MESSAGE`` (a string, or a list
  of bytes when not UTF-8) and ``__SEQNUM`` (systemd 254+) or the ``i=`` (hex) of
  ``__CURSOR`` as the sequence.
* anything that contains the message (``[ 812.1] NVRM: ...``, ``kernel: NVRM: ...``),
  for the simulated kernel log.

Xid lines, as the NVIDIA driver has written them over the years::

    NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:af:00): 13, pid=1234, name=python, Graphics Exception: ...
    NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, ...
    NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.
    NVRM: Xid (0000:03:00): 14, Channel 00000001
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from typing import Any

import msgspec

from baton.services.agent.core.readings import XidSeen

JOURNALCTL = ("journalctl", "-k", "-f", "-o", "json", "-n", "0", "--no-pager")

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9a-fA-F]{1,8}:[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2})"
    r"(?:\.[0-7])?\): (?P<xid>\d+)(?:,\s*(?P<rest>.*))?$"
)
_PID = re.compile(r"pid=(?P<pid>'?<unknown>'?|\d+)(?:,\s*|$)")
_NAME = re.compile(r"name=(?P<name>'?<unknown>'?|[^,]*)(?:,\s*|$)")
_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")
_CURSOR_SEQ = re.compile(r"(?:^|;)i=([0-9a-fA-F]+)(?:;|$)")
_HEX = "[0-9a-fA-F]"
_BUS = re.compile(rf"^(?:PCI:)?({_HEX}{{1,8}}):({_HEX}{{1,2}}):({_HEX}{{1,2}})(?:\.[0-7])?$")


class Record(msgspec.Struct, frozen=True, kw_only=True):
    """One kernel log record."""

    seq: int
    message: str
    priority: int = 6
    monotonic_us: int = 0


class Xid(msgspec.Struct, frozen=True, kw_only=True):
    bus_id: str
    xid: int
    pid: int | None = None
    process: str = ""
    text: str = ""


def bus_id(text: str) -> str:
    """A PCI address as Xid lines write it: ``0000:3b:00`` (domain:bus:device, lowercase).

    Accepts NVML's ``00000000:3B:00.0`` and the kernel's ``PCI:0000:3b:00``; '' otherwise.
    """
    match = _BUS.match(text.strip())
    if match is None:
        return ""
    domain, bus, device = (int(part, 16) for part in match.groups())
    return f"{domain:04x}:{bus:02x}:{device:02x}"


def parse_xid(message: str) -> Xid | None:
    """The Xid in a kernel message, or None when it is not an ``NVRM: Xid`` line."""
    match = _XID.search(message.rstrip())
    if match is None:
        return None
    rest = match["rest"] or ""
    pid: int | None = None
    process = ""
    if found := _PID.match(rest):
        pid = int(found["pid"]) if found["pid"].isdigit() else None
        rest = rest[found.end() :]
    if found := _NAME.match(rest):
        process = "" if "<unknown>" in found["name"] else found["name"].strip()
        rest = rest[found.end() :]
    return Xid(
        bus_id=bus_id(match["bus"]),
        xid=int(match["xid"]),
        pid=pid,
        process=process,
        text=rest.strip().rstrip(","),
    )


def parse_kmsg(raw: bytes | str) -> Record | None:
    """One ``/dev/kmsg`` record; None when the header is not ``pri,seq,usec,flags;``."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    head, sep, rest = text.partition(";")
    fields = head.split(",")
    if not sep or len(fields) < 4 or not all(f.isdigit() for f in fields[:3]):
        return None
    message = rest.split("\n", 1)[0]  # continuation lines (" KEY=value") follow
    return Record(
        seq=int(fields[1]),
        message=_unescape(message),
        priority=int(fields[0]) & 7,
        monotonic_us=int(fields[2]),
    )


def parse_journal(line: bytes | str) -> Record | None:
    """One line of ``journalctl -o json``; None when it is not a journal entry."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or "MESSAGE" not in entry:
        return None
    seq = _journal_seq(entry)
    if seq is None:
        return None
    message = entry["MESSAGE"]
    if isinstance(message, list):  # not UTF-8: journald gives the bytes
        message = bytes(b & 0xFF for b in message if isinstance(b, int)).decode("utf-8", "replace")
    return Record(
        seq=seq,
        message=str(message),
        priority=int(entry.get("PRIORITY", 6)),
        monotonic_us=int(entry.get("_SOURCE_MONOTONIC_TIMESTAMP", 0) or 0),
    )


def _journal_seq(entry: dict[str, Any]) -> int | None:
    if str(entry.get("__SEQNUM", "")).isdigit():
        return int(entry["__SEQNUM"])
    found = _CURSOR_SEQ.search(str(entry.get("__CURSOR", "")))
    return int(found[1], 16) if found else None


def _unescape(text: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m[1], 16)), text)


def xids(records: Iterable[Record], *, at: float) -> list[XidSeen]:
    """The Xid readings among ``records`` (source ``kmsg``; ``seq`` the record's)."""
    found = [(record.seq, parse_xid(record.message)) for record in records]
    return [
        XidSeen(
            at=at,
            source="kmsg",
            seq=seq,
            xid=xid.xid,
            bus_id=xid.bus_id,
            text=xid.text,
            pid=xid.pid,
            process=xid.process,
        )
        for seq, xid in found
        if xid is not None
    ]


class KmsgReader:
    """``/dev/kmsg`` from now on, non-blocking: ``read()`` returns what was logged since."""

    name = "kmsg"

    def __init__(self, path: str = "/dev/kmsg") -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        os.lseek(self._fd, 0, os.SEEK_END)  # skip what was logged before we started

    def read(self, limit: int = 10_000) -> list[Record]:
        records: list[Record] = []
        while len(records) < limit:
            try:
                raw = os.read(self._fd, 16384)  # a record never exceeds this
            except BlockingIOError:
                break
            except BrokenPipeError:
                continue  # records were overwritten before we read them; go on with the next
            if not raw:
                break
            record = parse_kmsg(raw)
            if record is not None:
                records.append(record)
        return records

    def close(self) -> None:
        os.close(self._fd)


class JournalReader:
    """``journalctl -k -f -o json -n 0`` (from now on), read without blocking."""

    name = "journal"

    def __init__(self, command: tuple[str, ...] = JOURNALCTL) -> None:
        self._proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert self._proc.stdout is not None
        self._out = self._proc.stdout
        os.set_blocking(self._out.fileno(), False)
        self._partial = b""

    def read(self, limit: int = 4 << 20) -> list[Record]:
        """Records written since the last read (up to ``limit`` bytes); raises
        KernelLogGone once journalctl has exited."""
        chunks, size = [self._partial], len(self._partial)
        while size < limit:
            try:
                chunk = os.read(self._out.fileno(), 65536)
            except BlockingIOError:
                break
            if not chunk:
                if len(chunks) == 1 and self._proc.poll() is not None:
                    raise KernelLogGone(f"journalctl exited with status {self._proc.returncode}")
                break
            chunks.append(chunk)
            size += len(chunk)
        *lines, self._partial = b"".join(chunks).split(b"\n")
        return [r for r in map(parse_journal, lines) if r is not None]

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=5)
        self._out.close()


class KernelLogGone(RuntimeError):
    """The kernel log source stopped (journalctl exited); open it again."""


KernelLog = KmsgReader | JournalReader


def open_kernel_log(
    mode: str = "auto", *, kmsg: str = "/dev/kmsg", journal: tuple[str, ...] = JOURNALCTL
) -> KernelLog:
    """``/dev/kmsg`` when readable (``auto``, ``kmsg``), else ``journalctl`` (``auto``,
    ``journal``). Raises OSError saying why neither could be opened."""
    reasons = []
    if mode in ("auto", "kmsg"):
        try:
            return KmsgReader(kmsg)
        except OSError as exc:
            reasons.append(f"cannot read {kmsg}: {exc.strerror or exc}")
    if mode in ("auto", "journal"):
        if shutil.which(journal[0]) is None:
            reasons.append(f"no {journal[0]} on PATH")
        else:
            return JournalReader(journal)
    raise OSError("; ".join(reasons) or f"kernel log mode {mode!r}")
