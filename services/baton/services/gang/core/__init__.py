"""The gang core: pure ``(state, event, now) -> (state, outputs)``.

Kubernetes object events and actuator results update the cluster picture; a
``Tick`` runs one placement cycle (Kueue's shape, see ``cycle``). No I/O, no clock:
replaying the same events gives the same decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from baton.libs.view import Shape, gang_key, is_preemptible
from baton.proto import ids
from baton.proto.actions import (
    MAX_ACTION_BYTES,
    ActionResult,
    BindGang,
    Binding,
    EvictGang,
    RecreatePod,
)
from baton.proto.k8s import (
    GPU,
    MAX_GANG_MEMBERS,
    DeviceClassEvent,
    NodeEvent,
    Pod,
    PodEvent,
    PodGroupEvent,
    ResourceClaimEvent,
    ResourceSliceEvent,
)
from baton.proto.placement import GangPlaced, GangPolicy, GangRestarted, GangUnschedulable, Need
from baton.proto.runner import Tick
from baton.services.gang.core import claims, estimates, growing, ordering, preempting, restarting
from baton.services.gang.core.asks import Refused, ask, place, required_level
from baton.services.gang.core.claims import Claims
from baton.services.gang.core.gangs import (
    Ask,
    Assumption,
    Cluster,
    Gang,
    Kind,
    delete_pod,
    new_cluster,
)
from baton.services.gang.core.needs import (
    beyond_quorum,
    identity,
    shortfall,
    too_large,
    unknown_level,
)
from baton.services.gang.core.topology import Plan, Search, reserve

Policy = GangPolicy  # the core's knobs live in proto so the shell can record them


Input = (
    NodeEvent | PodEvent | PodGroupEvent | ActionResult | Tick
    | ResourceSliceEvent | DeviceClassEvent | ResourceClaimEvent
)  # fmt: skip
Output = BindGang | EvictGang | RecreatePod | GangPlaced | GangUnschedulable | GangRestarted


@dataclass(slots=True)
class State:
    policy: Policy
    cluster: Cluster  # the shared view (``libs.view``) with the gang core's gangs
    inflight: dict[str, str] = field(default_factory=dict)  # action id -> gang key
    # gang key -> (nodes it will take once the gangs preempted for it are gone, since)
    nominated: dict[str, tuple[frozenset[str], float]] = field(default_factory=dict)
    moved: tuple[float, ...] = ()  # when gangs were moved to defragment (the last hour)
    runs: estimates.Runs = field(default_factory=estimates.Runs)  # learned run times
    kinds: dict[Kind, Kind] = field(default_factory=dict)  # one object per kind (``asks.ask``)
    claims: Claims = field(default_factory=Claims)  # DRA: devices, claims, what they add
    fresh: bool = False  # a gang no cycle has judged became ready since the last cycle


def initial(policy: Policy | None = None) -> State:
    policy = policy or Policy()
    return State(policy=policy, cluster=new_cluster(policy.topology_keys))


def wants_tick(state: State, now: float) -> bool:
    """A cycle can change something: a gang waits to be placed (or members of a running
    one), or a placement in flight may expire. An idle cluster gets no ticks (and no
    tick records)."""
    return bool(state.inflight) or any(
        (g.pending and not g.restarting) or ordering.short(state.cluster, g)
        for g in state.cluster.gangs.values()
    )


def fresh_work(state: State) -> bool:
    """The runner's ``Timer.soon``: tick now, not at the next interval (a gang admitted
    a moment ago is placed within ~0.05 s, not ~0.25 s later on average)."""
    return state.fresh


def step(state: State, event: Input, now: float) -> tuple[State, tuple[Output, ...]]:
    cl, recreate = state.cluster, state.policy.recreate_bare_pods
    outputs: list[Output] = []
    match event:
        case Tick():
            outputs = cycle(state, now)
        case NodeEvent(op="delete", node=node):
            cl.delete_node(node.name)
            outputs += restarting.check_node(cl, node.name, recreate=recreate, now=now)
        case NodeEvent(node=node):
            cl.upsert_node(state.claims.node(node))
            outputs += restarting.check_node(cl, node.name, recreate=recreate, now=now)
        case PodEvent(op="delete", pod=pod):
            state.claims.forget_pod(cl, pod)
            ending = _running(cl, cl.pods.get(pod.key, pod))
            _changed(cl, cl.pods.get(pod.key, pod))
            delete_pod(cl, pod)
            _ended(state, ending, now)
        case PodEvent(pod=pod):
            pod = state.claims.pod(pod)
            ending = _running(cl, cl.pods.get(pod.key, pod))
            _changed(cl, cl.pods.get(pod.key, pod))  # the gang it was in, if another
            cl.upsert_pod(pod)
            _changed(cl, pod)
            _ended(state, ending, now)
            _judge_soon(state, cl.gangs.get(gang_key(pod)), now)
            if pod.node_name and pod.node_name in cl.nodes:
                outputs += restarting.check_node(cl, pod.node_name, recreate=recreate, now=now)
        case PodGroupEvent(op="delete", pod_group=group):
            cl.delete_group(group)
            if (gang := cl.gangs.get(group.key)) is not None:
                gang.changed()
        case PodGroupEvent(pod_group=group):
            cl.upsert_group(group)
            cl.gangs[group.key].changed()
            _judge_soon(state, cl.gangs[group.key], now)
        case ActionResult():
            on_result(state, event, now)
        case ResourceSliceEvent() | DeviceClassEvent() | ResourceClaimEvent():
            for pod in state.claims.on_event(cl, event):
                _changed(cl, pod)
            if isinstance(event, DeviceClassEvent):  # rare: any claim may read it
                for gang in cl.gangs.values():
                    gang.claims_waiting = None
    return state, tuple(outputs)


def _running(cl: Cluster, pod: Pod) -> Gang | None:
    """The gang of ``pod`` if it runs and no restart is taking it off (its end would be
    a completed run)."""
    gang = cl.gangs.get(gang_key(pod))
    return gang if gang is not None and gang.bound and not gang.restarting else None


def _ended(state: State, gang: Gang | None, now: float) -> None:
    """The event took the last bound member of a running gang: learn its run time."""
    if gang is not None and not gang.bound and not gang.restarting:
        estimates.finished(state.cluster, gang, state.runs, state.policy, now)
        gang.ran_gpus, gang.backfilled = -1, False


def _changed(cl: Cluster, pod: Pod) -> None:
    """A pod of the gang changed: its place in the queue is computed again when asked."""
    gang = cl.gangs.get(gang_key(pod))
    if gang is not None:
        gang.changed()


def _judge_soon(state: State, gang: Gang | None, now: float) -> None:
    """A gang no cycle has judged yet (no verdict) that the event left ready: new work."""
    if gang is None or state.fresh or gang.verdict is not None or gang.bound:
        return
    policy = state.policy
    state.fresh = ordering.is_ready(state.cluster, gang, now=now,
                                    require_admission=policy.require_admission)  # fmt: skip


def cycle(state: State, now: float) -> list[Output]:
    """One placement cycle; step 5 (forget) runs when a failed result arrives."""
    cl, policy = state.cluster, state.policy
    state.fresh = False
    expire(state, now)
    # 1. snapshot: the gangs ready to place, highest priority then oldest first
    # (one-pod gangs shortest expected work first with ``shortest_first_s``: ``ordering.key``).
    queue = ordering.queue(
        cl, now=now, require_admission=policy.require_admission, policy=policy, runs=state.runs
    )
    free = cl.free_totals()
    head, reserved, young, tried = "", frozenset[str](), False, False
    shadow: float | None = None  # when the head is expected to start (computed when asked)
    head_need: tuple[Shape, int] | None = None
    outputs: list[Output] = list(_set_aside(state, now))
    refused = Refused()  # this cycle's searches that found no plan (``asks``)
    later: list[Later] = []  # members beyond a quorum: after every quorum (``growing``)
    for gang in queue:
        if head and policy.strict_fifo:
            break  # strict FIFO: nothing passes the head
        if gang.bound:  # it runs: members beyond its quorum, or joining it, come later
            later.append((gang, None, {}, required_level(gang)))
            continue
        if head and free.get(GPU, 0) <= 0 and _settled(state, gang, now, tried=tried):
            continue  # no GPU is free: it cannot fit, and it has nothing new to say
        held = _held(state, gang, reserved, now)
        asked = ask(cl, gang, state.kinds)
        members, required, preferred = asked.members, asked.required, asked.preferred
        if (size := sum(map(len, members.values()))) > MAX_GANG_MEMBERS:  # the actuator's limit
            outputs += _published(gang, too_large(gang.key, size, now), now=now)
            continue
        if waiting := _claims_waiting(state, gang, asked):
            told = claims.waiting(gang.key, sum(map(len, members.values())), waiting, now=now)
            outputs += _published(gang, told, now=now)
            continue
        if required and required not in cl.levels:  # a level the search cannot honour
            unknown = unknown_level(gang.key, members, required, cl.levels, now)
            outputs += _published(gang, unknown, now=now)
            continue
        # 2. decide: all members in the narrowest, best-fitting domain, or none.
        found, backfill = None, False
        if refused.allows(asked, free):
            # a gang with members beyond its quorum starts where all of them fit, if any
            whole = growing.where_all_fit(cl, asked, excluded=held) if asked.extras else None
            found = (
                whole
                or _partitioned(state, asked, held)
                or refused.search(cl, asked, excluded=held)
            )
            if found.plan is None and reserved and head_need is not None:
                # EASY: on the head's reserved nodes too, if it ends before the head starts
                if shadow is None:
                    shadow = estimates.shadow(cl, *head_need, reserved, now)
                if _ends_by(state, gang, now, shadow):
                    easy = refused.search(cl, asked, excluded=_held(state, gang, frozenset(), now))
                    if easy.plan is not None:
                        found, backfill = easy, True
        if found is None or found.plan is None:
            if not tried and _may_make_room(state, gang, now):
                tried = True  # one try a cycle: each costs searches
                room = preempting.make_room(
                    cl, gang, asked, excluded=held, limits=_limits(state), now=now
                )
                gang.room_after = now + policy.verdict_refresh_s
                refused = Refused()  # what making room looked at is not trusted further
                if room is not None:
                    outputs += _take_off(state, gang, room, now)
            if not head and not young and not _timed_out(cl, gang, now):
                # the first gang that does not fit (and has not timed out) is the head
                nodes = reserve(cl, members, required=required, preferred=preferred)
                young = bool(nodes) and not _waited(state, gang, now)
                if nodes and not young:  # it reserves once it has waited reserve_after_s
                    head, reserved = gang.key, nodes
                    if policy.backfill_estimates and not policy.strict_fifo:
                        head_need = (next(iter(members)), sum(map(len, members.values())))
                elif nodes and policy.strict_fifo:
                    head = gang.key
            outputs += _unschedulable(
                state, gang, asked, found, head=head, reserved=reserved, now=now, refused=refused
            )
            continue
        # 3. assume: members count against their nodes from now on.
        action_id = assume(state, gang, found.plan, members, now)
        refused = Refused()  # capacity was taken: verdicts drawn before would be stale
        gang.backfilled = backfill
        state.nominated.pop(gang.key, None)
        _take(free, members)
        if asked.extras:  # committed with those of its other members that fit, below
            later.append((gang, found.plan, asked.extras, required))
            continue
        # 4. commit: one idempotent all-or-nothing bind for the actuator.
        # The bind may start only in the first half of the time the placement is assumed:
        # one started later could still be binding when it is forgotten and re-decided.
        outputs += _commit(
            state, gang, found.plan, action_id, now, expires_after=policy.assume_timeout_s / 2
        )
    return outputs + _beyond_quorum(state, later, reserved, now)


# a gang, the plan of the quorum it started with this cycle (None: it runs), its members
# beyond that quorum, its required level
Later = tuple[Gang, Plan | None, dict[Shape, list[str]], str]


def _beyond_quorum(
    state: State, later: list[Later], reserved: frozenset[str], now: float
) -> list[Output]:
    """Members beyond the quorum of the gangs started this cycle (in the same bind) and
    pending members of running gangs (in a bind of their own), once every waiting
    gang's quorum had its turn: as many as fit, outside nodes held for other gangs. A
    running gang's members that do not fit are told why."""
    cl, outputs = state.cluster, list[Output]()
    expires = state.policy.assume_timeout_s
    for gang, started, extras, required in later:
        held = _held(state, gang, reserved, now)
        if started is None:
            extras, nodes = growing.pending(cl, gang), growing.running_on(cl, gang)
        else:
            nodes = set(started.nodes.values())
        placed = growing.fill(cl, extras, nodes=nodes, required=required, excluded=held)
        if started is not None:
            plan = growing.widened(cl, started, placed) if placed else started
            action_id = _widen(state, gang, placed) if placed else _action(gang)
            outputs += _commit(state, gang, plan, action_id, now, expires_after=expires)
            continue
        if placed:
            plan = growing.joining(cl, placed, required=required)
            action_id = assume(state, gang, plan, {}, now, joining=True)
            outputs += _commit(state, gang, plan, action_id, now, expires_after=expires)
        left = {s: [k for k in names if k not in placed] for s, names in extras.items()}
        left = {s: names for s, names in left.items() if names}
        if left:
            told = beyond_quorum(
                cl, left, gang=gang.key, running=len(gang.bound),
                quorum=ordering.min_member(cl, gang), required=required, now=now,
            )  # fmt: skip
            outputs += _published(gang, told, now=now, every=state.policy.verdict_refresh_s)
    return outputs


