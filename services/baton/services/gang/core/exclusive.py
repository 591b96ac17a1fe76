"""JobSet exclusive placement: each Job of the gang in a topology domain of its own.

A JobSet annotated ``alpha.jobset.sigs.k8s.io/exclusive-topology: <label key>`` wants
every one of its Jobs (the pods sharing a ``jobset.sigs.k8s.io/job-key``) within one
domain of that level, and no two of its Jobs in the same domain (upstream enforces it
with pod affinity and anti-affinity on the job key). The annotation may be on one
replicated Job only (its template): then only its pods carry it, and the other Jobs'
pods are placed anywhere outside those domains (the anti-affinity keeps every other
Job's pods out), together, after them. The gang is still placed all or nothing: the
Jobs are searched in turn, biggest first, each with the level required and the domains
of the Jobs before it and of other exclusive JobSets' running Jobs left out; one Job
that finds no domain refuses the whole gang. A level the cluster's topology does not
have is a refusal, never ignored.
Pure functions.
"""

from __future__ import annotations

from baton.libs.view import Shape, group_by_shape
from baton.proto import keys
from baton.proto.k8s import Pod
from baton.services.gang.core.gangs import Cluster
from baton.services.gang.core.topology import Plan, Search, search

Parts = tuple[dict[Shape, list[str]], ...]


def split(pods: list[Pod]) -> tuple[str, Parts]:
    """The exclusive level the members ask for ("" none) and the members that carry it,
    by Job (the others are not confined: ``search_exclusive``)."""
    level = next((p.annotations[keys.JOBSET_EXCLUSIVE] for p in pods
                  if p.annotations.get(keys.JOBSET_EXCLUSIVE)), "")  # fmt: skip
    if not level:
        return "", ()
    jobs: dict[str, list[Pod]] = {}
    for pod in pods:
        if pod.annotations.get(keys.JOBSET_EXCLUSIVE) == level:
            jobs.setdefault(pod.labels.get(keys.JOBSET_JOB_KEY, ""), []).append(pod)
    ordered = sorted(jobs.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return level, tuple(group_by_shape(members) for _, members in ordered)


def search_exclusive(
    cluster: Cluster, parts: Parts, *, level: str, excluded: frozenset[str],
    members: dict[Shape, list[str]] | None = None,
) -> Search:  # fmt: skip
    """One plan for every part, each in its own domain of ``level``, and for the
    ``members`` in no part, anywhere outside those domains; or the first refusal (its
    ``best`` says how close it came)."""
    if level not in cluster.levels:
        return Search(plan=None)
    index = cluster.levels.index(level)
    left_out, nodes = set(excluded) | _others(cluster, parts, level=level, index=index), {}
    eligible = 0
    for part in parts:
        found = search(cluster, part, required=level, excluded=frozenset(left_out))
        eligible = max(eligible, found.eligible_nodes)
        if found.plan is None:
            return found
        nodes.update(found.plan.nodes)
        taken = {cluster.nodes[n].paths[index] for n in found.plan.nodes.values()}
        left_out.update(n for n, s in cluster.nodes.items() if s.paths[index] in taken)
    rest = _rest(members or {}, parts)
    if rest:
        found = search(cluster, rest, excluded=frozenset(left_out))
        if found.plan is None:
            return found
        nodes.update(found.plan.nodes)
    plan = Plan(nodes=nodes, level="", domain="", domains=len(parts), min_domains=len(parts))
    return Search(plan=plan, eligible_nodes=eligible)


def _rest(members: dict[Shape, list[str]], parts: Parts) -> dict[Shape, list[str]]:
    """The members in no part (their Jobs are not exclusive), by shape."""
    placed = {name for part in parts for names in part.values() for name in names}
    rest = {shape: [n for n in names if n not in placed] for shape, names in members.items()}
    return {shape: names for shape, names in rest.items() if names}


def _others(cluster: Cluster, parts: Parts, *, level: str, index: int) -> set[str]:
    """Nodes of the domains where another exclusive JobSet's Jobs run (upstream's
    anti-affinity keeps every Job with a job key out of a domain another one holds)."""
    first = next(iter(parts[0].values()))[0] if parts else ""
    own = cluster.pods[first].labels.get(keys.JOBSET_NAME, "") if first in cluster.pods else ""
    held = set()
    for key, (node, _) in cluster.accounted.items():  # bound or assumed, not taken off
        p = cluster.pods.get(key)
        if (p is not None and node in cluster.nodes
                and p.annotations.get(keys.JOBSET_EXCLUSIVE) == level
                and p.labels.get(keys.JOBSET_NAME) != own):  # fmt: skip
            held.add(cluster.nodes[node].paths[index])
    return {name for name, state in cluster.nodes.items() if state.paths[index] in held}
