"""Where a PCI device sits, read from sysfs as Kubernetes' DRA helpers read it: its PCIe
root complex (``resource.kubernetes.io/pcieRoot``, ``pci<domain>:<bus>``: the first
component of the device's path under ``/sys/devices``) and its NUMA node
(``numa_node``; -1 there means the platform does not say, reported as None).

A DRA driver publishes the same two attributes from the same files, so the agent's
report and the node's ResourceSlices name the same topology (docs/agent.md).
"""

from __future__ import annotations

import os
import re
from typing import Final

from baton.services.agent.core.kmsg import bus_id

SYS_PCI: Final = "/sys/bus/pci/devices"
_ROOT = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
_FUNCTION = re.compile(r"\.([0-7])$")


def root_of(path: str) -> str:
    """The root complex in a resolved sysfs path: ``/sys/devices/pci0000:00/0000:00:01.0/
    0000:3b:00.0`` -> ``pci0000:00``; '' for a device under none (virtual, or not PCI)."""
    return next((part for part in path.split("/") if _ROOT.match(part)), "")


def sysfs_address(bus: str) -> str:
    """NVML's ``00000000:3B:00.0`` as sysfs names it, ``0000:3b:00.0``; '' if malformed:
    the address as Xid lines write it (``kmsg.bus_id``) and the PCI function."""
    short = bus_id(bus)
    function = _FUNCTION.search(bus.strip())
    return f"{short}.{function.group(1) if function else '0'}" if short else ""


def locate(device_dir: str) -> tuple[str, int | None]:
    """(PCIe root, NUMA node) of the device whose sysfs directory (or link to it) is
    ``device_dir``; ('', None) for what cannot be read."""
    root = root_of(os.path.realpath(device_dir))
    try:
        with open(os.path.join(device_dir, "numa_node")) as f:
            numa = int(f.read().strip())
    except (OSError, ValueError):
        return root, None
    return root, numa if numa >= 0 else None


def locate_bus(bus_id: str, *, sys_pci: str = SYS_PCI) -> tuple[str, int | None]:
    """``locate`` for a device named by NVML's PCI bus id."""
    address = sysfs_address(bus_id)
    return locate(os.path.join(sys_pci, address)) if address else ("", None)