def _action(gang: Gang) -> str:
    assert gang.assumed is not None
    return gang.assumed.action_id


def _widen(state: State, gang: Gang, placed: dict[str, str]) -> str:
    """Members placed beside the quorum assumed this cycle join its placement (one bind,
    a new action id naming every member)."""
    cl, assumed = state.cluster, gang.assumed
    assert assumed is not None
    for key, node in placed.items():
        cl.account(key, node, cl.pods[key].requests)
    assumed.nodes.update(placed)
    state.inflight.pop(assumed.action_id, None)
    assumed.action_id = _bind_id(cl, gang, assumed.nodes)
    state.inflight[assumed.action_id] = gang.key
    if gang.ran_gpus >= 0:
        gang.ran_gpus += sum(cl.pods[k].requests.get(GPU, 0) for k in placed)
    return assumed.action_id


def _ends_by(state: State, gang: Gang, now: float, shadow: float) -> bool:
    """EASY: the gang is expected to end by the head's shadow time (no estimate: no)."""
    if shadow <= now:
        return False
    expected = estimates.expected(state.cluster, gang, state.runs, state.policy)
    return expected is not None and now + expected <= shadow


def _settled(state: State, gang: Gang, now: float, *, tried: bool) -> bool:
    """A GPU gang whose verdict stands and for whom no room is to be made this cycle:
    with no GPU free it is skipped before its members are grouped (a long queue)."""
    if gang.verdict is None or now - gang.checked_at >= state.policy.verdict_refresh_s:
        return False
    if not tried and _may_make_room(state, gang, now):
        return False
    if gang.asks_gpus is None:
        pods = state.cluster.pods
        gang.asks_gpus = any(pods[k].requests.get(GPU, 0) > 0 for k in gang.pending if k in pods)
    return gang.asks_gpus


