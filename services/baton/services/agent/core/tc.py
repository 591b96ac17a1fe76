"""Apply a node's ``NodeLimits`` live with tc (HTB, u32) through netlink (pyroute2).

Layout (see docs/bandwidth.md): pod egress enters the host on the ``hooks`` devices
(the CNI bridge, or each pod's host-side veth); an ``ingress`` qdisc there redirects
every IPv4 packet (filter prio ``HOOK_PRIO``, action mirred) to the agent's own IFB
device, before any NAT, so the source address is still the pod's. On the IFB an HTB
root ``ba70:`` holds:

| class | what | rate / ceil |
|---|---|---|
| ``ba70:1`` | root | line rate |
| ``ba70:2`` | internal traffic of unknown sources | line rate |
| ``ba70:3`` | default: anything unclassified | line rate |
| ``ba70:<s>`` | pod slot ``s`` (0x10-0x3fff) to the internet | the pod's limit |
| ``ba70:<s+0x4000>`` | pod slot ``s`` to internal CIDRs | line rate |

The u32 filters of slot ``s`` live at prio ``s``: (src pod, dst internal CIDR) ->
internal class first, then (src pod) -> the shaped class. The agent finds its own
state again by these handles and prios; it never touches a device, qdisc or filter
it did not create (a hook already holding someone else's ingress qdisc is reported,
not changed).

This module is the pure part: the layout's numbers, what the kernel holds
(``Kernel``), the changes, and ``plan(kernel, limits, layout)``. ``shaping.Shaper``
reads the kernel through netlink, plans, and applies the changes, each one netlink
request.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from baton.proto.bandwidth import NodeLimits

MAJOR = 0xBA70
ROOT, INTERNAL, OTHER = 1, 2, 3
FIRST_SLOT, LAST_SLOT, INTERNAL_BIT = 0x10, 0x3FFF, 0x4000
SHARED_PRIO = 0x7000  # unknown sources to internal CIDRs -> INTERNAL
HOOK_PRIO = 0xBA7  # the redirect filter on each hook's ingress qdisc
INGRESS = 0xFFFF0000
MIN_BPS = 8_000  # HTB needs a positive rate
QUEUE = 1000  # packets a class queues (the IFB's txqueuelen, HTB's default leaf limit)
ETH_P_IP = 0x0800

Presence = Literal["absent", "ours", "foreign"]
HookState = Literal["absent", "ours", "stale", "foreign", "missing"]


def handle(minor: int) -> int:
    return MAJOR << 16 | minor


@dataclass(frozen=True, slots=True)
class Layout:
    ifb: str = "baton-egress"  # the agent's IFB device (created and owned by it)
    hooks: tuple[str, ...] = ()  # devices whose ingress is pod egress (cni0, or host veths)
    line_bps: int = 100_000_000_000  # rate of the unshaped classes
    leaf: str = ""  # leaf qdisc of each shaped class ("fq_codel"); "" keeps HTB's default


@dataclass(frozen=True, slots=True)
class Rule:
    """One u32 filter: IPv4 source address and/or destination network -> class minor."""

    target: int
    src: str = ""  # "10.99.1.2/32"
    dst: str = ""  # "10.0.0.0/8"


@dataclass(frozen=True, slots=True)
class Kernel:
    """What the agent's tc objects look like now (rates in bytes per second, as HTB keeps them)."""

    ifb: Presence = "absent"
    root: Presence = "absent"
    classes: Mapping[int, tuple[int, int]] = field(default_factory=dict)  # minor -> rate, ceil
    leaves: frozenset[int] = frozenset()  # minors with a leaf qdisc of the layout's kind
    filters: Mapping[int, tuple[Rule, ...]] = field(default_factory=dict)  # prio -> rules
    hooks: Mapping[str, HookState] = field(default_factory=dict)


# Changes, applied in the order plan() returns them.
@dataclass(frozen=True, slots=True)
class CreateIfb:
    name: str


@dataclass(frozen=True, slots=True)
class AddRoot:
    pass


@dataclass(frozen=True, slots=True)
class SetClass:
    minor: int
    rate: int  # bytes per second
    ceil: int
    new: bool


@dataclass(frozen=True, slots=True)
class DeleteClass:
    minor: int


@dataclass(frozen=True, slots=True)
class AddLeaf:
    minor: int


@dataclass(frozen=True, slots=True)
class DeleteFilters:
    prio: int


@dataclass(frozen=True, slots=True)
class AddFilters:
    prio: int
    rules: tuple[Rule, ...]


@dataclass(frozen=True, slots=True)
class AddHook:
    device: str
    replace: bool = False  # our filter points at an old IFB: delete it first


Change = (
    CreateIfb | AddRoot | SetClass | DeleteClass | AddLeaf | DeleteFilters | AddFilters | AddHook
)


@dataclass(frozen=True, slots=True)
class Plan:
    changes: tuple[Change, ...]
    problems: tuple[str, ...] = ()  # what was not done, and why
    slots: Mapping[str, int] = field(default_factory=dict)  # pod uid -> slot


