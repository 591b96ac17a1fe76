"""The real node's backends, each a small poller: ``poll(at) -> readings``.

| backend | reads | readings |
|---|---|---|
| ``nvml`` (``nvml.Nvml``) | GPU count, per-GPU health, processes | ``Gpus``; ``XidSeen`` |
| ``kmsg`` | ``/dev/kmsg``, else ``journalctl -k`` | ``XidSeen`` (source ``kmsg``) |
| ``disks``, ``nics`` | ``statvfs`` + mount table; ``/sys/class/net`` | ``Host`` |
| ``pods`` (``pods.PodResources``) | kubelet pod-resources (not built: unavailable) | ``Pods`` |

A backend that cannot run says so with a ``Backend`` reading (name and reason) when
that changes; the heartbeat carries it. Polls are blocking and short; the shell runs
them in a worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import structlog

from baton.services.agent.core import disks, kmsg, nics
from baton.services.agent.core.readings import AnyReading, Backend, Host

log = structlog.get_logger("baton.agent")


class Poller(Protocol):
    name: str

    def poll(self, at: float) -> list[AnyReading]: ...


class HostPoller:
    """Disks and NICs, one ``Host`` reading per poll."""

    name = "host"

    def __init__(
        self,
        *,
        mounts: Sequence[str],
        root: str = "",
        mounts_file: str = "/proc/mounts",
        sys_net: str = "/sys/class/net",
        nic_names: Sequence[str] = (),
    ) -> None:
        self.mounts, self.root, self.mounts_file = tuple(mounts), root, mounts_file
        self.sys_net, self.nic_names = sys_net, tuple(nic_names)

    def poll(self, at: float) -> list[AnyReading]:
        found_disks = disks.read_disks(self.mounts, root=self.root, mounts_file=self.mounts_file)
        found_nics = nics.read_nics(sys_net=self.sys_net, names=self.nic_names)
        return [Host(at=at, disks=found_disks, nics=found_nics)]


class KernelLogPoller:
    """New kernel log records, as Xid readings. Opens the log lazily and again after it
    stops (journalctl exited); says when it is unavailable and why."""

    name = "kmsg"  # whichever reader: the Xid source is the kernel log

    def __init__(self, mode: str = "auto", *, kmsg_path: str = "/dev/kmsg") -> None:
        self.mode, self.kmsg_path = mode, kmsg_path
        self.reason: str | None = None  # None: not tried, '': open
        self._log: kmsg.KernelLog | None = None

    def poll(self, at: float) -> list[AnyReading]:
        notes: list[AnyReading] = []
        if self._log is None:
            notes = self._open(at)
        if self._log is None:
            return notes
        try:
            records = self._log.read()
        except kmsg.KernelLogGone as exc:
            self.close()
            return [*notes, *self._unavailable(at, str(exc))]
        return [*notes, *kmsg.xids(records, at=at)]

    def _open(self, at: float) -> list[AnyReading]:
        try:
            self._log = kmsg.open_kernel_log(self.mode, kmsg=self.kmsg_path)
        except OSError as exc:
            return self._unavailable(at, str(exc))
        self.reason = ""
        log.info("kernel log open", source=self._log.name)
        return [Backend(at=at, name=self.name)]

    def _unavailable(self, at: float, reason: str) -> list[AnyReading]:
        if reason == self.reason:
            return []
        log.warning("kernel log unavailable", reason=reason)
        self.reason = reason
        return [Backend(at=at, name=self.name, reason=reason)]

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
