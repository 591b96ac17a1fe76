"""Disks: how full each watched mount is (``statvfs``) and whether it is read-only.

Read-only comes from the mount table (``ro`` among the options of the mount that holds
the path, as in ``/proc/mounts``) or from ``statvfs``'s ``ST_RDONLY`` flag. In a
container the host's root is mounted at ``root`` (``/host``) and the host's mount
table is read from ``/host/proc/1/mounts``, so the flags are the host's own, not those
of the agent's (read-only) view of it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Final

import msgspec

from baton.proto.telemetry import Disk

NAME: Final = "disks"
_OCTAL = re.compile(r"\\([0-7]{3})")


class Mount(msgspec.Struct, frozen=True, kw_only=True):
    device: str
    point: str
    fstype: str
    options: tuple[str, ...]


def parse_mounts(text: str) -> list[Mount]:
    """``/proc/mounts`` (fstab format; spaces in paths are ``\\040``)."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4:
            device, point, fstype, options = (_unescape(f) for f in fields[:4])
            mounts.append(
                Mount(device=device, point=point, fstype=fstype, options=tuple(options.split(",")))
            )
    return mounts


def _unescape(text: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m[1], 8)), text)


def mount_of(path: str, mounts: Sequence[Mount]) -> Mount | None:
    """The mount that holds ``path``: the longest mount point above it, the last one
    mounted when several share the point (it hides the others)."""
    best: Mount | None = None
    for mount in mounts:
        point = mount.point.rstrip("/") or "/"
        inside = path == point or path.startswith(point if point == "/" else point + "/")
        if inside and (best is None or len(point) >= len(best.point.rstrip("/") or "/")):
            best = mount
    return best


def used_ratio(stat: os.statvfs_result) -> float:
    """Like df's Use%: used / (used + available to unprivileged users)."""
    used = stat.f_blocks - stat.f_bfree
    total = used + stat.f_bavail
    return round(used / total, 4) if total > 0 else 0.0


def read_disks(
    paths: Sequence[str], *, root: str = "", mounts_file: str = "/proc/mounts"
) -> tuple[Disk, ...]:
    """One ``Disk`` per path (as the node names it), read under ``root``."""
    try:
        with open(mounts_file) as f:
            mounts = parse_mounts(f.read())
    except OSError:
        mounts = []
    disks = []
    for path in paths:
        try:
            stat = os.statvfs(root.rstrip("/") + path if root else path)
        except OSError as exc:
            disks.append(Disk(mount=path, error=exc.strerror or str(exc)))
            continue
        mount = mount_of(path, mounts)
        read_only = bool(stat.f_flag & os.ST_RDONLY) or (
            mount is not None and "ro" in mount.options
        )
        disks.append(Disk(mount=path, used_ratio=used_ratio(stat), read_only=read_only))
    return tuple(disks)
