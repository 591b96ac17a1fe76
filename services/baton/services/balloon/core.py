"""The balloon core: pure ``(state, event, now) -> (state, outputs)``.

Balloons are placeholder pods that hold whole GPU nodes warm: one per node, asking
for all of the node's GPUs, priority -10 (cluster-autoscaler's overprovisioning
convention) and ``cluster-autoscaler.kubernetes.io/safe-to-evict: "true"``. The gang
service counts them as free capacity and evicts them in the step that binds a gang
there; the autoscaler never removes a node a balloon holds.

Each ``Tick``, for every GPU pool (a MachineDeployment; ``pools`` narrows them):

- ``want``: ``static_nodes`` (static), or the ``quantile`` of the sizes in nodes of the
  multi-node gangs placed in the pool over the last ``window_s`` (demand), capped by
  ``max_idle_nodes`` (the idle-cost cap); 0 when ``mode`` is off;
- a balloon is created (through the actuator) on an empty usable node of the pool for
  each one missing, removed from the newest held node for each one too many;
- what finds no empty node is the pool's ``deficit``: published in ``Headroom`` for the
  autoscaler, which grows the pool by that many nodes.

A gang that takes balloon nodes leaves the pool short: the next tick asks for
replacement headroom the same way. No I/O, no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from baton.libs.view import GangView, View
from baton.libs.view.pools import pool_of
from baton.proto import ids, keys
from baton.proto.actions import ActionResult, CreatePod, DeletePod, PodTemplate
from baton.proto.balloon import BalloonPolicy, Headroom
from baton.proto.k8s import (
    CapacityBuffer,
    CapacityBufferEvent,
    MachineDeployment,
    MachineDeploymentEvent,
    NodeEvent,
    Pod,
    PodEvent,
    Toleration,
)
from baton.proto.placement import GangPlaced
from baton.proto.runner import Tick

Policy = BalloonPolicy
Input = (
    NodeEvent
    | PodEvent
    | MachineDeploymentEvent
    | CapacityBufferEvent
    | GangPlaced
    | ActionResult
    | Tick
)
Output = CreatePod | DeletePod | Headroom
BY = "balloon"
PRIORITY = -10


@dataclass(slots=True)
class State:
    policy: Policy
    view: View[GangView]
    pools: dict[str, MachineDeployment] = field(default_factory=dict)
    buffers: dict[str, CapacityBuffer] = field(default_factory=dict)  # users' declarations
    sizes: list[tuple[float, str, str, int]] = field(default_factory=list)  # at, pool, team, n
    creating: dict[str, tuple[str, float]] = field(default_factory=dict)  # node -> (id, at)
    deleting: dict[str, float] = field(default_factory=dict)  # balloon pod key -> since
    dead: dict[str, Pod] = field(default_factory=dict)  # balloons that ended (a kubelet refused)
    published: dict[tuple[str, str], tuple[int, int, int]] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)  # gangs whose size is counted


def initial(policy: Policy | None = None) -> State:
    policy = policy or Policy()
    return State(policy=policy, view=View(levels=(), new_gang=GangView))


def wants_tick(state: State, now: float) -> bool:
    return state.policy.mode != "off" and bool(state.pools)


def is_balloon(pod: Pod, policy: Policy) -> bool:
    return pod.namespace == policy.namespace and keys.BALLOON in pod.labels


def step(state: State, event: Input, now: float) -> tuple[State, tuple[Output, ...]]:
    outputs: list[Output] = []
    match event:
        case Tick():
            outputs = cycle(state, now)
        case NodeEvent(op="delete", node=node):
            state.view.delete_node(node.name)
            state.creating.pop(node.name, None)
        case NodeEvent(node=node):
            state.view.upsert_node(node)
        case PodEvent(op="delete", pod=pod):
            state.view.delete_pod(pod)
            state.deleting.pop(pod.key, None)
            state.dead.pop(pod.key, None)
        case PodEvent(pod=pod):
            state.view.upsert_pod(pod)
            if is_balloon(pod, state.policy) and pod.node_name:
                state.creating.pop(pod.node_name, None)
                if pod.phase in ("Failed", "Succeeded"):
                    state.dead[pod.key] = pod  # its name is taken until it is removed
        case MachineDeploymentEvent(op="delete", machine_deployment=md):
            state.pools.pop(md.key, None)
        case MachineDeploymentEvent(machine_deployment=md):
            state.pools[md.key] = md
        case CapacityBufferEvent(op="delete", capacity_buffer=buffer):
            state.buffers.pop(buffer.key, None)
        case CapacityBufferEvent(capacity_buffer=buffer):
            state.buffers[buffer.key] = buffer
        case GangPlaced():
            _count(state, event, now)
        case ActionResult(action_id=action_id, outcome=outcome, fenced=False):
            # (fenced: a deposed leader's copy; this leader's own copy is judged apart)
            if outcome in ("failed", "stale"):
                for name, (made, _) in list(state.creating.items()):
                    if made == action_id:
                        del state.creating[name]
    return state, tuple(outputs)


def _count(state: State, placed: GangPlaced, now: float) -> None:
    """A multi-node gang's size in nodes, in the pool of its first node (once per gang)."""
    nodes = sorted({b.node for b in placed.bindings})
    if len(nodes) < 2 or placed.gang in state.seen:
        return
    first = state.view.nodes.get(nodes[0])
    pool = pool_of(state.pools, first.node) if first is not None else ""
    if first is not None and pool:
        state.seen.add(placed.gang)
        state.sizes.append((now, pool, first.team, len(nodes)))


