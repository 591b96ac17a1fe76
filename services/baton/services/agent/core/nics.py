"""NICs: whether each network interface's link is up, from ``/sys/class/net``.

``operstate`` (RFC 2863: up, down, lowerlayerdown, dormant, unknown, ...) says up; an
interface whose driver reports ``unknown`` counts as up when ``carrier`` is 1.
Without a list of names, the physical NICs are watched: those with a ``device`` link
(veth, bridges, tunnels and ``lo`` have none). The agent runs with the host network
(``hostNetwork: true``), so it sees the node's interfaces.

Each NIC also says whether an RDMA device sits on it (``device/infiniband`` exists:
InfiniBand, or RoCE on Ethernet) and its PCIe root (``pci.locate``), the attributes an
RDMA NIC's DRA driver publishes for pairing it with the GPU under the same root.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from typing import Final

from baton.proto.telemetry import Nic
from baton.services.agent.core import pci

NAME: Final = "nics"


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:  # carrier of a down interface: EINVAL
        return ""


def link_up(operstate: str, carrier: str) -> bool:
    return operstate == "up" or (operstate == "unknown" and carrier == "1")


def read_nics(*, sys_net: str = "/sys/class/net", names: Sequence[str] = ()) -> tuple[Nic, ...]:
    """The watched interfaces, sorted by name. ``names`` may hold globs (``ib*``)."""
    try:
        present = sorted(os.listdir(sys_net))
    except OSError:
        return ()
    if names:
        watched = [n for n in present if any(fnmatch.fnmatchcase(n, p) for p in names)]
    else:
        watched = [n for n in present if os.path.exists(os.path.join(sys_net, n, "device"))]
    return tuple(_nic(sys_net, name) for name in watched)


def _nic(sys_net: str, name: str) -> Nic:
    here = os.path.join(sys_net, name)
    up = link_up(_read(os.path.join(here, "operstate")), _read(os.path.join(here, "carrier")))
    device = os.path.join(here, "device")
    root = pci.locate(device)[0] if os.path.exists(device) else ""
    rdma = os.path.isdir(os.path.join(device, "infiniband"))
    return Nic(name=name, up=up, rdma=rdma, pcie_root=root)
