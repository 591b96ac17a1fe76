"""The gang core's picture of the cluster: nodes, their free capacity, and gangs.

Usage is kept incrementally: every pod that holds resources (bound and not
finished, or assumed by an in-flight placement) is *accounted* on one node, and
each node's ``free`` is its allocatable minus what is accounted there. Nothing
here is recomputed from all pods, so an event costs O(1); every node whose
capacity or labels change is marked dirty, for ``capacity`` to refresh.

State is owned by the core and updated in place (like Kueue's cache); it is never
shared with I/O code, so the core stays a pure function of its inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proto.k8s import SCHEDULER_NAME, Node, Pod, PodGroup, Resources

UNHEALTHY_TAINT = "baton.io/unhealthy"
ADMITTED = "baton.io/admitted"
REQUIRED = "baton.io/topology-required"
PREFERRED = "baton.io/topology-preferred"


@dataclass(slots=True)
class NodeState:
    node: Node
    free: dict[str, int]
    usable: bool  # Ready, schedulable, not health-tainted
    paths: tuple[str | None, ...]  # domain id per topology level (None: label missing)


@dataclass(slots=True)
class Assumption:
    """An in-flight placement: members accounted on their nodes until bound or forgotten."""

    action_id: str
    nodes: dict[str, str]  # pod key -> node
    at: float


@dataclass(slots=True)
class Gang:
    key: str  # "<ns>/<podgroup>" or "<ns>/<pod>"
    group: PodGroup | None = None
    lone: bool = False  # a pod without a pod-group label
    pending: set[str] = field(default_factory=set)  # unbound baton pods
    bound: set[str] = field(default_factory=set)  # bound, not finished
    attempt: int = 0
    retry_after: float = 0.0
    assumed: Assumption | None = None
    restarting: bool = False
    restarts: int = 0
    verdict: tuple[object, ...] | None = None  # last published unschedulable verdict
    checked_at: float = -1.0


@dataclass(slots=True)
class Cluster:
    levels: tuple[str, ...]
    nodes: dict[str, NodeState] = field(default_factory=dict)
    used: dict[str, dict[str, int]] = field(default_factory=dict)  # node -> accounted usage
    pods: dict[str, Pod] = field(default_factory=dict)
    accounted: dict[str, tuple[str, Resources]] = field(default_factory=dict)
    on_node: dict[str, set[str]] = field(default_factory=dict)  # node -> accounted pod keys
    gangs: dict[str, Gang] = field(default_factory=dict)
    dirty: set[str] = field(default_factory=set)  # nodes changed since capacity last looked


def is_usable(node: Node) -> bool:
    if not node.ready or node.unschedulable:
        return False
    return all(t.key != UNHEALTHY_TAINT for t in node.taints)


def domain_paths(labels: dict[str, str], levels: tuple[str, ...]) -> tuple[str | None, ...]:
    """Level i's domain id joins the label values of levels 0..i, so racks named alike
    in different blocks stay distinct."""
    paths: list[str | None] = []
    prefix = ""
    for key in levels:
        value = labels.get(key)
        prefix = f"{prefix}/{value or ''}"
        paths.append(prefix if value is not None else None)
    return tuple(paths)


def upsert_node(cluster: Cluster, node: Node) -> None:
    used = cluster.used.get(node.name, {})
    free = dict(node.allocatable)
    for res, amount in used.items():
        free[res] = free.get(res, 0) - amount
    cluster.nodes[node.name] = NodeState(
        node=node,
        free=free,
        usable=is_usable(node),
        paths=domain_paths(node.labels, cluster.levels),
    )
    cluster.dirty.add(node.name)


def delete_node(cluster: Cluster, name: str) -> None:
    cluster.nodes.pop(name, None)
    cluster.dirty.add(name)


def account(cluster: Cluster, pod_key: str, node: str | None, requests: Resources) -> None:
    """Move a pod's usage to ``node`` (None: it holds nothing any more)."""
    old = cluster.accounted.pop(pod_key, None)
    if old is not None:
        _add(cluster, old[0], old[1], -1)
        keys = cluster.on_node.get(old[0])
        if keys is not None:
            keys.discard(pod_key)
            if not keys:
                del cluster.on_node[old[0]]
    if node:
        cluster.accounted[pod_key] = (node, requests)
        cluster.on_node.setdefault(node, set()).add(pod_key)
        _add(cluster, node, requests, 1)


