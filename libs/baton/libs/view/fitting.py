"""Which nodes can take a pod, and how many pods of one shape each can take.

Pods with the same requests, selector, affinity and tolerations share a ``Shape``;
filtering runs once per shape, not once per pod, so a 1,024-pod gang of identical
workers costs one pass over the nodes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from baton.proto import keys
from baton.proto.k8s import NodeSelectorTerm, Pod, Taint, Toleration

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


# kube-scheduler's FailedScheduling wording, one reason per filter (its filters' order)
UNREADY = "node(s) were not ready"
CORDONED = "node(s) were unschedulable"
UNMATCHED = "node(s) didn't match Pod's node affinity/selector"


def refusal(state: NodeView, shape: Shape, free: dict[str, int]) -> tuple[str, ...]:
    """Why the node takes no pod of ``shape`` with ``free`` left, as kube-scheduler says
    it: the first filter that fails (several ``Insufficient`` at once); () when it takes
    one. A quarantine or preflight taint refuses whatever the pod tolerates (``usable``)."""
    node = state.node
    if not node.ready:
        return (UNREADY,)
    if node.unschedulable:
        return (CORDONED,)
    for taint in node.taints:  # never tolerated: the actuator binds no gang there
        if taint.key in (keys.UNHEALTHY, keys.PREFLIGHT):
            return (_untolerated(taint),)
    for taint in node.taints:
        if taint.effect != "PreferNoSchedule" and not any(
            t.tolerates(taint) for t in shape.tolerations
        ):
            return (_untolerated(taint),)
    labels = node.labels
    if any(labels.get(k) != v for k, v in shape.node_selector) or (
        shape.affinity and not any(term.matches(labels) for term in shape.affinity)
    ):
        return (UNMATCHED,)
    return tuple(f"Insufficient {r}" for r, n in shape.requests if free.get(r, 0) < n)


def _untolerated(taint: Taint) -> str:
    return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"


@dataclass(frozen=True, slots=True)
class Refusals:
    """How many nodes refuse a shape, by reason (a node may count under several
    ``Insufficient`` reasons, as in kube-scheduler), and how many take it."""

    available: int
    nodes: int
    counts: tuple[tuple[str, int], ...]

    @property
    def constrained(self) -> bool:
        """Some node is refused by more than room: a taint, selector, affinity, state."""
        return any(not r.startswith("Insufficient ") for r, _ in self.counts)

    def text(self, shape: Shape) -> str:
        """``0/16 nodes are available: 16 node(s) didn't match Pod's node
        affinity/selector (nodeSelector disk=ssd)``: counts sorted as kube-scheduler
        sorts them, the selector or affinity named."""
        listed = ", ".join(sorted(f"{n} {r}" for r, n in self.counts))
        said = f"{self.available}/{self.nodes} nodes are available: {listed}"
        if any(r == UNMATCHED for r, _ in self.counts):
            said += f" ({asked_nodes(shape)})"
        return said


def refusals(view: View[Any], shape: Shape, *, empty: bool = False) -> Refusals:
    """Every node's ``refusal`` of ``shape``, counted (``empty``: as if nodes ran nothing)."""
    counts: dict[str, int] = {}
    available = 0
    for state in view.nodes.values():
        why = refusal(state, shape, state.node.allocatable if empty else state.free)
        available += not why
        for reason in why:
            counts[reason] = counts.get(reason, 0) + 1
    return Refusals(available, len(view.nodes), tuple(sorted(counts.items())))


def asked_nodes(shape: Shape) -> str:
    """``nodeSelector disk=ssd; node affinity gpu In (h100)``: which nodes the shape asks."""
    said = []
    if shape.node_selector:
        said.append("nodeSelector " + ", ".join(f"{k}={v}" for k, v in shape.node_selector))
    for term in shape.affinity:  # a requirement written twice is said once
        said.append("node affinity " + " and ".join(dict.fromkeys(
            f"{r.key} {r.operator} ({', '.join(r.values)})" if r.values else f"{r.key} {r.operator}"
            for r in term.match_expressions)))  # fmt: skip
    return "; ".join(said)
