"""The bandwidth core: pure ``(state, event, now) -> (state, outputs)``.

Pods and EndpointSlices (from the bridge), measured egress (from node agents), the
team config (``TeamsLoaded``) and the capacity update the picture; a runner ``Tick``
runs one allocation round and returns a ``NodeLimits`` for every node whose limits
changed, an ``Allocation`` summary and, when the policy says so, ``Annotate`` actions
that keep ``kubernetes.io/egress-bandwidth`` at each pod's limit. No I/O, no clock:
replaying the same events gives the same limits.

A round is computed incrementally (``incremental``: only the teams whose wants or
share moved); ``reference`` computes it from scratch, the definition both must meet
(a test compares them on random inputs). A state runs one or the other.
"""

from __future__ import annotations

import heapq
import ipaddress
import itertools
import math

from baton.proto import keys
from baton.proto.actions import Annotate
from baton.proto.admission import TeamsLoaded
from baton.proto.bandwidth import (
    Allocation,
    BandwidthPolicy,
    Capacity,
    NodeEgress,
    NodeLimits,
    PodLimit,
    TeamShare,
)
from baton.proto.k8s import EndpointSliceEvent, Pod, PodEvent
from baton.proto.runner import Tick
from baton.services.bandwidth.core import annotating, demand, endpoints, incremental
from baton.services.bandwidth.core.fairshare import INF
from baton.services.bandwidth.core.ledger import UNPUBLISHED, Book, Shaped
from baton.services.bandwidth.core.policy import Teams, parse_rate, with_teams
from baton.services.bandwidth.core.state import State, books

__all__ = ["Input", "Output", "State", "initial", "round_", "step", "wants_tick"]

Input = PodEvent | EndpointSliceEvent | NodeEgress | TeamsLoaded | Capacity | Tick
Output = NodeLimits | Allocation | Annotate


def initial(policy: BandwidthPolicy | None = None) -> State:
    policy = policy or BandwidthPolicy()
    return State(
        policy=policy,
        teams=Teams(policy),
        capacity=policy.capacity_bps,
        networks=[ipaddress.ip_network(c) for c in policy.internal_cidrs],
    )


def wants_tick(state: State, now: float) -> bool:
    """A round is due when an input moved, a measurement went stale, node limits wait in
    the queue or annotations lag, and the last round's node limits have been paced out
    (``limits_per_s``)."""
    if state.last_round <= now < state.paced_until:  # (time that went back is not paced)
        return False
    if state.moved or state.due or state.queued:
        return True
    return bool(state.expiry) and state.expiry[0][0] < now - state.policy.stale_s


def step(state: State, event: Input, now: float) -> tuple[State, tuple[Output, ...]]:
    match event:
        case Tick():
            return state, round_(state, now)
        case PodEvent(op="delete", pod=pod):
            _forget(state, pod.uid)
        case PodEvent(pod=pod):
            _upsert(state, pod)
        case NodeEgress():
            _measure(state, event)
        case EndpointSliceEvent(op=op, endpoint_slice=eps):
            endpoints.update(state, eps, gone=op == "delete")
        case TeamsLoaded(config=config):
            policy = with_teams(state.policy, config)
            if policy != state.policy:
                _repolicy(state, policy)
        case Capacity(capacity_bps=capacity):
            state.capacity = capacity
            state.moved = True
    return state, ()


# -- the picture ----------------------------------------------------------------------


def _upsert(state: State, pod: Pod) -> None:
    if pod.phase != "Running" or not pod.node_name or not pod.pod_ip:
        _forget(state, pod.uid)
        return
    shaped = _shaped(pod)
    old = state.pods.get(pod.uid)
    if old == shaped:
        return
    state.moved = True
    if old is not None and (old.node != shaped.node or old.team_label != shaped.team_label):
        _forget(state, pod.uid)
        old = None
    state.pods[pod.uid] = shaped
    if old is None:
        state.on_node.setdefault(shaped.node, {})[pod.uid] = None
        _place(state, pod.uid)
        state.unlisted.add(pod.uid)
        state.dirty.add(shaped.node)
        return
    if not shaped.same_limit(old):
        state.unlisted.add(pod.uid)
    if shaped.cap_bps != old.cap_bps:
        book = state.book_of[pod.uid]
        book.caps[book.index[pod.uid]] = shaped.cap_bps
        book.all_moved()  # spread shares depend on caps, not only on wants
        state.touched.add(pod.uid)
    if shaped.egress != old.egress and state.policy.annotate:
        state.due[pod.uid] = None


