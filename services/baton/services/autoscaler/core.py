"""The autoscaler core: pure ``(state, event, now) -> (state, outputs)``.

Gangs' unschedulable verdicts (and balloons' deficits) become whole-gang scale-ups of
Cluster API MachineDeployments; idle nodes become one-machine scale-downs. A ``Tick``
runs one cycle:

1. scale-ups in flight: done when the pool has the Ready nodes it was asked for;
   reverted (and reported) when the cloud says its quota is reached or the
   provisioning timeout passes first; the pool then backs off;
2. each waiting gang, oldest verdict first: skipped when it waits on its team's quota
   or would fit once running work finished; otherwise one pool grows by the whole
   ``need`` (in one domain of ``need.within`` when set) or none does and the reason is
   published. Joins are paced: at most ``max_joining`` nodes are asked for in any
   ``join_interval_s``, cluster-wide, and at most that many are joining (asked, not
   Ready) at once; a gang that does not fit in what is left waits (a gang larger than
   the budget goes alone when nothing was asked in the interval and nothing joins);
3. scale-down: a node of an autoscaled pool that has had no pod for ``unneeded_s`` is
   removed, one machine at a time: marked ``cluster.x-k8s.io/delete-machine``, then its
   pool shrinks by one once the mark is applied; never below the pool's min size,
   never while the pool grows. Balloons hold nodes with pods, so they are never idle.

No I/O, no clock: replaying the same events gives the same decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from baton.libs.view import GangView, NodeView, View, admits, shape_of
from baton.libs.view.pools import pool_of
from baton.proto import ids, keys
from baton.proto.actions import ActionResult, Annotate, MarkNode, ScaleMachineDeployment
from baton.proto.admission import GangAdmitted, GangQueued, GangReleased
from baton.proto.autoscaler import (
    AutoscalerPolicy,
    NodeReplaced,
    ScaledDown,
    ScaledUp,
    ScaleRefused,
    ScaleReverted,
)
from baton.proto.balloon import Headroom
from baton.proto.health import Remediate
from baton.proto.k8s import (
    MachineDeployment,
    MachineDeploymentEvent,
    Node,
    NodeEvent,
    PodEvent,
    Resources,
)
from baton.proto.placement import GangPlaced, GangUnschedulable, Need
from baton.proto.runner import Tick

Policy = AutoscalerPolicy
Input = (
    NodeEvent
    | PodEvent
    | MachineDeploymentEvent
    | GangUnschedulable
    | GangPlaced
    | GangQueued
    | GangAdmitted
    | GangReleased
    | Headroom
    | Remediate
    | ActionResult
    | Tick
)
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


def initial(policy: Policy | None = None) -> State:
    policy = policy or Policy()
    return State(policy=policy, view=View(levels=policy.topology_keys, new_gang=GangView))


def wants_tick(state: State, now: float) -> bool:
    return bool(
        state.waiting
        or state.plans
        or state.deletion is not None
        or state.idle_since
        or state.replacing
    ) or any(_idle_candidate(state, name) for name in state.pool_of)


# -- events ---------------------------------------------------------------------


def step(state: State, event: Input, now: float) -> tuple[State, tuple[Output, ...]]:
    outputs: list[Output] = []
    match event:
        case Tick():
            outputs = cycle(state, now)
        case NodeEvent(op="delete", node=node):
            state.view.delete_node(node.name)
            _place(state, node, "")
            state.idle_since.pop(node.name, None)
            state.replacing.pop(node.name, None)
            d = state.deletion
            if d is not None and d.node == node.name:
                state.deletion = None
                if d.replace and d.scaled:
                    outputs = _grow_back(state, d, now)
        case NodeEvent(node=node):
            state.view.upsert_node(node)
            _place(state, node, pool_of(state.pools, node))
        case PodEvent(op="delete", pod=pod):
            state.view.delete_pod(pod)
        case PodEvent(pod=pod):
            state.view.upsert_pod(pod)
        case MachineDeploymentEvent(op="delete", machine_deployment=md):
            state.pools.pop(md.key, None)
            state.asked.pop(md.key, None)
            _assign_nodes(state)
        case MachineDeploymentEvent(machine_deployment=md):
            old = state.pools.get(md.key)
            state.pools[md.key] = md
            if state.asked.get(md.key) == md.replicas:
                del state.asked[md.key]
            if old is None or old.selector != md.selector:
                _assign_nodes(state)
        case GangUnschedulable(gang=gang):
            _verdict(state, event, now)
            outputs = _scale_up(state, now)  # at once: no wait for the next tick
        case GangPlaced(gang=gang):
            _forget_gang(state, gang)
        case GangQueued(gang=gang):
            state.queued.add(gang)
        case GangAdmitted(gang=gang) | GangReleased(gang=gang):
            state.queued.discard(gang)
        case Headroom(pool=pool, deficit=deficit, team=team):
            key = BALLOON_PREFIX + pool + (f"/{team}" if team else "")
            state.balloon_pools[key] = pool
            if deficit > 0:
                state.waiting[key] = Need(nodes=deficit)
                state.arrived.setdefault(key, event.at)
                outputs = _scale_up(state, now)
            elif key not in state.plans:
                _forget_gang(state, key)
        case Remediate(node=node, remedy="replace"):
            state.replacing.setdefault(node, now)
        case ActionResult():
            outputs = _on_result(state, event, now)
    return state, tuple(outputs)


def _verdict(state: State, event: GangUnschedulable, now: float) -> None:
    gang = event.gang
    state.arrived.setdefault(gang, now)
    state.waiting[gang] = event.need
    if event.fits_when_free:
        state.skip[gang] = "would fit once running work finishes: more nodes only start it sooner"
    elif event.need.nodes <= 0:
        state.skip[gang] = f"more nodes would not help: {event.reason}"
    else:
        state.skip.pop(gang, None)


def _forget_gang(state: State, gang: str) -> None:
    state.waiting.pop(gang, None)
    state.arrived.pop(gang, None)
    state.skip.pop(gang, None)
    state.refused.pop(gang, None)
    state.plans.pop(gang, None)
    state.balloon_pools.pop(gang, None)


def _on_result(state: State, result: ActionResult, now: float) -> list[Output]:
    failed = result.outcome in ("failed", "stale")
    plan = next((p for p in state.plans.values() if p.action_id == result.action_id), None)
    if plan is not None and failed:  # the pool was never asked: nothing to revert
        del state.plans[plan.gang]
        state.asked.pop(plan.pool, None)
        state.backoff[plan.pool] = now + state.policy.backoff_s
        why = f"the scale request for {plan.pool} failed: {result.error or result.outcome}"
        state.refused[plan.gang] = why
        return [ScaleRefused(gang=plan.gang, nodes=plan.nodes, reason=why, at=now)]
    d = state.deletion
    if d is None or result.action_id != d.mark_id:
        return []
    if result.outcome not in ("applied", "already"):
        state.deletion = None  # the mark did not hold: decide again later
        return []
    if d.scaled:
        return []
    md = state.pools.get(d.pool)
    if md is None:
        state.deletion = None
        return []
    d.scaled = True
    replicas = _replicas(state, md) - 1
    state.asked[d.pool] = replicas
    why = f"replace {d.node} (health)" if d.replace else f"remove idle node {d.node}"
    action = _scale(md, replicas, now, reason=why, key=("down", d.node))
    down = ScaledDown(node=d.node, pool=d.pool, replicas=replicas, idle_s=d.idle_s,
                      action_id=action.id, replace=d.replace, at=now)  # fmt: skip
    return [action, down]


def _grow_back(state: State, d: Deletion, now: float) -> list[Output]:
    """The node health asked to replace is gone: its pool gets its machine back."""
    md = state.pools.get(d.pool)
    if md is None:
        return []
    replicas = _replicas(state, md) + 1
    state.asked[d.pool] = replicas
    action = _scale(md, replicas, now, reason=f"replacement for {d.node}", key=("back", d.node))
    back = NodeReplaced(node=d.node, pool=d.pool, replicas=replicas, action_id=action.id, at=now)
    return [action, back]


# -- pools and nodes ------------------------------------------------------------


def _place(state: State, node: Node, pool: str) -> None:
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


def _assign_nodes(state: State) -> None:
    state.pool_of.clear()
    state.members.clear()
    state.ready.clear()
    state.samples.clear()
    for nv in state.view.nodes.values():
        _place(state, nv.node, pool_of(state.pools, nv.node))


def autoscaled(md: MachineDeployment) -> bool:
    """cluster-autoscaler's rule: a pool with both size annotations is autoscaled."""
    return md.min_size is not None and md.max_size is not None