def _partitioned(state: State, asked: Ask, held: frozenset[str]) -> Search | None:
    """Where a gang asking MIG devices fits among nodes already partitioned, if it does."""
    only = state.claims.partitioned_only(state.cluster, asked.members, held)
    if only is None:
        return None
    found = place(state.cluster, asked, excluded=only)
    return found if found.plan is not None else None


def _held(state: State, gang: Gang, reserved: frozenset[str], now: float) -> frozenset[str]:
    """Nodes ``gang`` may not use: the head's reservation, nodes nominated for others,
    nodes its members' claims could not be allocated on lately, and, when its members'
    claims are allocated already (shared with pods placed before), every other node."""
    misfits = state.claims.kept_from(gang.key, now) if state.claims.misfits else frozenset()
    if state.claims.devices.claims:
        if gang.pins is None:
            gang.pins = state.claims.pinned(state.cluster, gang.pending)
        if gang.pins:
            misfits = misfits | (state.cluster.nodes.keys() - gang.pins)
    if not state.nominated:
        return reserved | misfits
    others = [nodes for key, (nodes, _) in state.nominated.items() if key != gang.key]
    return reserved.union(misfits, *others)


def _may_make_room(state: State, gang: Gang, now: float) -> bool:
    """Not while gangs taken off for it are still leaving, not within its timeout's
    end, and not more often than ``verdict_refresh_s``."""
    return (
        gang.key not in state.nominated
        and now >= gang.room_after
        and not _timed_out(state.cluster, gang, now)
    )