def _shaped(pod: Pod) -> Shaped:
    """A pod's cap is its ``kubernetes.io/egress-bandwidth``, unless that is the limit the
    service wrote itself (``baton.io/egress-limit``): then the cap it saved beside it."""
    notes = pod.annotations
    egress = notes.get(keys.EGRESS_BANDWIDTH, "")
    ours = bool(egress) and notes.get(keys.EGRESS_LIMIT) == egress
    cap = notes.get(keys.EGRESS_CAP, "") if ours else egress
    return Shaped(
        namespace=pod.namespace, name=pod.name, uid=pod.uid, node=pod.node_name,
        ips=(pod.pod_ip,), team_label=pod.labels.get(keys.TEAM, ""), cap_bps=_cap(cap),
        egress=egress, ours=ours, cap=cap,
    )  # fmt: skip


def _cap(text: str) -> float:
    if not text:
        return INF
    try:
        return float(parse_rate(text))
    except ValueError:
        return INF  # admission validates the annotation; an unreadable one caps nothing


def _place(state: State, uid: str) -> None:
    pod = state.pods[uid]
    key = (pod.namespace, pod.team_label)
    team = state.team_of.get(key)
    if team is None:
        team = state.teams.of(namespace=pod.namespace, labels={keys.TEAM: pod.team_label})
        state.team_of[key] = team
    book = state.books.get(team.name)
    if book is None:
        book = state.books[team.name] = Book(team=team)
        state.order = None
    used = state.used.get(uid)
    book.add(uid, cap=pod.cap_bps, pub=state.published.get(uid, UNPUBLISHED),
             used=used[0] if used is not None else 0.0)  # fmt: skip
    state.book_of[uid] = book
    state.touched.add(uid)


def _forget(state: State, uid: str) -> None:
    pod = state.pods.pop(uid, None)
    if pod is None:
        return
    state.moved = True
    book = state.book_of.pop(uid)
    book.remove(uid)
    if not book.uids:
        del state.books[book.team.name]
        state.order = None
    state.on_node[pod.node].pop(uid, None)
    state.used.pop(uid, None)
    state.published.pop(uid, None)
    state.limits.pop(uid, None)
    state.due.pop(uid, None)
    state.annotated.pop(uid, None)
    state.touched.discard(uid)
    state.unlisted.discard(uid)
    state.dirty.add(pod.node)


def _measure(state: State, event: NodeEgress) -> None:
    """Keep each pod's rate; a pod whose want (while the rate is fresh) differs from the
    last round's is touched. Going stale later is the expiry heap's to notice."""
    measured = []
    policy, published, at = state.policy, state.published, event.at
    for p in event.pods:
        book = state.book_of.get(p.uid)
        if book is None:
            continue
        i = book.index[p.uid]
        bps = float(p.internet_bps)
        state.used[p.uid] = (bps, at)
        book.used[i] = bps
        book.used_moved = True
        measured.append(p.uid)
        fresh = demand.want(policy, used_bps=bps, limit_bps=published.get(p.uid),
                            cap_bps=book.caps[i])  # fmt: skip
        if fresh != book.wants[i]:
            state.touched.add(p.uid)
    if measured:
        state.measured += 1
        heapq.heappush(state.expiry, (at, state.measured, tuple(measured)))
        state.moved = True


def _repolicy(state: State, policy: BandwidthPolicy) -> None:
    """A new team config: every pod is placed again and every node republished."""
    state.policy, state.teams = policy, Teams(policy)
    state.team_of.clear()
    state.books.clear()
    state.book_of.clear()
    state.order = None
    state.limits.clear()
    for uid in state.pods:
        _place(state, uid)
    state.unlisted.update(state.pods)
    state.dirty.update(state.on_node)
    state.regime = ""
    state.moved = True


# -- a round --------------------------------------------------------------------------


