"""Which nodes can take a pod, and how many pods of one shape each can take.

Pods with the same requests, selector, affinity and tolerations share a ``Shape``;
filtering runs once per shape, not once per pod, so a 1,024-pod gang of identical
workers costs one pass over the nodes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from baton.proto.k8s import NodeSelectorTerm, Pod, Toleration

if TYPE_CHECKING:
    from baton.libs.view.cluster import NodeView, View

UNLIMITED = 1 << 30


@dataclass(frozen=True, slots=True)
class Shape:
    requests: tuple[tuple[str, int], ...]
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()

    @property
    def size(self) -> tuple[int, ...]:
        """Sort key: bigger pods are packed first."""
        return tuple(sorted((-amount for _, amount in self.requests)))


def shape_of(pod: Pod) -> Shape:
    return Shape(
        requests=tuple(sorted((r, q) for r, q in pod.requests.items() if q > 0)),
        node_selector=tuple(sorted(pod.node_selector.items())),
        affinity=pod.affinity,
        tolerations=pod.tolerations,
    )


def group_by_shape(pods: Iterable[Pod]) -> dict[Shape, list[str]]:
    """Pod keys by shape, biggest shape first, keys in name order (deterministic)."""
    groups: dict[Shape, list[str]] = {}
    for pod in pods:
        groups.setdefault(shape_of(pod), []).append(pod.key)
    return {s: sorted(groups[s]) for s in sorted(groups, key=lambda s: (s.size, repr(s)))}


def admits(state: NodeView, shape: Shape) -> bool:
    """Filters that do not depend on free capacity: usable (Ready, schedulable, not
    quarantined), taints tolerated, selector and affinity matched."""
    if not state.usable:
        return False
    node = state.node
    for taint in node.taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if not any(t.tolerates(taint) for t in shape.tolerations):
            return False
    labels = node.labels
    for key, value in shape.node_selector:
        if labels.get(key) != value:
            return False
    return not shape.affinity or any(term.matches(labels) for term in shape.affinity)


def count_fits(free: dict[str, int], requests: tuple[tuple[str, int], ...]) -> int:
    """How many pods of these requests fit in ``free``."""
    best = UNLIMITED
    for res, amount in requests:
        n = free.get(res, 0) // amount
        if n < best:
            best = n
            if n <= 0:
                return 0
    return best


def eligible_counts(
    view: View[Any], shape: Shape, *, excluded: frozenset[str] = frozenset(), empty: bool = False
) -> list[tuple[NodeView, int]]:
    """(node, pods it takes now) for every admitting node with room, by a full pass;
    ``empty``: as if the node ran nothing. ``View.eligible`` gives the same, kept
    incrementally."""
    out: list[tuple[NodeView, int]] = []
    requests = shape.requests
    for name, state in view.nodes.items():
        if name in excluded or not admits(state, shape):
            continue
        n = count_fits(state.node.allocatable if empty else state.free, requests)
        if n > 0:
            out.append((state, n))
    return out
