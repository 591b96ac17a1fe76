"""The shaper's pure plan: what changes turn the kernel's tc state into the wanted limits."""

from __future__ import annotations

import pytest

from baton.proto.bandwidth import NodeLimits, PodLimit
from baton.services.agent import counting
from baton.services.agent.core.tc import (
    INTERNAL,
    INTERNAL_BIT,
    OTHER,
    ROOT,
    SHARED_PRIO,
    AddFilters,
    AddHook,
    AddLeaf,
    AddRoot,
    CreateIfb,
    DeleteClass,
    DeleteFilters,
    Kernel,
    Layout,
    Rule,
    SetClass,
    desired,
    plan,
)

pytestmark = pytest.mark.unit

M = 1_000_000
LAYOUT = Layout(hooks=("cni0",), line_bps=8_000 * M)
LINE = 1_000 * M  # bytes per second
CIDRS = ("10.0.0.0/8", "fd00::/8")


def limit(name: str, ip: str, bps: int, *, ceil: int = 0) -> PodLimit:
    return PodLimit(
        namespace="ns", pod=name, uid=f"u-{name}", team="t", tier="normal", ips=(ip,),
        egress_bps=bps, ceil_bps=ceil or bps,
    )  # fmt: skip


def limits(*pods: PodLimit) -> NodeLimits:
    return NodeLimits(node="n1", at=0.0, generation=1, id="n1:1", limits=pods, internal_cidrs=CIDRS)


def applied(wanted: NodeLimits, layout: Layout = LAYOUT) -> Kernel:
    """The kernel as it is after the plan for ``wanted`` ran on an empty one."""
    slots = plan(Kernel(), wanted, layout).slots
    classes, filters = desired(wanted, slots, layout)
    leaves = frozenset(slots.values()) if layout.leaf else frozenset()
    hooks = dict.fromkeys(layout.hooks, "ours")
    return Kernel(
        ifb="ours", root="ours", classes=classes, filters=filters, leaves=leaves, hooks=hooks
    )  # type: ignore[arg-type]