def _replicas(state: State, md: MachineDeployment) -> int:
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


def _shape(state: State, md: MachineDeployment) -> Resources:
    """A node of the pool, else the scale-from-zero annotations."""
    sample = _sample(state, md.key)
    return state.view.nodes[sample].node.allocatable if sample is not None else md.capacity


def _welcome(state: State, md: MachineDeployment, gang: str) -> bool:
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


def _domain(state: State, md: MachineDeployment, level: str) -> str | None:
    """The pool's one domain at ``level`` (None: several, or unknown)."""
    if level in md.labels:
        return md.labels[level]
    nodes = state.view.nodes
    values = {nodes[n].node.labels.get(level) for n in state.members.get(md.key, ())}
    return values.pop() if len(values) == 1 else None


# -- the cycle ------------------------------------------------------------------


def cycle(state: State, now: float) -> list[Output]:
    outputs: list[Output] = []
    outputs += _follow_plans(state, now)
    outputs += _scale_up(state, now)
    outputs += _scale_down(state, now)
    return outputs


def _follow_plans(state: State, now: float) -> list[Output]:
    outputs: list[Output] = []
    for gang, plan in sorted(state.plans.items()):
        md = state.pools.get(plan.pool)
        if md is None:
            del state.plans[gang]
            continue
        have = ready(state, plan.pool)
        if have >= plan.target:
            del state.plans[gang]  # joined: the gang service places the gang now
            state.waiting.pop(gang, None)
            continue
        if md.reason == QUOTA_EXCEEDED and state.asked.get(plan.pool) is None:
            why = f"the cloud's quota for pool {plan.pool} is reached: {md.message}"
        elif now - plan.at >= state.policy.provisioning_timeout_s:
            why = (
                f"{plan.target - have} of {plan.nodes} nodes not Ready after "
                f"{state.policy.provisioning_timeout_s:g}s"
            )
        else:
            continue
        missing = min(plan.nodes, plan.target - have)
        replicas = max(md.min_size or 0, _replicas(state, md) - missing)
        state.asked[plan.pool] = replicas
        state.backoff[plan.pool] = now + state.policy.backoff_s
        del state.plans[gang]
        action = _scale(md, replicas, now, reason=f"revert for {gang}: {why}",
                        key=("revert", plan.action_id))  # fmt: skip
        outputs += [
            action,
            ScaleReverted(
                gang=gang,
                pool=plan.pool,
                nodes=missing,
                replicas=replicas,
                reason=why,
                action_id=action.id,
                at=now,
            ),
        ]
    return outputs


