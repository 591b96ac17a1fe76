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

``plan(kernel, limits, layout)`` is pure; ``Shaper`` reads the kernel, plans, and
applies the changes, each one netlink request.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

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


# ---- netlink (thin): reading the kernel and applying changes --------------------------


class ShapingError(RuntimeError):
    """A netlink request failed (a dependency: the kernel); the message names the change."""


class Shaper:
    """Reads and changes the agent's tc objects through ``ipr`` (a pyroute2 ``IPRoute``)."""

    def __init__(self, ipr: Any, layout: Layout) -> None:
        self.ipr, self.layout = ipr, layout

    def apply(self, limits: NodeLimits) -> Plan:
        """Reconcile the kernel with ``limits``: read, plan, apply. Safe to repeat."""
        done = plan(self.read(), limits, self.layout)
        for change in done.changes:
            try:
                self._do(change)
            except Exception as exc:  # pyroute2 raises NetlinkError and others
                raise ShapingError(f"{change}: {exc}") from exc
        return done

    def read(self) -> Kernel:
        ifb = self.index(self.layout.ifb)
        hooks = {d: self._hook_state(d, ifb) for d in self.layout.hooks}
        if ifb is None:
            return Kernel(hooks=hooks)
        link = self.ipr.get_links(ifb)[0]
        if link.get_nested("IFLA_LINKINFO", "IFLA_INFO_KIND") != "ifb":
            return Kernel(ifb="foreign", hooks=hooks)
        qdiscs = self.ipr.get_qdiscs(index=ifb)
        roots = [q for q in qdiscs if q["parent"] == 0xFFFFFFFF and q.get_attr("TCA_KIND")]
        mine = [q for q in roots if q["handle"] == handle(0) and q.get_attr("TCA_KIND") == "htb"]
        if not mine:
            foreign = any(q.get_attr("TCA_KIND") not in ("noqueue", "pfifo_fast") for q in roots)
            return Kernel(ifb="ours", root="foreign" if foreign else "absent", hooks=hooks)
        return Kernel(
            ifb="ours",
            root="ours",
            classes=self._classes(ifb),
            leaves=frozenset(
                q["parent"] & 0xFFFF
                for q in qdiscs
                if q["parent"] >> 16 == MAJOR and q.get_attr("TCA_KIND") == self.layout.leaf
            ),
            filters=self.filters(ifb),
            hooks=hooks,
        )

    def teardown(self) -> None:
        """Remove what the agent created: hook filters (their qdisc if then empty), the IFB."""
        ifb = self.index(self.layout.ifb)
        for device in self.layout.hooks:
            index = self.index(device)
            if index is None or self._hook_state(device, ifb) not in ("ours", "stale"):
                continue
            self._del_filters(index, parent=INGRESS, prio=HOOK_PRIO)
            if not [f for f in self.ipr.get_filters(index=index, parent=INGRESS) if f["info"]]:
                self.ipr.tc("del", "ingress", index, INGRESS)
        if ifb is not None and self.read().ifb == "ours":
            self.ipr.link("del", index=ifb)

    def index(self, name: str) -> int | None:
        found = self.ipr.link_lookup(ifname=name)
        return int(found[0]) if found else None

    def _classes(self, ifb: int) -> dict[int, tuple[int, int]]:
        out = {}
        for c in self.ipr.get_classes(index=ifb):
            if c["handle"] >> 16 != MAJOR or c.get_attr("TCA_KIND") != "htb":
                continue
            opts = c.get_attr("TCA_OPTIONS")
            parms = opts.get_attr("TCA_HTB_PARMS")
            rate = opts.get_attr("TCA_HTB_RATE64") or parms["rate"]
            ceil = opts.get_attr("TCA_HTB_CEIL64") or parms["ceil"]
            out[c["handle"] & 0xFFFF] = (int(rate), int(ceil))
        return out

    def filters(self, ifb: int) -> dict[int, tuple[Rule, ...]]:
        out: dict[int, list[Rule]] = {}
        for f in self.ipr.get_filters(index=ifb, parent=handle(0)):
            rule = _rule(f)
            if rule is not None:
                out.setdefault(f["info"] >> 16, []).append(rule)
        return {prio: tuple(rules) for prio, rules in out.items()}

    def _hook_state(self, device: str, ifb: int | None) -> HookState:
        index = self.index(device)
        if index is None:
            return "missing"
        if not any(q["handle"] == INGRESS for q in self.ipr.get_qdiscs(index=index)):
            return "absent"
        ours = [f for f in self.ipr.get_filters(index=index, parent=INGRESS)
                if f["info"] >> 16 == HOOK_PRIO]  # fmt: skip
        if not ours:
            return "foreign"
        return "ours" if ifb is not None and ifb in {_mirred_to(f) for f in ours} else "stale"

    def _do(self, change: Change) -> None:
        ipr, ifb = self.ipr, self.index(self.layout.ifb)
        match change:
            case CreateIfb(name=name):
                ipr.link("add", ifname=name, kind="ifb")
                ipr.link("set", index=self.index(name), state="up", txqlen=QUEUE)
            case AddRoot():
                ipr.tc("add", "htb", ifb, handle(0), default=OTHER)
            case SetClass(minor=minor, rate=rate, ceil=ceil, new=new):
                parent = handle(0) if minor == ROOT else handle(ROOT)
                command = "add-class" if new else "change-class"
                ipr.tc(
                    command, "htb", ifb, handle(minor), parent=parent, rate=rate, ceil=ceil,
                    burst=_burst(rate), cburst=_burst(ceil),
                )  # fmt: skip
            case DeleteClass(minor=minor):
                ipr.tc("del-class", index=ifb, handle=handle(minor), parent=handle(ROOT))
            case AddLeaf(minor=minor):
                ipr.tc("add", self.layout.leaf, ifb, minor << 16, parent=handle(minor))
            case DeleteFilters(prio=prio):
                self._del_filters(ifb, parent=handle(0), prio=prio)
            case AddFilters(prio=prio, rules=rules):
                for rule in rules:
                    ipr.tc(
                        "add-filter", "u32", ifb, parent=handle(0), prio=prio,
                        protocol=ETH_P_IP, target=handle(rule.target), keys=_keys(rule),
                    )  # fmt: skip
            case AddHook(device=device, replace=replace):
                self._hook(device, ifb, replace=replace)

    def _del_filters(self, index: int | None, *, parent: int, prio: int) -> None:
        """Every u32 filter at ``prio`` (pyroute2 wants a target even to delete)."""
        self.ipr.tc(
            "del-filter", "u32", index, parent=parent, prio=prio, protocol=ETH_P_IP, target=0
        )

    def _hook(self, device: str, ifb: int | None, *, replace: bool) -> None:
        index = self.index(device)
        if replace:
            self._del_filters(index, parent=INGRESS, prio=HOOK_PRIO)
        else:
            self.ipr.tc("add", "ingress", index, INGRESS)
        redirect = {"kind": "mirred", "direction": "egress", "action": "redirect", "ifindex": ifb}
        self.ipr.tc(
            "add-filter", "u32", index, parent=INGRESS, prio=HOOK_PRIO, protocol=ETH_P_IP,
            target=0x1, keys=["0x0/0x0+0"], action=redirect,
        )  # fmt: skip


