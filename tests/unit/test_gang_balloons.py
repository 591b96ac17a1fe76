"""Gang placement counts balloons as free capacity and evicts them in the step that binds."""

from __future__ import annotations

import pytest

from tests.support.builders import balloon, gang, node, pod
from tests.unit.gang_helpers import binds, make, tick, verdicts

pytestmark = pytest.mark.unit


def test_a_gang_takes_balloon_nodes_and_evicts_those_balloons_in_its_bind() -> None:
    nodes = [node(f"n{i}").build() for i in range(3)]
    held = [balloon(f"hold-{i}", node_name=f"n{i}") for i in range(2)]
    busy = pod("other", gpus=8, node_name="n2", phase="Running", scheduler="default-scheduler")
    group, members = gang("job", 2)
    state = make(nodes, *held, busy, group, members)
    (bind,) = binds(tick(state))
    assert sorted(b.node for b in bind.bindings) == ["n0", "n1"]
    assert sorted((b.pod, b.node) for b in bind.evict) == [("hold-0", "n0"), ("hold-1", "n1")]


def test_nodes_without_balloons_evict_nothing_and_real_work_is_never_free() -> None:
    nodes = [node(f"n{i}").build() for i in range(2)]
    busy = pod("other", gpus=8, node_name="n1", phase="Running", scheduler="default-scheduler")
    group, members = gang("job", 2)
    state = make(nodes, busy, group, members)
    out = tick(state)
    assert not binds(out)
    (verdict,) = verdicts(out)
    assert verdict.need.nodes == 1
    small, one = gang("one", 1)
    state = make(nodes, busy, small, one)
    (bind,) = binds(tick(state))
    assert bind.evict == () and bind.bindings[0].node == "n0"
