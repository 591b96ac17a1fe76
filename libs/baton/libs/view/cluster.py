"""One pure picture of the cluster that every core keeps: nodes, pods, gangs, free capacity.

Usage is kept incrementally: every pod that holds resources (bound and not finished,
or kept on a node by a placement in flight) is *accounted* on one node, and each
node's ``free`` is its allocatable minus what is accounted there. Nothing is
recomputed from all pods, so an event costs O(1); every node whose labels or taints
change is marked dirty, and one whose free capacity alone changes refilled, for the
view's ``Index`` to refresh.

Gangs are the PodGroups (scheduler-plugins' or upstream's) and the pods of Baton's
scheduler, grouped by the group their pods name in any format (``Pod.group``; a pod
naming none is a gang of one): their pending (unbound) and bound members. A service
keeps its own state per gang by subclassing ``GangView``; the view calls two small
hooks on it (``holds``, ``settle``).

The view is owned by one core and changed in place (like Kueue's cache); it is never
shared with I/O code, so the core stays a pure function of its inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from baton.libs.view.capacity import Eligible, Index
from baton.libs.view.domains import Paths, domain_paths
from baton.libs.view.fitting import Shape
from baton.proto import keys
from baton.proto.k8s import (
    SCHEDULER_NAME,
    Node,
    NodeEvent,
    Pod,
    PodEvent,
    PodGroup,
    PodGroupEvent,
    Resources,
)


@dataclass(slots=True)
class NodeView:
    node: Node
    free: dict[str, int]  # allocatable less what is accounted here (negative: overcommitted)
    usable: bool  # Ready, schedulable, not quarantined (``baton.io/unhealthy``)
    paths: Paths  # domain path per topology level (None: label missing)

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def pool(self) -> str:
        return self.node.labels.get(keys.POOL, "")

    @property
    def team(self) -> str:
        """The team owning the node (its ``baton.io/team`` label), '' for none."""
        return self.node.labels.get(keys.TEAM, "")

    @property
    def schedulable(self) -> bool:
        """Ready and not cordoned (health taints aside)."""
        return self.node.ready and not self.node.unschedulable

    @property
    def health(self) -> tuple[str, ...]:
        """Baton's health taints on the node (``keys.HEALTH_TAINTS``); () when healthy."""
        return tuple(t.key for t in self.node.taints if t.key in keys.HEALTH_TAINTS)


@dataclass(slots=True)
class GangView:
    """A PodGroup (or a lone pod) and its members. Subclass it to keep a service's own
    state per gang; override the hooks when that state holds the gang in place."""

    key: str  # "<ns>/<podgroup>" or "<ns>/<pod>"
    group: PodGroup | None = None  # the one read last of ``groups``
    lone: bool = False  # a pod without a pod-group label
    pending: set[str] = field(default_factory=set)  # unbound pods of Baton's scheduler
    bound: set[str] = field(default_factory=set)  # bound, not finished
    # its PodGroups by API: one name in several APIs (scheduler-plugins', upstream's,
    # Volcano's) is one gang, and deleting one keeps the others
    groups: dict[str, PodGroup] = field(default_factory=dict)

    def holds(self, pod: str) -> bool:
        """Hook: the unbound member ``pod`` stays accounted where it is (a placement in
        flight put it there)."""
        return False

    def settle(self, pods: dict[str, Pod]) -> bool:
        """Hook, after a member or the PodGroup changed: update what follows from them;
        True when nothing refers to the gang any more and the view may drop it."""
        return not self.pending and not self.bound and self.group is None


G = TypeVar("G", bound=GangView)


