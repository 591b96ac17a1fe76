"""The view's index: per-shape counts kept incrementally equal a full pass over the
nodes, after every kind of event (binds, finishes, node health, relabels, deletes),
with and without excluded nodes, now and as if empty."""

from __future__ import annotations

import random

import msgspec
import pytest

from baton.libs.view import Eligible, GangView, Shape, View, eligible_counts, shape_of
from baton.proto import keys
from baton.proto.k8s import GPU, Node, NodeEvent, Pod, PodEvent, Taint, Toleration
from tests.support.builders import node, pod, racks

pytestmark = pytest.mark.unit

TAINT = Taint(key="dedicated", value="x", effect="NoSchedule")
SHAPES = [shape_of(pod(f"s{g}", gpus=g)) for g in (1, 2, 4, 8)] + [
    shape_of(pod("tol", gpus=2, tolerations=(Toleration(key="dedicated", operator="Exists"),))),
    shape_of(pod("cpu", cpu=40_000)),
]


def full_pass(
    cluster: View[GangView], shape: Shape, *, empty: bool, excluded: frozenset[str]
) -> tuple[dict[str, int], list[dict[str, int]], list[int]]:
    counts = eligible_counts(cluster, shape, excluded=excluded, empty=empty)
    sums: list[dict[str, int]] = [{} for _ in cluster.levels]
    for state, n in counts:
        for i, path in enumerate(state.paths):
            if path is not None:
                sums[i][path] = sums[i].get(path, 0) + n
    loose = sorted(n for s, n in counts if not s.paths or s.paths[-1] is None)
    return {s.node.name: n for s, n in counts}, sums, loose


def seen(view: Eligible, levels: int) -> tuple[dict[str, int], list[dict[str, int]], list[int]]:
    counts = {s.node.name: n for s, n in view.all()}
    for i in range(levels):
        for path in view.sums[i]:
            inside = {s.node.name: n for s, n in view.members(i, path)}
            assert sum(inside.values()) == view.sums[i][path]
    assert view.total == sum(counts.values()) and view.eligible == len(counts)
    return counts, view.sums, sorted(view.loose())


def totals(cluster: View[GangView]) -> dict[str, int]:
    out: dict[str, int] = {}
    for state in cluster.nodes.values():
        if state.usable:
            for res, amount in state.free.items():
                if amount > 0:
                    out[res] = out.get(res, 0) + amount
    return {r: n for r, n in out.items() if n}


def new_view() -> View[GangView]:
    return View(levels=keys.DEFAULT_LEVELS, new_gang=GangView)


def upsert(cluster: View[GangView], obj: Node | Pod, op: str = "upsert") -> None:
    if isinstance(obj, Node):
        cluster.apply(NodeEvent(op=op, at=0.0, node=obj))  # type: ignore[arg-type]
    else:
        cluster.apply(PodEvent(op=op, at=0.0, pod=obj))  # type: ignore[arg-type]


def random_event(rng: random.Random, cluster: View[GangView], nodes: list[Node], i: int) -> None:
    roll = rng.random()
    if roll < 0.45:
        name = rng.choice(nodes).name
        p = pod(f"p{i}", gpus=rng.choice((1, 2, 4, 8)), node_name=name, scheduler="other")
        upsert(cluster, p)
    elif roll < 0.7 and cluster.pods:
        victim: Pod = cluster.pods[rng.choice(sorted(cluster.pods))]
        upsert(cluster, victim, op="delete")
    elif roll < 0.8:
        n = rng.choice(nodes)
        upsert(cluster, msgspec.structs.replace(n, ready=rng.random() < 0.5))
    elif roll < 0.87:
        n = rng.choice(nodes)
        taints = (TAINT,) if rng.random() < 0.5 else ()
        upsert(cluster, msgspec.structs.replace(n, taints=taints))
    elif roll < 0.94:  # moved to another rack
        n, other = rng.choice(nodes), rng.choice(nodes)
        upsert(cluster, msgspec.structs.replace(n, labels=dict(other.labels)))
    else:
        n = rng.choice(nodes)
        upsert(cluster, n, op="delete" if n.name in cluster.nodes else "upsert")


@pytest.mark.parametrize("seed", range(4))
def test_incremental_counts_equal_a_full_pass_after_every_event(seed: int) -> None:
    rng = random.Random(seed)
    nodes = racks(zones=2, blocks=2, racks=2, nodes=3) + [
        node(f"loose-{i}", gpus=8).build() for i in range(3)
    ]
    cluster = new_view()
    for n in nodes:
        upsert(cluster, n)
    for i in range(300):
        random_event(rng, cluster, nodes, i)
        shape = SHAPES[i % len(SHAPES)]
        excluded = frozenset(rng.sample(sorted(cluster.nodes), k=min(4, len(cluster.nodes))))
        most = frozenset(cluster.nodes) - excluded  # all but a few: added up, not taken off
        for empty in (False, True):
            for out in (frozenset[str](), excluded, most):
                view = cluster.eligible(shape, empty=empty, excluded=out)
                got = seen(view, len(cluster.levels))
                want = full_pass(cluster, shape, empty=empty, excluded=out)
                assert got == want, (i, shape, empty, out)
        got_totals = {r: n for r, n in cluster.free_totals().items() if n}
        assert got_totals == totals(cluster)
    assert any(GPU in s.free for s in cluster.nodes.values())
