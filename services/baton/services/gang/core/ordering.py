"""Which gangs are ready to place, and in what order: priority, then age (with
``shortest_first_s``, one-pod gangs moved back for their expected work)."""

from __future__ import annotations

import msgspec

from baton.libs.view import quorum
from baton.proto import keys
from baton.proto.k8s import NodeSelectorTerm, Pod, Requirement
from baton.proto.placement import GangPolicy
from baton.services.gang.core import estimates
from baton.services.gang.core.gangs import Cluster, Gang

Key = tuple[int, float, float, str]


def members(cluster: Cluster, gang: Gang) -> list[Pod]:
    """Its pending members, placed where admission put the gang (``team_rule``; a
    running gang's marks may be on a bound member)."""
    pods = [cluster.pods[k] for k in sorted(gang.pending) if k in cluster.pods]
    running = [cluster.pods[k] for k in sorted(gang.bound) if k in cluster.pods]
    rule = team_rule(gang, pods + running)
    return [_narrowed(p, rule) for p in pods] if rule is not None else pods


def team_rule(gang: Gang, pods: list[Pod]) -> Requirement | None:
    """Where admission put an admitted gang of a team: on its team's nodes (within quota)
    or only on other teams' nodes (``baton.io/borrowing``), whatever else its pods allow.

    The marks are on the PodGroup, or on the pod for a lone pod (a gang of one); the
    team is the ``baton.io/team`` label the admission webhook sets.
    """
    if gang.group is not None:
        marks = gang.group.annotations
    elif pods:  # a lone pod, or the member carrying a group-less gang's marks (Kueue...)
        marks = next((p.annotations for p in pods if keys.ADMITTED in p.annotations), {})
    else:
        return None
    labels = gang.group.labels if gang.group is not None else {}
    team = labels.get(keys.TEAM) or next(
        (p.labels[keys.TEAM] for p in pods if keys.TEAM in p.labels), ""
    )
    if not team or marks.get(keys.ADMITTED) != "true":
        return None
    if marks.get(keys.BORROWING) == "true":
        return Requirement(key=keys.TEAM, operator="NotIn", values=(team,))
    return Requirement(key=keys.TEAM, operator="In", values=(team,))


def _narrowed(pod: Pod, rule: Requirement) -> Pod:
    terms = pod.affinity or (NodeSelectorTerm(),)
    affinity = tuple(
        NodeSelectorTerm(match_expressions=(*t.match_expressions, rule)) for t in terms
    )
    return msgspec.structs.replace(pod, affinity=affinity)


def min_member(cluster: Cluster, gang: Gang) -> int:
    """Members needed before placement, whichever format the gang is in (0: unknown yet)."""
    return quorum(gang, cluster.pods)


def is_admitted(cluster: Cluster, gang: Gang) -> bool:
    """PodGroup annotation ``baton.io/admitted: "true"``, or the label/annotation on a member
    (kept on the gang until one of its pods or its PodGroup changes)."""
    if gang.admitted is None:
        gang.admitted = _admitted(cluster, gang)
    return gang.admitted


def _admitted(cluster: Cluster, gang: Gang) -> bool:
    if gang.group is not None and gang.group.annotations.get(keys.ADMITTED) == "true":
        return True
    for key in gang.pending | gang.bound:  # the marks may be on a running member
        pod = cluster.pods.get(key)
        if pod is not None and "true" in (
            pod.labels.get(keys.ADMITTED),
            pod.annotations.get(keys.ADMITTED),
        ):
            return True
    return False


def quorate(cluster: Cluster, gang: Gang) -> bool:
    """minMember pending pods, and the count is known (kept like ``is_admitted``)."""
    if gang.quorate is None:
        need = min_member(cluster, gang)
        gang.quorate = need > 0 and len(gang.pending) >= need  # 0: a PodGroup not seen yet
    return gang.quorate