def round_(state: State, now: float) -> tuple[Output, ...]:
    """One allocation round (incremental). While more nodes wait than a round sends, it
    sends the next of them and decides nothing new: a decision now would queue again
    nodes that still wait, and cost a round's CPU for limits no agent has yet."""
    if len(state.queued) > state.policy.limits_per_round > 0:
        return _send(state, now)  # what moved is decided at the round that finds it short
    return finish(state, now, incremental.decide(state, now))


def finish(state: State, now: float, changes: dict[str, int]) -> tuple[Output, ...]:
    """Commit the round's new limits (assume them), queue the nodes whose limits or pods
    changed (those with a lower limit first), then publish the oldest queued, at most
    ``limits_per_round``, with the summary and any annotations due."""
    lower, changed = commit(state, changes)
    if state.extra_moved:
        state.extra_moved = False
        extra = endpoints.networks(state)
        if extra != state.extra:
            state.extra = extra
            changed.update(state.on_node)
    state.queued.update(dict.fromkeys(sorted(lower)))  # a node already queued keeps its place
    state.queued.update(dict.fromkeys(sorted(changed - lower)))
    if state.policy.annotate:
        state.due.update(dict.fromkeys(changes))
    state.moved = False
    return _send(state, now)


def _send(state: State, now: float) -> tuple[Output, ...]:
    """The oldest queued nodes' limits (at most ``limits_per_round``), the summary and
    the annotations due; the next round is paced by how many nodes went."""
    queued = state.queued
    sent = list(itertools.islice(queued, state.policy.limits_per_round or len(queued)))
    for node in sent:
        del queued[node]
    outputs: list[Output] = [_node_limits(state, node, now) for node in sent]
    outputs.append(_summary(state, now=now, changed=len(sent)))
    if state.policy.annotate:
        outputs += annotating.due(state, now)
    state.last_round = now
    if state.policy.limits_per_s > 0:
        state.paced_until = now + len(sent) / state.policy.limits_per_s
    return tuple(outputs)


def commit(state: State, changes: dict[str, int]) -> tuple[set[str], set[str]]:
    """Record each pod's new limit (and a PodLimit for it). Returns the nodes where a limit
    went down, and every node to publish (those among them)."""
    changed = set(state.dirty)
    lower: set[str] = set()
    state.dirty.clear()
    state.unlisted.clear()
    saturated, used = state.policy.saturated, state.used
    for uid, value in changes.items():
        pod, book = state.pods[uid], state.book_of[uid]
        team = book.team
        old = state.published.get(uid)
        if old is not None and value < old:
            lower.add(pod.node)
        state.published[uid] = value
        book.pub[book.index[uid]] = value
        state.limits[uid] = PodLimit(
            namespace=pod.namespace, pod=pod.name, uid=uid, team=team.name, tier=team.tier,
            ips=pod.ips, egress_bps=value, ceil_bps=value,
        )  # fmt: skip
        rate = used.get(uid)
        if rate is not None and (old is not None and rate[0] >= saturated * old) != (
            rate[0] >= saturated * value
        ):
            state.touched.add(uid)  # held at its limit now, or no longer: its want moved
        changed.add(pod.node)
    return lower, changed


def _node_limits(state: State, node: str, now: float) -> NodeLimits:
    generation = max(state.generation.get(node, 0) + 1, int(now * 1000))
    state.generation[node] = generation
    uids = state.on_node.get(node, {})
    limits = sorted(
        (state.limits[uid] for uid in uids if uid in state.limits),
        key=lambda p: (p.namespace, p.pod),
    )
    if not uids:
        state.on_node.pop(node, None)
    return NodeLimits(
        node=node, at=now, generation=generation, id=f"{node}:{generation}",
        limits=tuple(limits), internal_cidrs=state.policy.internal_cidrs + state.extra,
    )  # fmt: skip


def _summary(state: State, *, now: float, changed: int) -> Allocation:
    teams = []
    for book in books(state):
        if book.used_moved:
            book.used_total, book.used_moved = int(math.fsum(book.used)), False
        team, want = book.team, book.want
        teams.append(
            TeamShare(
                team=team.name, tier=team.tier, weight=team.weight, minimum_bps=team.minimum_bps,
                demand_bps=-1 if want == INF else int(want), assigned_bps=sum(book.pub),
                used_bps=book.used_total, pods=len(book),
            )
        )  # fmt: skip
    return Allocation(
        at=now, capacity_bps=state.capacity, teams=tuple(teams), changed_nodes=changed
    )