def joining(state: State) -> int:
    """Nodes asked for by scale-ups in flight and not Ready yet, cluster-wide."""
    short: dict[str, int] = {}
    for plan in state.plans.values():
        short[plan.pool] = max(short.get(plan.pool, 0), plan.target)
    return sum(max(0, t - ready(state, p)) for p, t in short.items())


def _scale_up(state: State, now: float) -> list[Output]:
    outputs: list[Output] = []
    p = state.policy
    state.asks = [(at, n) for at, n in state.asks if now - at < p.join_interval_s]
    budget = p.max_joining - max(joining(state), sum(n for _, n in state.asks))
    # real gangs first (oldest first), then balloons' deficits
    order = sorted(
        (g for g in state.waiting if g not in state.plans),
        key=lambda g: (g.startswith(BALLOON_PREFIX), state.arrived.get(g, now), g),
    )
    for gang in order:
        need = state.waiting[gang]
        if gang in state.queued:
            why = "waits on its team's quota, not on capacity"
        elif gang in state.skip:
            why = state.skip[gang]
        else:
            choice = choose(state, gang, need, now)
            if isinstance(choice, str):
                why = choice
            elif need.nodes > budget and budget < p.max_joining:
                why = (
                    f"paced: {p.max_joining - budget} nodes asked for or joining, at most "
                    f"{p.max_joining} a {p.join_interval_s:g}s interval"
                )
            else:
                key, domain = choice
                outputs += _grow(state, gang, need, key, domain, now)
                budget -= need.nodes
                continue
        outputs += _refused(state, gang, need, why, now)
    return outputs