def _limits(state: State) -> preempting.Limits:
    policy = state.policy
    return preempting.Limits(
        preemption=policy.preemption, min_run_s=policy.preempt_min_run_s,
        moves_per_hour=policy.defrag_moves_per_hour, moved=state.moved,
        loans=policy.backfill_estimates and policy.backfill_loans,
    )  # fmt: skip


def _take_off(state: State, gang: Gang, room: preempting.Room, now: float) -> list[Output]:
    """Evict the victims whole (their pods' grace: ``preempt_grace_s``) and nominate the
    nodes the waiting gang will take."""
    cl, policy = state.cluster, state.policy
    outputs: list[Output] = []
    for victim in room.victims:
        outputs += restarting.restart(
            cl, victim, node="", reason=room.why, recreate=policy.recreate_bare_pods, now=now,
            grace=policy.preempt_grace_s,
        )  # fmt: skip
    if room.why.startswith("moved"):
        recent = (t for t in state.moved if now - t < preempting.HOUR)
        state.moved = (*recent, *(now for _ in room.victims))
    state.nominated[gang.key] = (room.nodes, now)
    return outputs


def _set_aside(state: State, now: float) -> list[Output]:
    """PodGroups still short of member pods past their ``scheduleTimeoutSeconds``: never
    a head, told why once (a typo in the pod-group label, pods the webhook refused)."""
    cl, outputs = state.cluster, list[Output]()
    for gang in cl.gangs.values():
        if not ordering.short(cl, gang) or not _timed_out(cl, gang, now):
            continue
        group = gang.group
        assert group is not None
        have, need = len(gang.pending) + len(gang.bound), ordering.min_member(cl, gang)
        event = GangUnschedulable(
            gang=gang.key,
            at=now,
            reason=(
                f"set aside: {have} of {need} member pods after "
                f"{group.schedule_timeout_seconds} s (scheduleTimeoutSeconds); check the "
                "pods' pod-group label and the namespace's Events for pods refused"
            ),
            need=Need(nodes=0),
            members=need,
        )
        outputs += _published(gang, event, now=now)
    return outputs


