"""Apply a node's ``NodeLimits`` live with tc through netlink (pyroute2): read the agent's
tc objects back as a ``tc.Kernel``, plan with ``tc.plan`` (pure), and apply each change
as one netlink request. The layout (handles, prios, which device holds what) is ``tc``'s.
"""

from __future__ import annotations

import ipaddress
import struct
from typing import Any

from baton.proto.bandwidth import NodeLimits
from baton.services.agent.core.tc import (
    ETH_P_IP,
    HOOK_PRIO,
    INGRESS,
    MAJOR,
    OTHER,
    QUEUE,
    ROOT,
    AddFilters,
    AddHook,
    AddLeaf,
    AddRoot,
    Change,
    CreateIfb,
    DeleteClass,
    DeleteFilters,
    HookState,
    Kernel,
    Layout,
    Plan,
    Rule,
    SetClass,
    handle,
    plan,
)


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