def choose(state: State, gang: str, need: Need, now: float) -> tuple[str, str] | str:
    """The pool that can grow by the whole need (and its domain), or why none can.
    Among those that can, the smallest node that fits, then the name."""
    fits: list[tuple[int, int, str, str]] = []
    why: list[str] = []
    for key in sorted(state.pools):
        md = state.pools[key]
        shape = _shape(state, md)
        if gang.startswith(BALLOON_PREFIX):
            if key != state.balloon_pools.get(gang):
                continue
        elif not shape or any(shape.get(r, 0) < n for r, n in need.shape.items()):
            continue  # not the shape the gang asks for: not worth naming
        elif not _welcome(state, md, gang):
            why.append(f"{key}: its nodes do not take the gang's pods (selector, affinity, taints)")
            continue
        if not autoscaled(md):
            why.append(f"{key}: not autoscaled (no min/max size annotations)")
            continue
        domain = ""
        if need.within:
            found = _domain(state, md, need.within)
            if found is None:
                why.append(f"{key}: spans several {need.within} domains, cannot grow within one")
                continue
            domain = found
        replicas = _replicas(state, md)
        if replicas + need.nodes > (md.max_size or 0):
            why.append(f"{key}: max size {md.max_size} (at {replicas}, needs {need.nodes} more)")
            continue
        if md.reason == QUOTA_EXCEEDED:
            why.append(f"{key}: cloud quota reached ({md.message or md.reason})")
            continue
        if state.backoff.get(key, 0.0) > now:
            why.append(f"{key}: backing off after a failed scale-up until {state.backoff[key]:.0f}")
            continue
        fits.append((shape.get(keys.GPU, 0), shape.get("cpu", 0), key, domain))
    if fits:
        _, _, key, domain = min(fits)
        return key, domain
    if not why:
        asked = ", ".join(f"{r} {n}" for r, n in sorted(need.shape.items()))
        return f"no pool has nodes of the shape needed ({asked or 'unknown'})"
    count = f"{need.nodes} node{'' if need.nodes == 1 else 's'}"
    return f"no pool can grow by {count}: " + "; ".join(why)


def _grow(
    state: State,
    gang: str,
    need: Need,
    key: str,
    domain: str,
    now: float,
) -> list[Output]:
    md = state.pools[key]
    replicas = _replicas(state, md) + need.nodes
    others = sum(p.nodes for p in state.plans.values() if p.pool == key)
    target = ready(state, key) + others + need.nodes
    state.asked[key] = replicas
    where = f" in {need.within}={domain}" if need.within else ""
    action = _scale(md, replicas, now, reason=f"{need.nodes} nodes for {gang}{where}",
                    key=("up", gang, replicas, now))  # fmt: skip
    state.asks.append((now, need.nodes))
    state.plans[gang] = Plan(gang=gang, pool=key, nodes=need.nodes, target=target,
                             replicas=replicas, at=now, action_id=action.id)  # fmt: skip
    state.refused.pop(gang, None)
    up = ScaledUp(gang=gang, pool=key, nodes=need.nodes, replicas=replicas,
                  action_id=action.id, within=need.within, domain=domain, at=now)  # fmt: skip
    return [action, up]