def quantile(values: list[int], q: float) -> int:
    """Nearest-rank quantile (0 for none)."""
    if not values:
        return 0
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def buffered(state: State, pool: str, team: str = "") -> int:
    """Nodes CapacityBuffers ask to hold in ``pool``: those naming it (``baton.io/pool``)
    and those naming no pool; for ``team``, only those labelled ``baton.io/team: <team>``."""
    name = pool.partition("/")[2]
    return sum(
        b.replicas
        for b in state.buffers.values()
        if b.labels.get(keys.POOL, name) == name and (not team or b.labels.get(keys.TEAM) == team)
    )


def want(state: State, pool: str, now: float, team: str = "") -> tuple[int, str]:
    """Nodes to hold in ``pool`` (for ``team``, on its nodes, when teams are listed)."""
    p = state.policy
    if p.mode == "off":
        return 0, "off"
    if p.mode == "static":
        n, why = p.static_nodes, f"static {p.static_nodes}"
    else:
        sizes = [
            n for at, key, t, n in state.sizes
            if key == pool and (not team or t == team) and now - at <= p.window_s
        ]  # fmt: skip
        n = quantile(sizes, p.quantile)
        why = f"p{round(p.quantile * 100)} of {len(sizes)} gangs in {p.window_s:g}s: {n} nodes"
    if (declared := buffered(state, pool, team)) > n:
        n, why = declared, f"{why}; CapacityBuffers ask {declared}"
    if n > p.max_idle_nodes:
        why += f", capped at {p.max_idle_nodes}"
    return min(n, p.max_idle_nodes), why


def cycle(state: State, now: float) -> list[Output]:
    p = state.policy
    state.sizes = [s for s in state.sizes if now - s[0] <= p.window_s]
    members: dict[str, list[str]] = {key: [] for key in state.pools}
    for name, nv in state.view.nodes.items():
        key = pool_of(state.pools, nv.node)
        if key:
            members[key].append(name)
    outputs: list[Output] = []
    for key, pod in sorted(state.dead.items()):
        if key not in state.deleting:
            state.deleting[key] = now
            outputs.append(_delete(pod, now, why="a balloon that ended: its name is free again"))
    for key in sorted(state.pools):
        md = state.pools[key]
        if p.pools and md.name not in p.pools:
            continue
        names = sorted(members[key])
        if not names and not md.capacity.get(keys.GPU):
            continue
        if names and not any(state.view.nodes[n].node.allocatable.get(keys.GPU) for n in names):
            continue  # not a GPU pool
        if not p.teams:
            outputs += _pool(state, key, names, now)
            continue
        for team in p.teams:
            mine = [n for n in names if state.view.nodes[n].team == team]
            outputs += _pool(state, key, mine, now, team=team)
    return outputs


def _pool(state: State, key: str, names: list[str], now: float, team: str = "") -> list[Output]:
    p, view = state.policy, state.view
    wanted, why = want(state, key, now, team)
    held: list[Pod] = []
    empty: list[str] = []
    for name in names:
        pods = view.pods_on(name)
        balloons = [b for b in pods if is_balloon(b, p) and not b.terminating]
        if balloons:
            held.extend(balloons)
        elif not pods and name not in state.creating and view.nodes[name].usable:
            empty.append(name)
    creating = sum(1 for n in names if n in state.creating)
    outputs: list[Output] = []
    missing = wanted - len(held) - creating
    for name in empty[: max(0, missing)]:
        create = _create(state, key, name, now, team)
        state.creating[name] = (create.id, now)
        outputs.append(create)
    extra = len(held) + creating - wanted
    if extra > 0:
        going = [b for b in held if b.key not in state.deleting]
        for pod in sorted(going, key=lambda b: (-b.created_at, b.key))[:extra]:
            state.deleting[pod.key] = now
            outputs.append(_delete(pod, now, why=f"{key}: {why}"))
    deficit = max(0, missing - len(empty))
    numbers = (wanted, len(held), deficit)
    if state.published.get((key, team)) != numbers:
        state.published[(key, team)] = numbers
        outputs.append(Headroom(at=now, pool=key, want=wanted, held=len(held), deficit=deficit,
                                why=why, team=team))  # fmt: skip
    return outputs


def _delete(pod: Pod, now: float, *, why: str) -> DeletePod:
    return DeletePod(
        id=ids.make("balloon-delete", pod.uid), by=BY, at=now, priority="balloon", reason=why,
        namespace=pod.namespace, pod=pod.name, grace_seconds=0,
    )  # fmt: skip


def _create(state: State, pool: str, node: str, now: float, team: str = "") -> CreatePod:
    p = state.policy
    gpus = state.view.nodes[node].node.allocatable.get(keys.GPU, 0)
    labels = {keys.BALLOON: "true", keys.POOL: pool.partition("/")[2]}
    if team:
        labels[keys.TEAM] = team
    template = PodTemplate(
        namespace=p.namespace,
        name=f"balloon-{node}",
        labels=labels,
        # a team's node carries its NoSchedule taint: the placeholder holds it anyway
        tolerations=(Toleration(operator="Exists", effect="NoSchedule"),),
        annotations={keys.SAFE_TO_EVICT: "true"},
        image=p.image,
        requests={keys.GPU: gpus},
        priority_class_name=p.priority_class,
        priority=None if p.priority_class else PRIORITY,
        node_name=node,
        restricted=True,
    )
    return CreatePod(id=ids.make("balloon", node, now), by=BY, at=now, priority="balloon",
                     reason=f"hold {node} warm for {pool}", pod=template)  # fmt: skip
