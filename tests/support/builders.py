"""Small builders for slim proto objects in tests and benchmarks.

    node("gpu-1", gpus=8).in_rack("r1", block="b1").tainted("team", "a").build()
    pod("w-0", group="job7", gpus=8)
    pod_group("job7", min_member=4, admitted=True)
    gang("job7", 4, gpus=8)            # (PodGroup, [Pod, ...])
    racks(zones=1, blocks=2, racks=4, nodes=8, gpus=8)   # [Node, ...]
    balloon("hold-1", node_name="gpu-1", gpus=8)          # a placeholder pod
    view(*nodes, *pods, group)         # a libs.view View fed those objects

UIDs are derived from names, so builders are deterministic. Others may append.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from baton.libs.view import GangView, View
from baton.proto import keys
from baton.proto.k8s import (
    PLUGINS_API,
    SCHEDULER_NAME,
    GangRef,
    Node,
    NodeSelectorTerm,
    Pod,
    PodGroup,
    Taint,
    Toleration,
)

GPU = keys.GPU
ZONE, BLOCK, RACK = keys.ZONE, keys.BLOCK, keys.RACK
GIB = 1 << 30
BALLOON_PRIORITY = -10  # cluster-autoscaler's overprovisioning convention


@dataclass(frozen=True)
class NodeBuilder:
    name: str
    allocatable: dict[str, int]
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False

    def labelled(self, **labels: str) -> NodeBuilder:
        return replace(self, labels={**self.labels, **labels})

    def with_labels(self, labels: dict[str, str]) -> NodeBuilder:
        return replace(self, labels={**self.labels, **labels})

    def in_zone(self, zone: str) -> NodeBuilder:
        return self.with_labels({ZONE: zone})

    def in_block(self, block: str, *, zone: str | None = None) -> NodeBuilder:
        return self.with_labels({BLOCK: block, **({ZONE: zone} if zone else {})})

    def in_rack(
        self, rack: str, *, block: str | None = None, zone: str | None = None
    ) -> NodeBuilder:
        labels = {RACK: rack, **({BLOCK: block} if block else {}), **({ZONE: zone} if zone else {})}
        return self.with_labels(labels)

    def in_pool(self, pool: str) -> NodeBuilder:
        return self.with_labels({keys.POOL: pool})

    def of_team(self, team: str) -> NodeBuilder:
        return self.with_labels({keys.TEAM: team})

    def tainted(self, key: str, value: str = "", effect: str = "NoSchedule") -> NodeBuilder:
        taint = Taint(key=key, value=value, effect=effect)  # type: ignore[arg-type]
        return replace(self, taints=(*self.taints, taint))

    def with_resources(self, resources: dict[str, int]) -> NodeBuilder:
        return replace(self, allocatable={**self.allocatable, **resources})

    def not_ready(self) -> NodeBuilder:
        return replace(self, ready=False)

    def cordoned(self) -> NodeBuilder:
        return replace(self, unschedulable=True)

    def build(self) -> Node:
        return Node(
            name=self.name,
            uid=f"uid-node-{self.name}",
            labels={keys.HOSTNAME: self.name, **self.labels},
            taints=self.taints,
            ready=self.ready,
            unschedulable=self.unschedulable,
            allocatable=dict(self.allocatable),
        )


def node(
    name: str, *, gpus: int = 8, cpu: int = 96_000, memory: int = 1024 * GIB, **extra: int
) -> NodeBuilder:
    """A GPU node; ``cpu`` in millicores, ``memory`` in bytes; resources whose names
    have slashes via ``.with_resources({"rdma/ib": 1})``."""
    allocatable = {"cpu": cpu, "memory": memory, **extra}
    if gpus:
        allocatable[GPU] = gpus
    return NodeBuilder(name=name, allocatable=allocatable)


def pod(
    name: str,
    *,
    namespace: str = "default",
    group: str = "",
    gpus: int = 0,
    cpu: int = 1000,
    memory: int = GIB,
    requests: dict[str, int] | None = None,
    node_name: str = "",
    phase: str = "",
    priority: int = 0,
    scheduler: str = SCHEDULER_NAME,
    created_at: float = 0.0,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    tolerations: tuple[Toleration, ...] = (),
    node_selector: dict[str, str] | None = None,
    affinity: tuple[NodeSelectorTerm, ...] = (),
    ref: GangRef | None = None,
) -> Pod:
    """``group``: a scheduler-plugins member (label and ``Pod.group``); ``ref``: a member
    in another format (``GangRef(name=, source="kueue", min_member=4)``)."""
    wanted = {"cpu": cpu, "memory": memory, **({GPU: gpus} if gpus else {}), **(requests or {})}
    return Pod(
        namespace=namespace,
        name=name,
        uid=f"uid-pod-{namespace}-{name}",
        labels={**({keys.POD_GROUP: group} if group else {}), **(labels or {})},
        annotations=dict(annotations or {}),
        scheduler_name=scheduler,
        node_name=node_name,
        phase=phase or ("Running" if node_name else "Pending"),  # type: ignore[arg-type]
        priority=priority,
        requests=wanted,
        node_selector=dict(node_selector or {}),
        affinity=affinity,
        tolerations=tolerations,
        created_at=created_at,
        group=ref or (GangRef(name=group) if group else None),
    )


def pod_group(
    name: str,
    *,
    namespace: str = "default",
    min_member: int = 1,
    created_at: float = 0.0,
    admitted: bool = False,
    required: str = "",
    preferred: str = "",
    annotations: dict[str, str] | None = None,
    api: str = PLUGINS_API,
    min_resources: dict[str, int] | None = None,
    topology: str = "",
    timeout: int | None = None,
) -> PodGroup:
    notes = dict(annotations or {})
    if admitted:
        notes[keys.ADMITTED] = "true"
    if required:
        notes[keys.TOPOLOGY_REQUIRED] = required
    if preferred:
        notes[keys.TOPOLOGY_PREFERRED] = preferred
    return PodGroup(
        namespace=namespace,
        name=name,
        uid=f"uid-pg-{namespace}-{name}",
        annotations=notes,
        min_member=min_member,
        created_at=created_at,
        api=api,
        min_resources=dict(min_resources or {}),
        topology=topology,
        schedule_timeout_seconds=timeout,
    )


def gang(
    name: str,
    size: int,
    *,
    gpus: int = 8,
    namespace: str = "default",
    priority: int = 0,
    created_at: float = 0.0,
    admitted: bool = False,
    required: str = "",
    preferred: str = "",
    **pod_args: object,
) -> tuple[PodGroup, list[Pod]]:
    """A PodGroup with ``size`` pending members ``<name>-0..``, each asking ``gpus``."""
    group = pod_group(
        name,
        namespace=namespace,
        min_member=size,
        created_at=created_at,
        admitted=admitted,
        required=required,
        preferred=preferred,
    )
    members = [
        pod(
            f"{name}-{i}",
            namespace=namespace,
            group=name,
            gpus=gpus,
            priority=priority,
            created_at=created_at,
            **pod_args,  # type: ignore[arg-type]
        )
        for i in range(size)
    ]
    return group, members


def racks(
    *,
    zones: int = 1,
    blocks: int = 1,
    racks: int = 1,
    nodes: int = 8,
    gpus: int = 8,
    prefix: str = "gpu",
) -> list[Node]:
    """``zones x blocks x racks x nodes`` nodes labelled z<i>, z<i>-b<j>, z<i>-b<j>-r<k>."""
    out: list[Node] = []
    for z in range(zones):
        for b in range(blocks):
            for r in range(racks):
                for n in range(nodes):
                    name = f"{prefix}-{z}-{b}-{r}-{n}"
                    out.append(
                        node(name, gpus=gpus)
                        .in_rack(f"z{z}-b{b}-r{r}", block=f"z{z}-b{b}", zone=f"z{z}")
                        .build()
                    )
    return out


def balloon(
    name: str, *, node_name: str = "", gpus: int = 8, namespace: str = "baton-system"
) -> Pod:
    """A balloon placeholder (label ``baton.io/balloon``, priority -10) holding ``gpus``."""
    return pod(
        name,
        namespace=namespace,
        gpus=gpus,
        node_name=node_name,
        priority=BALLOON_PRIORITY,
        scheduler="default-scheduler",
        labels={keys.BALLOON: "true"},
    )


def view(
    *objs: Node | Pod | PodGroup, levels: tuple[str, ...] = keys.DEFAULT_LEVELS
) -> View[GangView]:
    """A cluster view fed ``objs`` in order (nodes, pods, PodGroups)."""
    found: View[GangView] = View(levels=levels, new_gang=GangView)
    for obj in objs:
        if isinstance(obj, Node):
            found.upsert_node(obj)
        elif isinstance(obj, Pod):
            found.upsert_pod(obj)
        else:
            found.upsert_group(obj)
    return found
