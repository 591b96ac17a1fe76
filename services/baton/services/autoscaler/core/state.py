"""The autoscaler's state, and what it knows of each pool: its nodes, how many are
Ready, the shape of its nodes, whether a new node would take a gang, the one scale
action. ``growing`` and ``shrinking`` decide from it; ``core`` feeds it events."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from baton.libs.view import GangView, NodeView, View, admits, shape_of
from baton.libs.view.pools import pool_of
from baton.proto import ids, keys
from baton.proto.actions import Annotate, MarkNode, ScaleMachineDeployment
from baton.proto.autoscaler import (
    AutoscalerPolicy,
    NodeReplaced,
    ScaledDown,
    ScaledUp,
    ScaleRefused,
    ScaleReverted,
)
from baton.proto.k8s import MachineDeployment, Node, Resources
from baton.proto.placement import Need

Policy = AutoscalerPolicy
Output = (
    ScaledUp
    | ScaleRefused
    | ScaleReverted
    | ScaledDown
    | NodeReplaced
    | ScaleMachineDeployment
    | MarkNode
    | Annotate
)
BY = "autoscaler"
QUOTA_EXCEEDED = "QuotaExceeded"
BALLOON_PREFIX = "balloon/"


@dataclass(slots=True)
class Plan:
    """A scale-up in flight: ``pool`` should have ``target`` Ready nodes."""

    gang: str
    pool: str
    nodes: int
    target: int  # Ready nodes the pool should have once the gang's nodes joined
    replicas: int  # what the pool was asked for
    at: float
    action_id: str


@dataclass(slots=True)
class Deletion:
    node: str
    pool: str
    at: float
    mark_id: str
    idle_s: float
    scaled: bool = False
    replace: bool = False  # health's "replace this node": the pool grows back once it is gone


@dataclass(slots=True)
class State:
    policy: Policy
    view: View[GangView]
    pools: dict[str, MachineDeployment] = field(default_factory=dict)  # "<ns>/<name>" ->
    pool_of: dict[str, str] = field(default_factory=dict)  # node -> pool
    members: dict[str, set[str]] = field(default_factory=dict)  # pool -> its nodes
    ready: dict[str, set[str]] = field(default_factory=dict)  # pool -> its Ready nodes
    samples: dict[str, str] = field(default_factory=dict)  # pool -> its first node by name
    asked: dict[str, int] = field(default_factory=dict)  # pool -> replicas asked, not yet seen
    waiting: dict[str, Need] = field(default_factory=dict)  # gang -> what would make it fit
    arrived: dict[str, float] = field(default_factory=dict)  # gang -> first verdict's time
    skip: dict[str, str] = field(default_factory=dict)  # gang -> why more nodes would not help
    queued: set[str] = field(default_factory=set)  # gangs waiting on their team's quota
    refused: dict[str, str] = field(default_factory=dict)  # gang -> last reason published
    plans: dict[str, Plan] = field(default_factory=dict)  # gang -> its scale-up in flight
    backoff: dict[str, float] = field(default_factory=dict)  # pool -> not grown before
    idle_since: dict[str, float] = field(default_factory=dict)  # node -> idle since
    deletion: Deletion | None = None
    replacing: dict[str, float] = field(default_factory=dict)  # node -> since (health asked)
    balloon_pools: dict[str, str] = field(default_factory=dict)  # balloon deficit -> its pool
    asks: list[tuple[float, int]] = field(default_factory=list)  # (when, nodes) scale-ups
    partial: int = 0  # scale-ups asked for less than the whole need: stays 0 (a check)


def place(state: State, node: Node, pool: str) -> None:
    """Keep the per-pool node sets in step with a node event ('' pool: no pool, or gone)."""
    old = state.pool_of.get(node.name, "")
    if old and old != pool:
        state.members.get(old, set()).discard(node.name)
        state.ready.get(old, set()).discard(node.name)
        if state.samples.get(old) == node.name:
            del state.samples[old]  # found again by ``_sample`` when next asked
    if not pool:
        state.pool_of.pop(node.name, None)
        return
    state.pool_of[node.name] = pool
    state.members.setdefault(pool, set()).add(node.name)
    if pool in state.samples and node.name < state.samples[pool]:
        state.samples[pool] = node.name
    ready = state.ready.setdefault(pool, set())
    (ready.add if node.ready else ready.discard)(node.name)


def assign_nodes(state: State) -> None:
    state.pool_of.clear()
    state.members.clear()
    state.ready.clear()
    state.samples.clear()
    for nv in state.view.nodes.values():
        place(state, nv.node, pool_of(state.pools, nv.node))


def autoscaled(md: MachineDeployment) -> bool:
    """cluster-autoscaler's rule: a pool with both size annotations is autoscaled."""
    return md.min_size is not None and md.max_size is not None


def replicas_of(state: State, md: MachineDeployment) -> int:
    """What the pool is asked for, counting our own request the bridge has not shown yet."""
    return state.asked.get(md.key, md.replicas)


def ready(state: State, pool: str) -> int:
    return len(state.ready.get(pool, ()))


def _sample(state: State, pool: str) -> str | None:
    """The pool's first node by name (a pool's nodes are alike; by name: replayable)."""
    if pool not in state.samples:
        first = min(state.members.get(pool, ()), default=None)
        if first is None:
            return None
        state.samples[pool] = first
    return state.samples[pool]


def pool_shape(state: State, md: MachineDeployment) -> Resources:
    """A node of the pool, else the scale-from-zero annotations."""
    sample = _sample(state, md.key)
    return state.view.nodes[sample].node.allocatable if sample is not None else md.capacity


def welcomes(state: State, md: MachineDeployment, gang: str) -> bool:
    """Would a new node of the pool take the gang's pods: their selector, affinity and
    tolerations against a node of the pool as it joins (its labels less the hostname,
    its taints less Baton's health taints)? True when the pool has no node to look at
    or the gang's pods are not known."""
    found = state.view.gangs.get(gang)
    members = sorted(found.pending) if found is not None else []
    pod = state.view.pods.get(members[0]) if members else None
    sample = _sample(state, md.key)
    if pod is None or sample is None:
        return True
    node = state.view.nodes[sample].node
    fresh = msgspec.structs.replace(
        node,
        labels={k: v for k, v in node.labels.items() if k != keys.HOSTNAME},
        taints=tuple(t for t in node.taints if t.key not in keys.HEALTH_TAINTS),
        ready=True,
        unschedulable=False,
    )
    return admits(NodeView(node=fresh, free={}, usable=True, paths=()), shape_of(pod))


def domain_of(state: State, md: MachineDeployment, level: str) -> str | None:
    """The pool's one domain at ``level`` (None: several, or unknown)."""
    if level in md.labels:
        return md.labels[level]
    nodes = state.view.nodes
    values = {nodes[n].node.labels.get(level) for n in state.members.get(md.key, ())}
    return values.pop() if len(values) == 1 else None


def scale_action(
    md: MachineDeployment, replicas: int, now: float, *, reason: str, key: tuple[object, ...]
) -> ScaleMachineDeployment:
    return ScaleMachineDeployment(
        id=ids.make("scale", md.key, *key),
        by=BY,
        at=now,
        priority="scaling",
        reason=reason,
        namespace=md.namespace,
        name=md.name,
        replicas=replicas,
    )