def _burst(rate: int) -> int:
    """Bytes a class may send at once: 5 ms at its rate, at least two full frames. pyroute2's
    default (about one MTU) starves a class whenever the HTB timer fires late (busy CPUs)."""
    return max(rate // 200, 2 * 1514)


def _keys(rule: Rule) -> list[str]:
    keys = []
    for net, offset in ((rule.src, 12), (rule.dst, 16)):
        if net:
            n = ipaddress.IPv4Network(net)
            keys.append(f"0x{int(n.network_address):08x}/0x{int(n.netmask):08x}+{offset}")
    return keys


def _rule(f: Any) -> Rule | None:
    """A u32 filter message -> Rule (None for hash-table entries). The selector's keys are
    read from the raw attribute: pyroute2 0.9 decodes ``tc_u32_key`` 4 bytes off."""
    opts = f.get_attr("TCA_OPTIONS")
    if opts is None:
        return None
    target = opts.get_attr("TCA_U32_CLASSID")
    sel = next((a for a in opts["attrs"] if a[0] == "TCA_U32_SEL"), None)
    if target is None or sel is None:
        return None
    cell = sel.nla
    raw = bytes(cell.data[cell.offset + 4 : cell.offset + cell.length])
    src = dst = ""
    for i in range(raw[2]):  # nkeys; keys follow the 16-byte selector header
        mask, value = struct.unpack_from("!II", raw, 16 + 16 * i)
        (offset,) = struct.unpack_from("=i", raw, 16 + 16 * i + 8)
        net = str(ipaddress.IPv4Network((value & mask, bin(mask).count("1"))))
        if offset == 12:
            src = net
        elif offset == 16:
            dst = net
    return Rule(target=int(target) & 0xFFFF, src=src, dst=dst)


def _mirred_to(f: Any) -> int | None:
    try:
        action = f.get_attr("TCA_OPTIONS").get_attr("TCA_U32_ACT").get_attr("TCA_ACT_PRIO_1")
        return int(action.get_attr("TCA_ACT_OPTIONS").get_attr("TCA_MIRRED_PARMS")["ifindex"])
    except (AttributeError, KeyError, TypeError):
        return None