@dataclass(slots=True)
class View(Generic[G]):
    levels: tuple[str, ...]  # topology label keys, broad -> narrow
    new_gang: Callable[[str], G]  # key -> a fresh gang: ``GangView`` or a service's subclass
    nodes: dict[str, NodeView] = field(default_factory=dict)
    used: dict[str, dict[str, int]] = field(default_factory=dict)  # node -> accounted usage
    pods: dict[str, Pod] = field(default_factory=dict)
    accounted: dict[str, tuple[str, Resources]] = field(default_factory=dict)  # pod -> where
    on_node: dict[str, set[str]] = field(default_factory=dict)  # node -> accounted pod keys
    gangs: dict[str, G] = field(default_factory=dict)
    domains: list[dict[str, set[str]]] = field(default_factory=list)  # level -> path -> nodes
    dirty: set[str] = field(default_factory=set)  # nodes changed since the index last looked
    refilled: set[str] = field(default_factory=set)  # nodes whose free capacity alone changed
    index: Index = field(default_factory=Index)  # eligible counts per shape, kept incrementally
    # Placement's view: a balloon (``is_preemptible``) is listed on its node but uses
    # nothing there, so its node counts as free; the placement evicts it when it binds.
    balloons_free: bool = False

    def __post_init__(self) -> None:
        self.domains = [{} for _ in self.levels]

    def apply(self, event: NodeEvent | PodEvent | PodGroupEvent) -> None:
        """One object event, for a core that needs nothing else done with it."""
        match event:
            case NodeEvent(op="delete", node=node):
                self.delete_node(node.name)
            case NodeEvent(node=node):
                self.upsert_node(node)
            case PodEvent(op="delete", pod=pod):
                self.delete_pod(pod)
            case PodEvent(pod=pod):
                self.upsert_pod(pod)
            case PodGroupEvent(op="delete", pod_group=group):
                self.delete_group(group)
            case PodGroupEvent(pod_group=group):
                self.upsert_group(group)

    # -- nodes ------------------------------------------------------------------

    def upsert_node(self, node: Node) -> None:
        used = self.used.get(node.name, {})
        free = dict(node.allocatable)
        for res, amount in used.items():
            free[res] = free.get(res, 0) - amount
        state = NodeView(
            node=node,
            free=free,
            usable=is_usable(node),
            paths=domain_paths(node.labels, self.levels),
        )
        old = self.nodes.get(node.name)
        if old is None or old.paths != state.paths:
            self._place(node.name, old.paths if old is not None else (), state.paths)
        self.nodes[node.name] = state
        self.dirty.add(node.name)

    def delete_node(self, name: str) -> None:
        old = self.nodes.pop(name, None)
        if old is not None:
            self._place(name, old.paths, ())
        self.dirty.add(name)

    def _place(self, name: str, old: Paths, new: Paths) -> None:
        for level, path in enumerate(old):
            if path is not None:
                inside = self.domains[level][path]
                inside.discard(name)
                if not inside:
                    del self.domains[level][path]
        for level, path in enumerate(new):
            if path is not None:
                self.domains[level].setdefault(path, set()).add(name)

    # -- accounting -------------------------------------------------------------

    def account(self, pod_key: str, node: str | None, requests: Resources) -> None:
        """Move a pod's usage to ``node`` (None: it holds nothing any more)."""
        old = self.accounted.pop(pod_key, None)
        if old is not None:
            self._add(old[0], old[1], -1)
            held = self.on_node.get(old[0])
            if held is not None:
                held.discard(pod_key)
                if not held:
                    del self.on_node[old[0]]
        if node:
            self.accounted[pod_key] = (node, requests)
            self.on_node.setdefault(node, set()).add(pod_key)
            self._add(node, requests, 1)

    def _add(self, node: str, requests: Resources, sign: int) -> None:
        used = self.used.setdefault(node, {})
        state = self.nodes.get(node)
        for res, amount in requests.items():
            used[res] = used.get(res, 0) + sign * amount
            if state is not None:
                state.free[res] = state.free.get(res, 0) - sign * amount
        if sign < 0 and not any(used.values()):
            del self.used[node]
        if state is not None:
            self.refilled.add(node)

    # -- pods and gangs ---------------------------------------------------------

    def upsert_pod(self, pod: Pod) -> None:
        self.pods[pod.key] = pod
        gang = self._gang_of(pod) if pod.scheduler_name == SCHEDULER_NAME else None
        if holds_resources(pod):
            free = self.balloons_free and is_preemptible(pod)
            self.account(pod.key, pod.node_name, {} if free else pod.requests)
        elif gang is None or pod.node_name or not gang.holds(pod.key):
            self.account(pod.key, None, {})
        if gang is None:
            return
        gang.pending.discard(pod.key)
        gang.bound.discard(pod.key)
        if is_pending_baton(pod):
            gang.pending.add(pod.key)
        elif holds_resources(pod):
            gang.bound.add(pod.key)
        self._settle(gang)

    def delete_pod(self, pod: Pod) -> None:
        self.pods.pop(pod.key, None)
        self.account(pod.key, None, {})
        gang = self.gangs.get(gang_key(pod))
        if gang is not None:
            gang.pending.discard(pod.key)
            gang.bound.discard(pod.key)
            self._settle(gang)

    def upsert_group(self, group: PodGroup) -> None:
        gang = self.gangs.get(group.key)
        if gang is None:
            gang = self.gangs[group.key] = self.new_gang(group.key)
        gang.groups.pop(group.api, None)  # (re)inserted last: ``group`` is the one read last
        gang.groups[group.api] = group
        gang.group = group

    def delete_group(self, group: PodGroup) -> None:
        gang = self.gangs.get(group.key)
        if gang is None:
            return
        held = gang.groups.get(group.api)
        if held is not None and held.uid == group.uid:
            del gang.groups[group.api]
        if gang.group is None or gang.group.uid == group.uid:
            gang.group = next(reversed(gang.groups.values()), None)  # another API's stays
            self._settle(gang)

    def _gang_of(self, pod: Pod) -> G:
        key = gang_key(pod)
        gang = self.gangs.get(key)
        if gang is None:
            gang = self.gangs[key] = self.new_gang(key)
            gang.lone = not pod.gang
        return gang

    def _settle(self, gang: G) -> None:
        if gang.settle(self.pods):
            del self.gangs[gang.key]

    # -- queries ----------------------------------------------------------------

    def eligible(
        self, shape: Shape, *, empty: bool = False, excluded: frozenset[str] = frozenset()
    ) -> Eligible:
        """How many pods of ``shape`` each node takes, summed per domain (``empty``: as if
        nodes ran nothing), less the ``excluded`` nodes."""
        return self.index.eligible(self, shape, empty=empty, excluded=excluded)

    def free_totals(self) -> dict[str, int]:
        """Free capacity summed over usable nodes (positive amounts only); a copy."""
        return self.index.free_totals(self)

    def pods_on(self, node: str) -> list[Pod]:
        """Pods accounted on ``node`` (bound and not finished, or placed in flight), by key."""
        return [self.pods[k] for k in sorted(self.on_node.get(node, ())) if k in self.pods]

    def members(self, gang: GangView) -> list[Pod]:
        """The gang's pending and bound pods, by key."""
        found = sorted(gang.pending | gang.bound)
        return [self.pods[k] for k in found if k in self.pods]

    def in_domain(self, level: int, path: str) -> set[str]:
        """Names of the nodes in one domain (``level`` indexes ``levels``); do not change it."""
        return self.domains[level].get(path, set())

    def free_in(self, level: int, path: str) -> dict[str, int]:
        """Free capacity summed over the usable nodes of one domain (positive amounts)."""
        return _sum_free(self.nodes[n] for n in self.in_domain(level, path))

    def free_if_preempted(self, node: str) -> dict[str, int]:
        """The node's free capacity if its preemptible pods (balloons) were gone."""
        free = dict(self.nodes[node].free)
        for pod in self.pods_on(node):
            if is_preemptible(pod):
                for res, amount in self.accounted[pod.key][1].items():
                    free[res] = free.get(res, 0) + amount
        return free


