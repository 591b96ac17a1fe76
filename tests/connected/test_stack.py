"""tests.pipeline.stack, the prelude the e2e tests share: it labels the nodes with their
pools in name order, makes the namespaces, and names a mismatch of pools and nodes."""

from __future__ import annotations

import pytest

from tests.pipeline import stack

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]


async def test_pools_label_the_nodes_in_name_order_and_the_namespaces_are_made() -> None:
    async with stack(nodes=3, services=False, pools=["pa", "pb", "pb"], namespaces=["t"]) as s:
        nodes = (await s.api.list_node()).items
        pools = {n.metadata.name: n.metadata.labels.get("baton.io/pool") for n in nodes}
        assert [pools[name] for name in s.nodes] == ["pa", "pb", "pb"]
        assert s.nodes == sorted(pools)
        assert (await s.api.read_namespace("t")).metadata.name == "t"
        assert s.services is None
        with pytest.raises(AssertionError, match="runs no gang"):
            _ = s.gang


async def test_a_pool_count_other_than_the_node_count_is_named() -> None:
    with pytest.raises(ValueError, match="2 pools for 3 nodes"):
        async with stack(nodes=3, services=False, pools=["pa", "pb"]):
            pass
