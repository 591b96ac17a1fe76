"""The gang core: pure ``(state, event, now) -> (state, outputs)``.

Kubernetes object events and actuator results update the cluster picture; a
``Tick`` runs one placement cycle (Kueue's shape, see ``cycle``). No I/O, no clock:
replaying the same events gives the same decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from proto.actions import ActionResult, BindGang, Binding, CreatePod, EvictGang
from proto.k8s import NodeEvent, PodEvent, PodGroupEvent
from proto.placement import GangPlaced, GangRestarted, GangUnschedulable
from proto.ticks import GangPolicy
from services.gang import cluster as c
from services.gang import ordering, restarting
from services.gang.capacity import Index
from services.gang.fitting import Shape, group_by_shape
from services.gang.ids import digest
from services.gang.needs import identity, verdict
from services.gang.topology import Plan, Search, reserve, search

Policy = GangPolicy  # the core's knobs live in proto so the shell can record them


class Tick(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="gang.tick.v1"):
    """Run a placement cycle. Time comes in with the event."""

    at: float


Input = NodeEvent | PodEvent | PodGroupEvent | ActionResult | Tick
Output = BindGang | EvictGang | CreatePod | GangPlaced | GangUnschedulable | GangRestarted


@dataclass(slots=True)
class State:
    policy: Policy
    cluster: c.Cluster
    index: Index = field(default_factory=Index)  # eligible counts per shape, kept incrementally
    inflight: dict[str, str] = field(default_factory=dict)  # action id -> gang key


def initial(policy: Policy | None = None) -> State:
    policy = policy or Policy()
    return State(policy=policy, cluster=c.Cluster(levels=policy.topology_keys))


def step(state: State, event: Input, now: float) -> tuple[State, tuple[Output, ...]]:
    cl, recreate = state.cluster, state.policy.recreate_bare_pods
    outputs: list[Output] = []
    match event:
        case Tick():
            outputs = cycle(state, now)
        case NodeEvent(op="delete", node=node):
            c.delete_node(cl, node.name)
            outputs += restarting.check_node(cl, node.name, recreate=recreate, now=now)
        case NodeEvent(node=node):
            c.upsert_node(cl, node)
            outputs += restarting.check_node(cl, node.name, recreate=recreate, now=now)
        case PodEvent(op="delete", pod=pod):
            c.delete_pod(cl, pod)
        case PodEvent(pod=pod):
            c.upsert_pod(cl, pod)
            if pod.node_name and pod.node_name in cl.nodes:
                outputs += restarting.check_node(cl, pod.node_name, recreate=recreate, now=now)
        case PodGroupEvent(op="delete", pod_group=group):
            c.delete_group(cl, group)
        case PodGroupEvent(pod_group=group):
            c.upsert_group(cl, group)
        case ActionResult():
            on_result(state, event, now)
    return state, tuple(outputs)


def cycle(state: State, now: float) -> list[Output]:
    """One placement cycle; step 5 (forget) runs when a failed result arrives."""
    cl, policy = state.cluster, state.policy
    expire(state, now)
    # 1. snapshot: the gangs ready to place, highest priority then oldest first.
    queue = ordering.queue(cl, now=now, require_admission=policy.require_admission)
    free = state.index.free_totals(cl)
    head, reserved, young = "", frozenset[str](), False
    outputs: list[Output] = []
    for gang in queue:
        members = group_by_shape(ordering.members(cl, gang))
        required, preferred = _levels(gang)
        # 2. decide: all members in the narrowest, best-fitting domain, or none.
        found = None
        if _may_fit(members, free):
            found = search(
                cl, state.index, members, required=required, preferred=preferred, excluded=reserved
            )
        if found is None or found.plan is None:
            if not head and not young and not _timed_out(cl, gang, now):
                # the first gang that does not fit (and has not timed out) is the head
                nodes = reserve(cl, state.index, members, required=required, preferred=preferred)
                young = bool(nodes) and not _waited(state, gang, now)
                if nodes and not young:  # it reserves once it has waited reserve_after_s
                    head, reserved = gang.key, nodes
            outputs += _unschedulable(
                state, gang, members, found, head=head, reserved=reserved, now=now
            )
            continue
        # 3. assume: members count against their nodes from now on.
        action_id = assume(state, gang, found.plan, members, now)
        _take(free, members)
        # 4. commit: one idempotent all-or-nothing bind for the actuator.
        outputs += _commit(cl, gang, found.plan, action_id, now)
    return outputs


def _unschedulable(
    state: State,
    gang: c.Gang,
    members: dict[Shape, list[str]],
    found: Search | None,
    *,
    head: str,
    reserved: frozenset[str],
    now: float,
) -> list[Output]:
    """The verdict, published only when it changed. A gang rejected on totals alone
    is searched again for its verdict only every ``verdict_refresh_s``."""
    cl = state.cluster
    required, preferred = _levels(gang)
    blocked = head if head != gang.key else ""
    if found is None:
        if gang.verdict is not None and now - gang.checked_at < state.policy.verdict_refresh_s:
            return []
        excluded = reserved if blocked else frozenset[str]()
        found = search(
            cl, state.index, members, required=required, preferred=preferred, excluded=excluded
        )
    gang.checked_at = now
    event = verdict(
        cl,
        state.index,
        members,
        found,
        gang=gang.key,
        required=required,
        blocked_by=blocked,
        now=now,
    )
    if _timed_out(cl, gang, now):
        reason = f"timed out (scheduleTimeoutSeconds), holds no reservation: {event.reason}"
        event = msgspec.structs.replace(event, reason=reason)
    if identity(event) == gang.verdict:
        return []
    gang.verdict = identity(event)
    return [event]


def assume(
    state: State, gang: c.Gang, plan: Plan, members: dict[Shape, list[str]], now: float
) -> str:
    cl = state.cluster
    gang.attempt += 1
    gang.verdict = None
    uid = gang.group.uid if gang.group is not None else cl.pods[next(iter(plan.nodes))].uid
    uids = sorted(cl.pods[k].uid for k in plan.nodes)
    action_id = "bind-" + digest(uid, str(gang.attempt), *uids)
    gang.assumed = c.Assumption(action_id=action_id, nodes=dict(plan.nodes), at=now)
    for key, node in plan.nodes.items():
        c.account(cl, key, node, cl.pods[key].requests)
    state.inflight[action_id] = gang.key
    return action_id


def forget(state: State, gang: c.Gang, now: float) -> None:
    """Undo an assumption: unbound members stop counting; retry after a backoff."""
    cl, assumed = state.cluster, gang.assumed
    if assumed is None:
        return
    state.inflight.pop(assumed.action_id, None)
    for key in assumed.nodes:
        pod = cl.pods.get(key)
        if pod is None or not pod.node_name:
            c.account(cl, key, None, {})
    gang.assumed = None
    delay = min(state.policy.backoff_s * 2 ** max(gang.attempt - 1, 0), state.policy.backoff_max_s)
    gang.retry_after = now + delay


def on_result(state: State, result: ActionResult, now: float) -> None:
    key = state.inflight.get(result.action_id)
    gang = state.cluster.gangs.get(key) if key else None
    if gang is None or gang.assumed is None or gang.assumed.action_id != result.action_id:
        state.inflight.pop(result.action_id, None)
        return
    if result.outcome in ("failed", "rolled-back"):
        forget(state, gang, now)  # 5. forget on failure


def expire(state: State, now: float) -> None:
    """Forget placements whose pods never showed up bound (actuator down, dry run)."""
    timeout = state.policy.assume_timeout_s
    for gang in list(state.cluster.gangs.values()):
        if gang.assumed is not None and now - gang.assumed.at >= timeout:
            forget(state, gang, now)


def _commit(cl: c.Cluster, gang: c.Gang, plan: Plan, action_id: str, now: float) -> list[Output]:
    bindings = tuple(
        Binding(namespace=cl.pods[k].namespace, pod=cl.pods[k].name, uid=cl.pods[k].uid, node=n)
        for k, n in sorted(plan.nodes.items())
    )
    bind = BindGang(id=action_id, by="gang", at=now, gang=gang.key, bindings=bindings)
    placed = GangPlaced(
        gang=gang.key,
        at=now,
        action_id=action_id,
        bindings=bindings,
        level=plan.level,
        domain=plan.domain,
        domains=plan.domains,
        min_domains=plan.min_domains,
        attempt=gang.attempt,
    )
    return [bind, placed]


def _waited(state: State, gang: c.Gang, now: float) -> bool:
    return now - ordering.created(state.cluster, gang) >= state.policy.reserve_after_s


def _timed_out(cl: c.Cluster, gang: c.Gang, now: float) -> bool:
    """Past the PodGroup's ``scheduleTimeoutSeconds``: still placed when it fits, but it
    may no longer hold nodes back from others."""
    limit = gang.group.schedule_timeout_seconds if gang.group is not None else None
    return limit is not None and now - ordering.created(cl, gang) >= limit


def _levels(gang: c.Gang) -> tuple[str, str]:
    notes = gang.group.annotations if gang.group is not None else {}
    return notes.get(c.REQUIRED, ""), notes.get(c.PREFERRED, "")


def _may_fit(members: dict[Shape, list[str]], free: dict[str, int]) -> bool:
    need: dict[str, int] = {}
    for shape, keys in members.items():
        for res, amount in shape.requests:
            need[res] = need.get(res, 0) + amount * len(keys)
    return all(free.get(r, 0) >= n for r, n in need.items())


def _take(free: dict[str, int], members: dict[Shape, list[str]]) -> None:
    for shape, keys in members.items():
        for res, amount in shape.requests:
            free[res] = free.get(res, 0) - amount * len(keys)