def _add(cluster: Cluster, node: str, requests: Resources, sign: int) -> None:
    used = cluster.used.setdefault(node, {})
    state = cluster.nodes.get(node)
    for res, amount in requests.items():
        used[res] = used.get(res, 0) + sign * amount
        if state is not None:
            state.free[res] = state.free.get(res, 0) - sign * amount
    if sign < 0 and not any(used.values()):
        del cluster.used[node]
    if state is not None:
        cluster.dirty.add(node)


def holds_resources(pod: Pod) -> bool:
    return bool(pod.node_name) and pod.phase not in ("Succeeded", "Failed")


def is_pending_baton(pod: Pod) -> bool:
    return (
        pod.scheduler_name == SCHEDULER_NAME
        and not pod.node_name
        and pod.phase == "Pending"
        and not pod.terminating
    )


def gang_key(pod: Pod) -> str:
    return f"{pod.namespace}/{pod.gang or pod.name}"


def upsert_pod(cluster: Cluster, pod: Pod) -> None:
    cluster.pods[pod.key] = pod
    gang = _gang_of(cluster, pod) if pod.scheduler_name == SCHEDULER_NAME else None
    if holds_resources(pod):
        account(cluster, pod.key, pod.node_name, pod.requests)
    elif gang is None or gang.assumed is None or pod.key not in gang.assumed.nodes or pod.node_name:
        account(cluster, pod.key, None, {})
    if gang is None:
        return
    gang.pending.discard(pod.key)
    gang.bound.discard(pod.key)
    if is_pending_baton(pod):
        gang.pending.add(pod.key)
    elif holds_resources(pod):
        gang.bound.add(pod.key)
    _settle(cluster, gang)


def delete_pod(cluster: Cluster, pod: Pod) -> None:
    cluster.pods.pop(pod.key, None)
    account(cluster, pod.key, None, {})
    gang = cluster.gangs.get(gang_key(pod))
    if gang is not None:
        gang.pending.discard(pod.key)
        gang.bound.discard(pod.key)
        if gang.assumed is not None:
            gang.assumed.nodes.pop(pod.key, None)
        _settle(cluster, gang)


def _gang_of(cluster: Cluster, pod: Pod) -> Gang:
    key = gang_key(pod)
    gang = cluster.gangs.get(key)
    if gang is None:
        gang = cluster.gangs[key] = Gang(key=key, lone=not pod.gang)
    return gang


def _settle(cluster: Cluster, gang: Gang) -> None:
    """Clear finished assumptions and restarts; drop gangs nothing refers to."""
    if gang.assumed is not None and all(
        cluster.pods.get(k) is not None and cluster.pods[k].node_name for k in gang.assumed.nodes
    ):
        gang.assumed = None  # every member is bound: the assumption became fact
    if gang.restarting and not gang.bound:
        gang.restarting = False
    if not gang.pending and not gang.bound and gang.assumed is None and gang.group is None:
        del cluster.gangs[gang.key]


def upsert_group(cluster: Cluster, group: PodGroup) -> None:
    gang = cluster.gangs.get(group.key)
    if gang is None:
        gang = cluster.gangs[group.key] = Gang(key=group.key)
    gang.group = group


def delete_group(cluster: Cluster, group: PodGroup) -> None:
    gang = cluster.gangs.get(group.key)
    if gang is not None:
        gang.group = None
        _settle(cluster, gang)
