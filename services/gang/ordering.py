"""Which gangs are ready to place, and in what order: priority, then age (or, within
``shortest_first_s`` of their creation, shortest expected work first)."""

from __future__ import annotations

import math

import msgspec

from baton.libs.view import quorum
from baton.proto import keys
from baton.proto.k8s import NodeSelectorTerm, Pod, Requirement
from baton.proto.placement import GangPolicy
from baton.services.gang import estimates
from baton.services.gang.gangs import Cluster, Gang

Key = tuple[int, int, float, float, str]


def members(cluster: Cluster, gang: Gang) -> list[Pod]:
    pods = [cluster.pods[k] for k in sorted(gang.pending) if k in cluster.pods]
    rule = team_rule(gang, pods)
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
    """PodGroup annotation ``baton.io/admitted: "true"``, or the label/annotation on a member."""
    if gang.group is not None and gang.group.annotations.get(keys.ADMITTED) == "true":
        return True
    for key in gang.pending:
        pod = cluster.pods.get(key)
        if pod is not None and "true" in (
            pod.labels.get(keys.ADMITTED),
            pod.annotations.get(keys.ADMITTED),
        ):
            return True
    return False


def is_ready(cluster: Cluster, gang: Gang, *, now: float, require_admission: bool) -> bool:
    """minMember pending pods, nothing bound or in flight, not backing off, admitted if gated.

    A gang with live bound members is running: extra pending pods wait until it is
    gone (a restart waits for every evicted member to go before placing again).
    """
    if gang.bound or gang.assumed is not None or gang.restarting or now < gang.retry_after:
        return False
    need = min_member(cluster, gang)
    if need == 0:
        return False  # pods name a PodGroup we have not seen (yet), and say no count
    if not gang.pending or len(gang.pending) < need:
        return False
    return not require_admission or is_admitted(cluster, gang)


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
    now: float,
    policy: GangPolicy | None = None,
    runs: estimates.Runs | None = None,
) -> Key:
    """The gang's place in the queue, smallest first: ``(-priority, tier, work, created,
    gang key)``.

    Without ``policy.shortest_first_s`` (0, the default; ignored under ``strict_fifo``)
    every gang is in tier 0 and the order is priority, then age, then key. With it,
    within a priority, a gang of one pod created less than ``shortest_first_s`` ago is
    *young* (tier 1): young gangs come after every other gang, shortest expected work
    first (``work``: GPUs x expected run time, ``estimates.expected``; no estimate: after
    those with one, oldest first). The others (older gangs, gangs of several pods) keep
    their order by age, so the head (the first gang that does not fit) is the oldest of
    them and reserves as before: a young gang overtakes only other young gangs, multi-pod
    gangs are never overtaken, and no gang is overtaken once it has waited
    ``shortest_first_s`` (starvation protection).

    What changes it (a cache kept on the gang must be dropped then): one of its pods
    (priority, members, ``baton.io/expected-duration``), its PodGroup (created time,
    annotation), ``now`` passing ``created + shortest_first_s`` (once: young -> tier 0),
    and, with ``learn_estimates``, every completed run of its team and size class
    (``estimates.finished``: the learned estimate moves).
    """
    born = created(cluster, gang)
    rank = -priority(cluster, gang)
    if (
        policy is None
        or policy.strict_fifo
        or policy.shortest_first_s <= 0  # off (a creation time ahead of now stays in tier 0)
        or now - born >= policy.shortest_first_s
        or len(gang.pending) > 1
    ):
        return (rank, 0, 0.0, born, gang.key)
    expected = estimates.expected(cluster, gang, runs or estimates.Runs(), policy)
    gpus = max(estimates.gpus(cluster, gang.pending), 1)
    work = math.inf if expected is None else gpus * expected
    return (rank, 1, work, born, gang.key)


def queue(
    cluster: Cluster,
    *,
    now: float,
    require_admission: bool,
    policy: GangPolicy | None = None,
    runs: estimates.Runs | None = None,
) -> list[Gang]:
    """Ready gangs in ``key`` order (deterministic: keys are unique, the gang's key
    breaks ties)."""
    ready = [
        g
        for g in cluster.gangs.values()
        if is_ready(cluster, g, now=now, require_admission=require_admission)
    ]
    keyed = [(key(cluster, g, now=now, policy=policy, runs=runs), g) for g in ready]
    keyed.sort(key=lambda entry: entry[0])
    return [g for _, g in keyed]
