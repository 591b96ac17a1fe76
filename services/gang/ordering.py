"""Which gangs are ready to place, and in what order: priority, then age."""

from __future__ import annotations

import msgspec

from proto.k8s import NodeSelectorTerm, Pod, Requirement
from services.gang.cluster import ADMITTED, Cluster, Gang

TEAM = "baton.io/team"
BORROWING = "baton.io/borrowing"


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
    elif pods:
        marks = pods[0].annotations
    else:
        return None
    labels = gang.group.labels if gang.group is not None else {}
    team = labels.get(TEAM) or next((p.labels[TEAM] for p in pods if TEAM in p.labels), "")
    if not team or marks.get(ADMITTED) != "true":
        return None
    if marks.get(BORROWING) == "true":
        return Requirement(key=TEAM, operator="NotIn", values=(team,))
    return Requirement(key=TEAM, operator="In", values=(team,))


def _narrowed(pod: Pod, rule: Requirement) -> Pod:
    terms = pod.affinity or (NodeSelectorTerm(),)
    affinity = tuple(
        NodeSelectorTerm(match_expressions=(*t.match_expressions, rule)) for t in terms
    )
    return msgspec.structs.replace(pod, affinity=affinity)


def min_member(gang: Gang) -> int:
    return gang.group.min_member if gang.group is not None else 1


def is_admitted(cluster: Cluster, gang: Gang) -> bool:
    """PodGroup annotation ``baton.io/admitted: "true"``, or the label/annotation on a member."""
    if gang.group is not None and gang.group.annotations.get(ADMITTED) == "true":
        return True
    for key in gang.pending:
        pod = cluster.pods.get(key)
        if pod is not None and "true" in (pod.labels.get(ADMITTED), pod.annotations.get(ADMITTED)):
            return True
    return False


def is_ready(cluster: Cluster, gang: Gang, *, now: float, require_admission: bool) -> bool:
    """minMember pending pods, nothing bound or in flight, not backing off, admitted if gated.

    A gang with live bound members is running: extra pending pods wait until it is
    gone (a restart waits for every evicted member to go before placing again).
    """
    if gang.bound or gang.assumed is not None or gang.restarting or now < gang.retry_after:
        return False
    if gang.group is None and not gang.lone:
        return False  # pods name a PodGroup we have not seen (yet)
    if not gang.pending or len(gang.pending) < min_member(gang):
        return False
    return not require_admission or is_admitted(cluster, gang)


def priority(cluster: Cluster, gang: Gang) -> int:
    return max((cluster.pods[k].priority for k in gang.pending if k in cluster.pods), default=0)


def created(cluster: Cluster, gang: Gang) -> float:
    if gang.group is not None:
        return gang.group.created_at
    return min((cluster.pods[k].created_at for k in gang.pending if k in cluster.pods), default=0.0)


def queue(cluster: Cluster, *, now: float, require_admission: bool) -> list[Gang]:
    """Ready gangs: highest priority first, then oldest, then by key (deterministic)."""
    ready = [
        g
        for g in cluster.gangs.values()
        if is_ready(cluster, g, now=now, require_admission=require_admission)
    ]
    return sorted(ready, key=lambda g: (-priority(cluster, g), created(cluster, g), g.key))