def is_usable(node: Node) -> bool:
    """Ready, not cordoned, neither quarantined nor under a preflight (whatever a pod
    tolerates: the actuator binds no gang onto a node with either of these taints)."""
    if not node.ready or node.unschedulable:
        return False
    return all(t.key not in (keys.UNHEALTHY, keys.PREFLIGHT) for t in node.taints)


def holds_resources(pod: Pod) -> bool:
    return bool(pod.node_name) and pod.phase not in ("Succeeded", "Failed")


def is_pending_baton(pod: Pod) -> bool:
    return (
        pod.scheduler_name == SCHEDULER_NAME
        and not pod.node_name
        and pod.phase == "Pending"
        and not pod.terminating
    )


def is_preemptible(pod: Pod) -> bool:
    """A placeholder others may take the place of: a balloon (``baton.io/balloon``
    label) or any pod of negative priority (cluster-autoscaler's overprovisioning)."""
    return keys.BALLOON in pod.labels or pod.priority < 0


# Labels the workload controllers put on their pods (Job, JobSet, LeaderWorkerSet, the
# MPI operator): such a pod is recreated by its controller once evicted
CONTROLLER_LABELS = (
    "batch.kubernetes.io/job-name",
    "job-name",
    "jobset.sigs.k8s.io/jobset-name",
    "leaderworkerset.sigs.k8s.io/name",
    "training.kubeflow.org/job-name",
)


def is_bare(pod: Pod) -> bool:
    """A pod no controller recreates once it is evicted: Baton recreates it
    (``RecreatePod``) whenever it takes its gang off, unless it opts out with
    ``baton.io/recreate: "false"``. The actuator reads the live pod's ownerReferences
    before it copies: a pod with a controller is only deleted, never copied."""
    if pod.annotations.get(keys.RECREATE) == "false":
        return False
    return not any(label in pod.labels for label in CONTROLLER_LABELS)


def gang_key(pod: Pod) -> str:
    """``<ns>/<group>`` for a member of a group in any format (``Pod.group``, decided in
    ``libs.kube.slimming.gang_ref``), ``<ns>/<pod>`` for a lone pod."""
    return f"{pod.namespace}/{pod.gang or pod.name}"


def quorum(gang: GangView, pods: dict[str, Pod]) -> int:
    """Members the gang needs before it is placed: its PodGroup's minMember (either API),
    else what its pods say (Kueue's total count, Volcano's group-min-member; the
    largest), 1 for a lone pod; 0 while nothing says (pods naming a PodGroup that does
    not exist yet): such a gang waits."""
    if gang.group is not None:
        return max(gang.group.min_member, 1)
    if gang.lone:
        return 1
    said = (pods[k].group for k in gang.pending | gang.bound if k in pods)
    return max((ref.min_member for ref in said if ref is not None), default=0)


def _sum_free(states: Iterable[NodeView]) -> dict[str, int]:
    out: dict[str, int] = {}
    for state in states:
        if state.usable:
            for res, amount in state.free.items():
                if amount > 0:
                    out[res] = out.get(res, 0) + amount
    return out