def _unschedulable(
    state: State,
    gang: Gang,
    asked: Ask,
    found: Search | None,
    *,
    head: str,
    reserved: frozenset[str],
    now: float,
    refused: Refused,
) -> list[Output]:
    """The verdict, published only when it changed. A gang rejected on totals alone
    is searched again for its verdict only every ``verdict_refresh_s``."""
    cl = state.cluster
    blocked = head if head != gang.key else ""
    if found is None:
        if gang.verdict is not None and now - gang.checked_at < state.policy.verdict_refresh_s:
            return []
        found = refused.search(cl, asked, excluded=reserved if blocked else frozenset())
    gang.checked_at = now
    event, seen = refused.verdict(cl, gang.key, asked, found, blocked_by=blocked, now=now)
    if asked.extras:  # counted for its quorum: say so
        quorum = sum(map(len, asked.members.values()))
        everyone = quorum + sum(map(len, asked.extras.values()))
        reason = f"{event.reason} (its quorum: minMember {quorum} of its {everyone} members)"
        event = msgspec.structs.replace(event, reason=reason)
        seen = identity(event)
    timed_out = _timed_out(cl, gang, now)
    every = state.policy.verdict_refresh_s
    if not asked.floor and not timed_out:
        return _published(gang, event, seen, now=now, every=every)
    if gap := _min_resources_gap(cl, asked):
        reason = f"short of the PodGroup's minResources ({_quantities(gap)} more free); "
        event = msgspec.structs.replace(event, reason=reason + event.reason)
    if timed_out:
        reason = f"timed out (scheduleTimeoutSeconds), holds no reservation: {event.reason}"
        event = msgspec.structs.replace(event, reason=reason)
    return _published(gang, event, identity(event), now=now, every=every, timed_out=timed_out)


VERDICT_MAX_S = 300.0  # kube-scheduler's podMaxInUnschedulablePodsDuration: 5 minutes