def plan(kernel: Kernel, limits: NodeLimits, layout: Layout) -> Plan:
    """The changes that turn ``kernel`` into ``limits``; nothing for what is already right."""
    problems: list[str] = []
    if kernel.ifb == "foreign" or kernel.root == "foreign":
        what = "device" if kernel.ifb == "foreign" else "root qdisc"
        return Plan(changes=(), problems=(f"{layout.ifb}: a {what} Baton did not create",))
    slots, pod_problems = assign(kernel, limits)
    problems += pod_problems
    want_classes, want_filters = desired(limits, slots, layout)
    changes: list[Change] = []
    if kernel.ifb == "absent":
        changes.append(CreateIfb(name=layout.ifb))
    existing = kernel.classes if kernel.root == "ours" else {}
    filters = kernel.filters if kernel.root == "ours" else {}
    if kernel.root != "ours":
        changes.append(AddRoot())
    changes += [DeleteFilters(p) for p in sorted(filters) if filters[p] != want_filters.get(p)]
    changes += [DeleteClass(m) for m in sorted(existing, reverse=True) if m not in want_classes]
    for minor in sorted(want_classes):
        rate, ceil = want_classes[minor]
        if existing.get(minor) != (rate, ceil):
            changes.append(SetClass(minor=minor, rate=rate, ceil=ceil, new=minor not in existing))
    if layout.leaf:
        leaves = kernel.leaves if kernel.root == "ours" else frozenset()
        changes += [AddLeaf(s) for s in sorted(set(slots.values()) - leaves)]
    for prio in sorted(want_filters):
        if filters.get(prio) != want_filters[prio]:
            changes.append(AddFilters(prio=prio, rules=want_filters[prio]))
    for device in layout.hooks:
        state = kernel.hooks.get(device, "absent")
        if state in ("absent", "stale"):
            changes.append(AddHook(device=device, replace=state == "stale"))
        elif state != "ours":
            problems.append(f"{device}: hook not installed ({_HOOK_PROBLEMS[state]})")
    return Plan(changes=tuple(changes), problems=tuple(problems), slots=slots)


_HOOK_PROBLEMS = {
    "foreign": "it has an ingress qdisc Baton did not create",
    "missing": "no such device",
}


def assign(kernel: Kernel, limits: NodeLimits) -> tuple[dict[str, int], list[str]]:
    """Pod uid -> slot: the slot whose filters already match the pod's addresses, else
    the lowest free one. Deterministic (pods in the order ``limits`` lists them)."""
    held = {
        frozenset(r.src for r in rules if r.src): prio
        for prio, rules in (kernel.filters.items() if kernel.root == "ours" else ())
        if FIRST_SLOT <= prio <= LAST_SLOT
    }
    taken = set(held.values())
    slots: dict[str, int] = {}
    problems: list[str] = []
    free = FIRST_SLOT
    for pod in limits.limits:
        sources = frozenset(f"{ip}/32" for ip in pod.ips if _is_v4(ip))
        if not sources:
            problems.append(f"{pod.namespace}/{pod.pod}: no IPv4 address, not shaped")
            continue
        slot = held.pop(sources, None)
        if slot is None:
            while free in taken:
                free += 1
            if free > LAST_SLOT:
                problems.append(f"{pod.namespace}/{pod.pod}: no free slot, not shaped")
                continue
            slot = free
            taken.add(slot)
        slots[pod.uid] = slot
    return slots, problems


def desired(
    limits: NodeLimits, slots: Mapping[str, int], layout: Layout
) -> tuple[dict[int, tuple[int, int]], dict[int, tuple[Rule, ...]]]:
    line = layout.line_bps // 8
    classes = {ROOT: (line, line), INTERNAL: (line, line), OTHER: (line, line)}
    cidrs = [str(n) for n in _v4_networks(limits.internal_cidrs)]
    filters: dict[int, tuple[Rule, ...]] = {}
    if cidrs:
        filters[SHARED_PRIO] = tuple(Rule(target=INTERNAL, dst=c) for c in cidrs)
    for pod in limits.limits:
        slot = slots.get(pod.uid)
        if slot is None:
            continue
        rate = max(pod.egress_bps, MIN_BPS) // 8
        classes[slot] = (rate, max(rate, pod.ceil_bps // 8))
        classes[slot | INTERNAL_BIT] = (line, line)
        sources = sorted(f"{ip}/32" for ip in pod.ips if _is_v4(ip))
        internal = [Rule(target=slot | INTERNAL_BIT, src=s, dst=c) for s in sources for c in cidrs]
        filters[slot] = (*internal, *(Rule(target=slot, src=s) for s in sources))
    return classes, filters


def _is_v4(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).version == 4
    except ValueError:
        return False


def _v4_networks(cidrs: tuple[str, ...]) -> list[ipaddress.IPv4Network]:
    nets = []
    for cidr in cidrs:
        net = ipaddress.ip_network(cidr, strict=False)
        if isinstance(net, ipaddress.IPv4Network) and net.prefixlen > 0:
            nets.append(net)
    return nets