def test_an_empty_kernel_gets_device_root_classes_filters_and_hook_in_order() -> None:
    done = plan(Kernel(), limits(limit("a", "10.1.0.2", 75 * M)), LAYOUT)
    assert done.changes == (
        CreateIfb(name="baton-egress"),
        AddRoot(),
        SetClass(minor=ROOT, rate=LINE, ceil=LINE, new=True),
        SetClass(minor=INTERNAL, rate=LINE, ceil=LINE, new=True),
        SetClass(minor=OTHER, rate=LINE, ceil=LINE, new=True),
        SetClass(minor=0x10, rate=75 * M // 8, ceil=75 * M // 8, new=True),
        SetClass(minor=0x10 | INTERNAL_BIT, rate=LINE, ceil=LINE, new=True),
        AddFilters(prio=0x10, rules=(
            Rule(target=0x10 | INTERNAL_BIT, src="10.1.0.2/32", dst="10.0.0.0/8"),
            Rule(target=0x10, src="10.1.0.2/32"),
        )),
        AddFilters(prio=SHARED_PRIO, rules=(Rule(target=INTERNAL, dst="10.0.0.0/8"),)),
        AddHook(device="cni0"),
    )  # fmt: skip
    assert done.problems == ()


def test_the_same_limits_again_change_nothing() -> None:
    wanted = limits(limit("a", "10.1.0.2", 75 * M), limit("b", "10.1.0.3", 25 * M))
    assert plan(applied(wanted), wanted, LAYOUT).changes == ()


def test_a_new_rate_changes_the_class_in_place() -> None:
    before = limits(limit("a", "10.1.0.2", 75 * M), limit("b", "10.1.0.3", 25 * M))
    after = limits(limit("a", "10.1.0.2", 50 * M), limit("b", "10.1.0.3", 50 * M, ceil=60 * M))
    assert plan(applied(before), after, LAYOUT).changes == (
        SetClass(minor=0x10, rate=50 * M // 8, ceil=50 * M // 8, new=False),
        SetClass(minor=0x11, rate=50 * M // 8, ceil=60 * M // 8, new=False),
    )


def test_a_pod_that_left_loses_its_filters_then_its_classes() -> None:
    before = limits(limit("a", "10.1.0.2", 75 * M), limit("b", "10.1.0.3", 25 * M))
    after = limits(limit("b", "10.1.0.3", 25 * M))
    assert plan(applied(before), after, LAYOUT).changes == (
        DeleteFilters(prio=0x10),
        DeleteClass(minor=0x10 | INTERNAL_BIT),
        DeleteClass(minor=0x10),
    )


def test_pods_keep_their_slots_after_a_restart_and_new_ones_take_free_slots() -> None:
    kernel = applied(limits(limit("a", "10.1.0.2", M), limit("b", "10.1.0.3", M)))
    # the agent restarts and learns about c first: a and b keep slots 0x10 and 0x11
    wanted = limits(limit("c", "10.1.0.4", M), limit("b", "10.1.0.3", M), limit("a", "10.1.0.2", M))
    done = plan(kernel, wanted, LAYOUT)
    assert done.slots == {"u-c": 0x12, "u-b": 0x11, "u-a": 0x10}
    assert {type(c).__name__ for c in done.changes} == {"SetClass", "AddFilters"}


def test_new_internal_cidrs_rebuild_the_filters_only() -> None:
    before = limits(limit("a", "10.1.0.2", M))
    after = NodeLimits(node="n1", at=1.0, generation=2, id="n1:2", limits=before.limits,
                       internal_cidrs=("10.1.0.0/16",))  # fmt: skip
    kinds = [type(c).__name__ for c in plan(applied(before), after, LAYOUT).changes]
    assert kinds == ["DeleteFilters", "DeleteFilters", "AddFilters", "AddFilters"]


def test_what_baton_did_not_create_is_left_alone_and_reported() -> None:
    wanted = limits(limit("a", "10.1.0.2", M))
    foreign = plan(Kernel(ifb="foreign"), wanted, LAYOUT)
    assert foreign.changes == ()
    assert foreign.problems == ("baton-egress: a device Baton did not create",)
    assert plan(Kernel(ifb="ours", root="foreign"), wanted, LAYOUT).changes == ()
    hooked = plan(Kernel(hooks={"cni0": "foreign"}), wanted, LAYOUT)
    assert not any(isinstance(c, AddHook) for c in hooked.changes)
    assert hooked.problems == (
        "cni0: hook not installed (it has an ingress qdisc Baton did not create)",
    )


def test_a_stale_hook_is_replaced_and_ipv6_only_pods_are_reported() -> None:
    wanted = limits(limit("v6", "fd00::5", M))
    done = plan(Kernel(hooks={"cni0": "stale"}), wanted, LAYOUT)
    assert AddHook(device="cni0", replace=True) in done.changes
    assert done.problems == ("ns/v6: no IPv4 address, not shaped",)


def test_leaf_qdiscs_are_added_when_the_layout_asks() -> None:
    layout = Layout(hooks=(), leaf="fq_codel")
    done = plan(Kernel(), limits(limit("a", "10.1.0.2", M), limit("b", "10.1.0.3", M)), layout)
    assert [c for c in done.changes if isinstance(c, AddLeaf)] == [AddLeaf(0x10), AddLeaf(0x11)]


def test_a_zero_limit_becomes_the_smallest_rate_htb_takes() -> None:
    classes, _ = desired(limits(limit("a", "10.1.0.2", 0)), {"u-a": 0x10}, LAYOUT)
    assert classes[0x10] == (1000, 1000)


def test_counters_become_rates_over_the_interval() -> None:
    wanted = limits(limit("a", "10.1.0.2", 80 * M), limit("b", "10.1.0.3", 20 * M))
    a, b = frozenset({"10.1.0.2"}), frozenset({"10.1.0.3"})
    first = counting.Sample(
        at=10.0, pods={a: counting.Counters(1000, 500), b: counting.Counters(7)}
    )
    second = counting.Sample(
        at=12.0, pods={a: counting.Counters(2_001_000, 500_500, 3), b: counting.Counters(5)}
    )
    out = counting.egress(wanted, previous=first, current=second, at=1e9)
    assert [(p.pod, p.internet_bps, p.internal_bps, p.limit_bps, p.dropped) for p in out.pods] == [
        ("a", 8_000_000, 2_000_000, 80 * M, 3),
        ("b", 0, 0, 20 * M, 0),  # its counter went down: the class was recreated
    ]
    assert (out.node, out.interval_s, out.generation) == ("n1", 2.0, 1)
    assert counting.egress(wanted, previous=None, current=second, at=1e9).pods[0].internet_bps == 0
