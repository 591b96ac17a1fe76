"""What the gang service measures of its decisions: wait per team and size class."""

import pytest
from prometheus_client import REGISTRY

from baton.proto import keys
from baton.services.gang import metrics, shell
from tests.support.builders import gang, node
from tests.unit.gang_helpers import make, placed, tick

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("members", "label"),
    [(1, "1"), (2, "2-8"), (8, "2-8"), (9, "9-32"), (128, "33-128"), (1024, "129-1024"),
     (1025, "1025+")],
)  # fmt: skip
def test_size_classes(members: int, label: str) -> None:
    assert metrics.size_class(members) == label


def test_wait_is_from_the_gangs_creation_to_its_placement_by_team_and_size() -> None:
    group, members = gang("job", 4, created_at=100.0, labels={keys.TEAM: "team-a"})
    state = make([node(f"n{i}", gpus=8).build() for i in range(4)], group, members)
    decision = placed(tick(state, at=130.0))[0]
    assert shell.wait(state, decision) == ("team-a", "2-8", 30.0)

    labels = {"team": "team-a", "size": "2-8"}
    before = REGISTRY.get_sample_value("baton_gang_wait_seconds_count", labels) or 0.0
    shell.observe(state, [decision])
    assert REGISTRY.get_sample_value("baton_gang_wait_seconds_count", labels) == before + 1
    assert REGISTRY.get_sample_value("baton_gang_wait_seconds_sum", labels) is not None


def test_a_gang_without_a_team_or_creation_time() -> None:
    group, members = gang("solo", 1, created_at=5.0)
    state = make([node("n0", gpus=8).build()], group, members)
    assert shell.wait(state, placed(tick(state, at=6.0))[0]) == ("none", "1", 1.0)
    group, members = gang("unknown", 1)  # created_at 0: not known, not measured
    state = make([node("n0", gpus=8).build()], group, members)
    assert shell.wait(state, placed(tick(state, at=6.0))[0]) is None


def test_gpus_per_rack_allocated_and_free() -> None:
    nodes = [node(f"n{i}", gpus=8).in_rack(f"r{i // 2}").build() for i in range(4)]
    group, members = gang("job", 3, gpus=8)
    state = make(nodes, group, members)
    tick(state, at=1.0)  # placed: three nodes' GPUs are accounted (assumed) now
    found = shell.rack_gpus(state)
    assert sum(v for (_, s), v in found.items() if s == "allocated") == 24
    assert sum(v for (_, s), v in found.items() if s == "free") == 8
    assert {rack for rack, _ in found} == {"r0", "r1"}
    shell.gauges(state)
    assert REGISTRY.get_sample_value("baton_gang_rack_gpus", {"rack": "r0", "state": "free"}) in (
        0.0,
        8.0,
    )