def _published(
    gang: Gang, event: GangUnschedulable, seen: tuple[object, ...] | None = None, *,
    now: float, every: float = 0.0, timed_out: bool = False,
) -> list[Output]:  # fmt: skip
    """A verdict (its ``identity``: ``seen``) is published when it changes, for ``gang``.

    ``every`` > 0 (a verdict about room): one that says the same in kind as the last
    (whether it fits when work ends, within which domain, timed out or not) and differs
    only in numbers or in the gang ahead comes at most ``every`` seconds after the last,
    that gap doubling up to ``VERDICT_MAX_S`` while the gang waits. Those numbers move
    with every bind: at 7,500 nodes and 8,000 gangs waiting, publishing each move was
    ~900 verdicts a second, and as many status writes. A new kind is said at once."""
    seen = identity(event) if seen is None else seen
    if seen == gang.verdict:
        return []
    told = (event.fits_when_free, event.need.within, timed_out)
    if every and gang.verdict is not None and told == gang.told:
        if now < gang.told_at + gang.told_gap:
            return []  # said again once the gap is over, with the numbers of then
        gang.told_gap = min(max(2 * gang.told_gap, every), VERDICT_MAX_S)
    else:
        gang.told_gap = every
    gang.verdict, gang.told, gang.told_at = seen, told, now
    return [event if event.gang == gang.key else msgspec.structs.replace(event, gang=gang.key)]


def assume(
    state: State,
    gang: Gang,
    plan: Plan,
    members: dict[Shape, list[str]],
    now: float,
    *,
    joining: bool = False,
) -> str:
    """Members count against their nodes from now on. ``joining``: members placed beside
    a running gang (its start and what EASY learned of it stay)."""
    cl = state.cluster
    gang.attempt += 1
    gang.verdict = None
    action_id = _bind_id(cl, gang, plan.nodes)
    gang.assumed = Assumption(action_id=action_id, nodes=dict(plan.nodes), at=now)
    if not joining:
        gang.started = now
    if joining:
        if gang.ran_gpus >= 0:
            gang.ran_gpus += sum(cl.pods[k].requests.get(GPU, 0) for k in plan.nodes)
    elif state.policy.backfill_estimates:  # what EASY needs: its expected end, its runs
        gang.estimate = estimates.expected(cl, gang, state.runs, state.policy)
        gang.ran_gpus = sum(cl.pods[k].requests.get(GPU, 0) for k in plan.nodes)
        gang.ran_team = estimates.team(cl, gang)
    for key, node in plan.nodes.items():
        cl.account(key, node, cl.pods[key].requests)
    state.inflight[action_id] = gang.key
    return action_id


def _bind_id(cl: Cluster, gang: Gang, nodes: dict[str, str]) -> str:
    """hash(gang uid, attempt, member uids): a new id for every placement."""
    uid = gang.group.uid if gang.group is not None else cl.pods[next(iter(nodes))].uid
    uids = sorted(cl.pods[k].uid for k in nodes)
    return ids.make("bind", uid, gang.attempt, *uids)


def forget(state: State, gang: Gang, now: float) -> None:
    """Undo an assumption: unbound members stop counting; retry after a backoff."""
    cl, assumed = state.cluster, gang.assumed
    if assumed is None:
        return
    state.inflight.pop(assumed.action_id, None)
    for key in assumed.nodes:
        pod = cl.pods.get(key)
        if pod is None or not pod.node_name:
            cl.account(key, None, {})
    state.claims.release(list(assumed.nodes), cl)
    gang.assumed = None
    delay = min(state.policy.backoff_s * 2 ** max(gang.attempt - 1, 0), state.policy.backoff_max_s)
    gang.retry_after = now + delay


def on_result(state: State, result: ActionResult, now: float) -> None:
    key = state.inflight.get(result.action_id)
    gang = state.cluster.gangs.get(key) if key else None
    if gang is None or gang.assumed is None or gang.assumed.action_id != result.action_id:
        state.inflight.pop(result.action_id, None)
        return
    if result.fenced:  # a deposed leader's copy: this leader's own copy is judged apart
        return
    if result.outcome in ("failed", "rolled-back", "stale"):  # stale: refused, unapplied
        forget(state, gang, now)  # 5. forget on failure


def expire(state: State, now: float) -> None:
    """Forget placements whose pods never showed up bound (actuator down, dry run), and
    nominations whose gang no longer waits or whose victims never left. A placement
    whose members all showed up bound (``Gang.settle``) or whose gang is gone is no
    longer in flight."""
    timeout = state.policy.assume_timeout_s
    keep = timeout + state.policy.preempt_grace_s
    for key, (_, since) in list(state.nominated.items()):
        gang = state.cluster.gangs.get(key)
        if gang is None or not gang.pending or now - since >= keep:
            del state.nominated[key]
    for action_id, key in list(state.inflight.items()):
        gang = state.cluster.gangs.get(key)
        assumed = gang.assumed if gang is not None else None
        if gang is None or assumed is None or assumed.action_id != action_id:
            del state.inflight[action_id]
        elif now - assumed.at >= timeout:
            forget(state, gang, now)


