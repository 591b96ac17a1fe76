"""The autoscaler core: pure ``(state, event, now) -> (state, outputs)``.

Gangs' unschedulable verdicts (and balloons' deficits) become whole-gang scale-ups of
Cluster API MachineDeployments; idle nodes become one-machine scale-downs. This module
takes the events; a ``Tick`` runs one cycle, steps 1 and 2 in ``growing``, step 3 in
``shrinking`` (both decide from ``state``):

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

from baton.libs.view import GangView, View
from baton.libs.view.pools import pool_of
from baton.proto.actions import ActionResult
from baton.proto.admission import GangAdmitted, GangQueued, GangReleased
from baton.proto.balloon import Headroom
from baton.proto.health import Remediate
from baton.proto.k8s import MachineDeploymentEvent, NodeEvent, PodEvent
from baton.proto.placement import GangPlaced, GangUnschedulable, Need
from baton.proto.runner import Tick
from baton.services.autoscaler.core import growing, shrinking
from baton.services.autoscaler.core.growing import joining
from baton.services.autoscaler.core.shrinking import idle_candidate
from baton.services.autoscaler.core.state import (
    BALLOON_PREFIX,
    Output,
    Policy,
    State,
    assign_nodes,
    place,
    ready,
)

__all__ = ["Input", "Output", "Policy", "State", "initial", "joining", "ready", "step",
           "wants_tick"]  # fmt: skip

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
    ) or any(idle_candidate(state, name) for name in state.pool_of)


# -- events ---------------------------------------------------------------------


def step(state: State, event: Input, now: float) -> tuple[State, tuple[Output, ...]]:
    outputs: list[Output] = []
    match event:
        case Tick():
            outputs = cycle(state, now)
        case NodeEvent(op="delete", node=node):
            state.view.delete_node(node.name)
            place(state, node, "")
            state.idle_since.pop(node.name, None)
            state.replacing.pop(node.name, None)
            d = state.deletion
            if d is not None and d.node == node.name:
                state.deletion = None
                if d.replace and d.scaled:
                    outputs = shrinking.grow_back(state, d, now)
        case NodeEvent(node=node):
            state.view.upsert_node(node)
            place(state, node, pool_of(state.pools, node))
        case PodEvent(op="delete", pod=pod):
            state.view.delete_pod(pod)
        case PodEvent(pod=pod):
            state.view.upsert_pod(pod)
        case MachineDeploymentEvent(op="delete", machine_deployment=md):
            state.pools.pop(md.key, None)
            state.asked.pop(md.key, None)
            assign_nodes(state)
        case MachineDeploymentEvent(machine_deployment=md):
            old = state.pools.get(md.key)
            state.pools[md.key] = md
            if state.asked.get(md.key) == md.replicas:
                del state.asked[md.key]
            if old is None or old.selector != md.selector:
                assign_nodes(state)
        case GangUnschedulable(gang=gang):
            _verdict(state, event, now)
            outputs = growing.scale_up(state, now)  # at once: no wait for the next tick
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
                outputs = growing.scale_up(state, now)
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
    refused = growing.failed(state, result, now)
    return refused if refused is not None else shrinking.marked(state, result, now)


def cycle(state: State, now: float) -> list[Output]:
    outputs: list[Output] = []
    outputs += growing.follow_plans(state, now)
    outputs += growing.scale_up(state, now)
    outputs += shrinking.scale_down(state, now)
    return outputs