def _refused(state: State, gang: str, need: Need, why: str, now: float) -> list[Output]:
    if state.refused.get(gang) == why:
        return []
    state.refused[gang] = why
    return [ScaleRefused(gang=gang, nodes=need.nodes, reason=why, at=now)]


def _scale(
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


# -- scale-down -----------------------------------------------------------------


def _idle_candidate(state: State, name: str) -> bool:
    """A Ready node with no pod on it (DaemonSet and static pods aside), of an autoscaled
    pool above its min size."""
    if state.policy.unneeded_s <= 0:
        return False
    md = state.pools.get(state.pool_of.get(name, ""))
    nv = state.view.nodes.get(name)
    return (
        md is not None
        and autoscaled(md)
        and _replicas(state, md) > (md.min_size or 0)
        and nv is not None
        and nv.node.ready
        and all(_daemon(state, k) for k in state.view.on_node.get(name, ()))
    )


def _daemon(state: State, pod: str) -> bool:
    found = state.view.pods.get(pod)
    return found is not None and found.daemon


def _scale_down(state: State, now: float) -> list[Output]:
    for name in list(state.idle_since):
        if not _idle_candidate(state, name):
            del state.idle_since[name]
    for name in state.pool_of:
        if name not in state.idle_since and _idle_candidate(state, name):
            state.idle_since[name] = now
    d = state.deletion
    if d is not None:
        if now - d.at < state.policy.deletion_timeout_s:
            return []
        state.deletion = None  # the machine never went: try another (or it) again
    for name in sorted(state.replacing, key=lambda n: (state.replacing[n], n)):
        key = state.pool_of.get(name, "")
        if key not in state.pools:
            continue  # not a node of a pool we know: a fixer's job
        return _mark(state, name, key, now, idle=0.0, replace=True)
    growing = {p.pool for p in state.plans.values()}
    due = sorted(
        (since, name)
        for name, since in state.idle_since.items()
        if now - since >= state.policy.unneeded_s
    )
    for since, name in due:
        key = state.pool_of[name]
        md = state.pools[key]
        if key in growing or key in state.asked:
            continue
        if _replicas(state, md) - 1 < (md.min_size or 0):
            continue
        return _mark(state, name, key, now, idle=now - since)
    return []


def _mark(
    state: State, name: str, key: str, now: float, *, idle: float, replace: bool = False
) -> list[Output]:
    why = "health asked to replace it" if replace else f"idle for {idle:.0f}s"
    mark = MarkNode(
        id=ids.make("delete-machine", name, now),
        by=BY,
        at=now,
        priority="health" if replace else "scaling",
        reason=f"{why}: its machine goes first when {key} shrinks",
        node=name,
        annotations={keys.DELETE_MACHINE: "true"},
    )
    state.deletion = Deletion(node=name, pool=key, at=now, mark_id=mark.id, idle_s=idle,
                              replace=replace)  # fmt: skip
    state.replacing.pop(name, None)
    machine = state.view.nodes[name].node.annotations.get(keys.MACHINE, "")
    if not machine or not state.policy.mark_machines:
        return [mark]
    on_machine = Annotate(
        id=ids.make("delete-machine", machine, now), by=BY, at=now, priority=mark.priority,
        reason=mark.reason, kind="Machine", namespace=state.pools[key].namespace, name=machine,
        annotations={keys.DELETE_MACHINE: "true"}, api="cluster.x-k8s.io/v1beta1",
    )  # fmt: skip
    return [on_machine, mark]
