"""Topology: narrowest domain first, best fit, required and preferred levels, spans."""

from __future__ import annotations

import pytest

from baton.proto.k8s import Node
from tests.support.builders import BLOCK, RACK, ZONE, gang, node, pod
from tests.unit.gang_helpers import binds, make, placed, tick, verdicts

pytestmark = pytest.mark.unit


def rack(name: str, count: int, *, block: str = "b1", zone: str = "z1") -> list[Node]:
    return [
        node(f"{name}-{i}", gpus=8).in_rack(name, block=block, zone=zone).build()
        for i in range(count)
    ]


# r1 (4 nodes) and r2 (8 nodes) in block b1; r3 (6 nodes) in block b2; all in zone z1.
CLUSTER = rack("r1", 4) + rack("r2", 8) + rack("r3", 6, block="b2")

CASES = [
    # (case, gang size, required, preferred, level, domain, racks spanned)
    ("best fit: the smallest rack that holds it", 4, "", "", RACK, "r1", 1),
    ("the next rack up when the small one is too small", 5, "", "", RACK, "r3", 1),
    ("the biggest rack", 8, "", "", RACK, "r2", 1),
    ("no rack holds it: one block", 10, "", "", BLOCK, "b1", 2),
    ("no block holds it: the zone, fewest racks", 14, "", "", ZONE, "z1", 2),
    ("required block is met by a rack", 4, BLOCK, "", RACK, "r1", 1),
    ("preferred block skips the rack level", 4, "", BLOCK, BLOCK, "b2", 1),
]


@pytest.mark.parametrize(
    ("case", "size", "required", "preferred", "level", "domain", "spanned"),
    CASES,
    ids=[c[0] for c in CASES],
)
def test_domain_choice(
    case: str, size: int, required: str, preferred: str, level: str, domain: str, spanned: int
) -> None:
    group, members = gang("job", size, gpus=8, required=required, preferred=preferred)
    state = make(CLUSTER, group, members)
    (event,) = placed(tick(state))
    assert (event.level, event.domain, event.domains) == (level, domain, spanned)
    assert event.min_domains <= event.domains
    on = {b.node.rsplit("-", 1)[0] for b in event.bindings}
    assert len(on) == spanned


def test_required_level_that_no_domain_can_hold_binds_nothing_and_names_the_need() -> None:
    group, members = gang("job", 10, gpus=8, required=RACK)
    state = make(CLUSTER, group, members)
    out = tick(state)
    assert binds(out) == []
    (v,) = verdicts(out)
    assert v.need.within == RACK
    assert v.need.nodes == 2  # the biggest rack holds 8 of 10
    assert v.fits_when_free is False
    assert v.need.shape == {"nvidia.com/gpu": 8}


def test_spanning_zones_when_allowed_uses_the_fewest_racks() -> None:
    nodes = (
        rack("a1", 8, block="ba", zone="za")
        + rack("a2", 2, block="ba", zone="za")
        + rack("b1", 8, block="bb", zone="zb")
    )
    group, members = gang("job", 16, gpus=8)
    state = make(nodes, group, members)
    (event,) = placed(tick(state))
    assert event.level == ""
    assert event.domains == 2 == event.min_domains


def test_small_gangs_leave_big_free_domains_whole() -> None:
    """A 2-node gang lands in the partly used rack, so a later 8-node gang still fits in r2."""
    busy = [
        pod(f"busy-{i}", gpus=8, node_name=f"r3-{i}", scheduler="default-scheduler")
        for i in range(4)
    ]
    small_group, small = gang("small", 2, gpus=8, created_at=1)
    big_group, big = gang("big", 8, gpus=8, created_at=2)
    state = make(CLUSTER, busy, small_group, small, big_group, big)
    events = {e.gang: e for e in placed(tick(state))}
    assert events["default/small"].domain == "r3"
    assert events["default/big"].domain == "r2"


def test_members_of_two_shapes_are_packed_together() -> None:
    """A launcher (1 GPU) and 4 workers (8 GPUs) must not be given the same GPUs twice."""
    nodes = [*rack("r1", 4), node("r1-4", gpus=1).in_rack("r1", block="b1", zone="z1").build()]
    group, workers = gang("job", 5, gpus=8)
    launcher = pod("job-launcher", group="job", gpus=1)
    state = make(nodes, group, workers[:4], [launcher])
    (bind,) = binds(tick(state))
    where = {b.pod: b.node for b in bind.bindings}
    assert where["job-launcher"] == "r1-4"
    assert len(set(where.values())) == 5