def is_ready(cluster: Cluster, gang: Gang, *, now: float, require_admission: bool) -> bool:
    """Nothing in flight, not restarting, not backing off, admitted if gated, and either
    minMember pending pods (it starts), or bound members and pending ones (it runs: its
    members beyond the quorum, and members that join it, are placed as room appears).

    A restart waits for every evicted member to go before the gang is placed again.
    """
    if gang.assumed is not None or gang.restarting or now < gang.retry_after:
        return False
    ready = bool(gang.pending) if gang.bound else quorate(cluster, gang)
    return ready and (not require_admission or is_admitted(cluster, gang))


def short(cluster: Cluster, gang: Gang) -> bool:
    """A PodGroup with a timeout, not running, with fewer member pods than it needs."""
    group = gang.group
    if group is None or group.schedule_timeout_seconds is None or gang.bound:
        return False
    return len(gang.pending) < min_member(cluster, gang)


def priority(cluster: Cluster, gang: Gang) -> int:
    """The highest priority of its pending members (kept on the gang: the core forgets
    it whenever one of the gang's pods changes)."""
    if gang.rank is None:
        pods = cluster.pods
        gang.rank = max((pods[k].priority for k in gang.pending if k in pods), default=0)
    return gang.rank


def created(cluster: Cluster, gang: Gang) -> float:
    if gang.group is not None:
        return gang.group.created_at
    return min((cluster.pods[k].created_at for k in gang.pending if k in cluster.pods), default=0.0)


def key(
    cluster: Cluster,
    gang: Gang,
    *,
    policy: GangPolicy | None = None,
    runs: estimates.Runs | None = None,
) -> Key:
    """The gang's place in the queue, smallest first: ``(-priority, place, created, gang
    key)``; ``place`` is its creation time, moved back for its expected work.

    Without ``policy.shortest_first_s`` (0, the default; ignored under ``strict_fifo``)
    ``place`` is the creation time: priority, then age, then key (unique: deterministic).
    With it, a gang of one pod goes back ``shortest_first_weight`` x its expected work
    (GPUs x expected run time, ``estimates.expected``), at most ``shortest_first_s`` (no
    estimate: the most), so within a priority a job overtakes a longer one created up
    to that much before it (shortest expected work first, with starvation protection: a
    gang is overtaken only by gangs created less than ``shortest_first_s`` after it).
    Gangs of several pods keep their creation time: the order never delays them, so the
    head (the first gang that does not fit) reserves for them as before. The key does
    not depend on the clock.

    Kept on the gang (``Gang.order``) until one of its pods or its PodGroup changes
    (priority, members, ``baton.io/expected-duration``, created time), except when it
    rests on a learned estimate (``learn_estimates``, no annotation): that one moves
    whenever a run of its team and size class finishes (``estimates.finished``), so it
    is computed every time.
    """
    if gang.order is not None:
        return gang.order
    born = created(cluster, gang)
    rank = -priority(cluster, gang)
    if (
        policy is None
        or policy.strict_fifo
        or policy.shortest_first_s <= 0
        or len(gang.pending) > 1
    ):
        gang.order = (rank, born, born, gang.key)
        return gang.order
    stated = estimates.stated(cluster, gang)
    expected = estimates.expected(cluster, gang, runs or estimates.Runs(), policy)
    gpus = max(estimates.gpus(cluster, gang.pending), 1)
    most = policy.shortest_first_s
    back = most if expected is None else min(policy.shortest_first_weight * gpus * expected, most)
    order = (rank, born + back, born, gang.key)
    if stated is not None or not policy.learn_estimates:
        gang.order = order  # fixed until the gang changes
    return order


def queue(
    cluster: Cluster,
    *,
    now: float,
    require_admission: bool,
    policy: GangPolicy | None = None,
    runs: estimates.Runs | None = None,
) -> list[Gang]:
    """Ready gangs in queue order (``key``; the policy and learned runs of the core)."""
    ready = [
        g
        for g in cluster.gangs.values()
        if is_ready(cluster, g, now=now, require_admission=require_admission)
    ]
    ready.sort(key=lambda g: key(cluster, g, policy=policy, runs=runs))
    return ready