def _commit(
    state: State, gang: Gang, plan: Plan, action_id: str, now: float, *, expires_after: float
) -> list[Output]:
    cl = state.cluster
    devices, (misfit, why) = state.claims.allocate(cl, plan.nodes)
    if why:  # a member's claims have no devices on its node: placed again, elsewhere
        forget(state, gang, now)
        gang.retry_after = now  # at once: the node is kept from it
        state.claims.misfit(gang.key, misfit, now=now, for_s=state.policy.verdict_refresh_s)
        return _published(gang, claims.no_devices(gang.key, len(plan.nodes), why, now=now), now=now)
    bindings = tuple(
        Binding(namespace=cl.pods[k].namespace, pod=cl.pods[k].name, uid=cl.pods[k].uid, node=n,
                claims=devices.get(k, ()))
        for k, n in sorted(plan.nodes.items())
    )  # fmt: skip
    balloons = tuple(  # counted as free (``View.balloons_free``): they go in the same step
        Binding(namespace=p.namespace, pod=p.name, uid=p.uid, node=n)
        for n in sorted(set(plan.nodes.values()))
        for p in cl.pods_on(n)
        if is_preemptible(p)
    )
    bind = BindGang(
        id=action_id, by="gang", at=now, gang=gang.key, bindings=bindings, evict=balloons,
        expires=now + expires_after,  # no bind starts later: it is forgotten soon after
    )  # fmt: skip
    if devices and (size := len(_ENCODE(bind))) > MAX_ACTION_BYTES:  # one NATS message
        forget(state, gang, now)
        told = claims.too_many_devices(gang.key, len(plan.nodes), size, MAX_ACTION_BYTES, now=now)
        return _published(gang, told, now=now)
    placed = GangPlaced(
        gang=gang.key,
        at=now,
        action_id=action_id,
        bindings=_without_claims(bindings),  # who goes where; the devices go in the bind
        level=plan.level,
        domain=plan.domain,
        domains=plan.domains,
        min_domains=plan.min_domains,
        attempt=gang.attempt,
    )
    return [bind, placed]


_ENCODE = msgspec.json.Encoder().encode


def _without_claims(bindings: tuple[Binding, ...]) -> tuple[Binding, ...]:
    if not any(b.claims for b in bindings):
        return bindings
    return tuple(msgspec.structs.replace(b, claims=()) for b in bindings)


def _claims_waiting(state: State, gang: Gang, asked: Ask) -> str:
    """Why the gang's members cannot be placed yet: their ResourceClaims are not all
    made ("" when they are, or none claims devices). Kept until a member changes."""
    if gang.claims_waiting is None:
        keys = [k for names in (*asked.members.values(), *asked.extras.values()) for k in names]
        gang.claims_waiting = state.claims.not_ready(state.cluster, keys)
    return gang.claims_waiting


def _waited(state: State, gang: Gang, now: float) -> bool:
    return now - ordering.created(state.cluster, gang) >= state.policy.reserve_after_s


def _timed_out(cl: Cluster, gang: Gang, now: float) -> bool:
    """Past the PodGroup's ``scheduleTimeoutSeconds``: still placed when it fits, but it
    may no longer hold nodes back from others."""
    limit = gang.group.schedule_timeout_seconds if gang.group is not None else None
    return limit is not None and now - ordering.created(cl, gang) >= limit


def _min_resources_gap(cl: Cluster, asked: Ask) -> dict[str, int]:
    """What free capacity lacks because of ``minResources`` beyond what members ask."""
    if not asked.floor:
        return {}
    free = cl.free_totals()
    gap = shortfall(asked.members, free, floor=asked.floor)
    return gap if gap != shortfall(asked.members, free, floor={}) else {}


def _quantities(amounts: dict[str, int]) -> str:
    return ", ".join(f"{res} {amount}" for res, amount in sorted(amounts.items()))


def _take(free: dict[str, int], members: dict[Shape, list[str]]) -> None:
    for shape, names in members.items():
        for res, amount in shape.requests:
            free[res] = free.get(res, 0) - amount * len(names)
