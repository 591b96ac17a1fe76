"""Expected run times and EASY backfill: when the head can start, and who may run before.

A gang's expected run time is its ``baton.io/expected-duration`` annotation (on the
PodGroup, else on its first member), else what its team's recent runs of the same
size took: the ``estimate_percentile`` of the last ``estimate_history`` completed runs
of that team and size class, once there are ``estimate_samples`` of them. Runs are
learned from the events the core sees (a gang placed by this core whose last bound
member finished or went away, not taken off by a restart), so the estimate is a pure
function of the recorded inputs and replays the same.

The head's *shadow time*: when, going by the expected ends of what runs on its reserved
nodes, enough of them frees for it to start. A pod whose end is not known (no estimate,
not placed by this core, another scheduler's) or that has run past its estimate counts
as ending now, so the shadow time is never later than the estimates say (a backfill
decided against it cannot delay the head, as long as the estimates hold; when they do
not, the head takes back what was backfilled: ``preempting``, loans).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from baton.libs.view import Shape, count_fits, gang_key
from baton.proto import durations, keys
from baton.proto.k8s import GPU
from baton.proto.placement import GangPolicy
from baton.services.gang.core.gangs import Cluster, Gang

SIZE_CLASSES = ((0, "0"), (1, "1"), (8, "2-8"), (64, "9-64"), (255, "65-255"))  # GPUs up to, name


@dataclass(slots=True)
class Runs:
    """Recent completed run times per (team, size class), oldest first."""

    seconds: dict[tuple[str, str], tuple[float, ...]] = field(default_factory=dict)

    def add(self, team: str, size: str, took: float, *, keep: int) -> None:
        kept = (*self.seconds.get((team, size), ()), took)
        self.seconds[(team, size)] = kept[-keep:] if keep > 0 else ()

    def estimate(self, team: str, size: str, policy: GangPolicy) -> float | None:
        runs = self.seconds.get((team, size), ())
        if len(runs) < max(policy.estimate_samples, 1):
            return None
        ordered = sorted(runs)
        at = math.ceil(policy.estimate_percentile / 100 * len(ordered)) - 1
        return ordered[min(max(at, 0), len(ordered) - 1)]


def size_class(gpus: int) -> str:
    return next((name for most, name in SIZE_CLASSES if gpus <= most), "256+")


def gpus(cluster: Cluster, pod_keys: set[str]) -> int:
    pods = cluster.pods
    return sum(pods[k].requests.get(GPU, 0) for k in pod_keys if k in pods)


def team(cluster: Cluster, gang: Gang) -> str:
    """The ``baton.io/team`` label of its PodGroup or its first member, else its
    namespace."""
    if gang.group is not None and keys.TEAM in gang.group.labels:
        return gang.group.labels[keys.TEAM]
    for members in (gang.pending, gang.bound):  # the webhook labels every pod of a team
        pod = cluster.pods.get(min(members)) if members else None
        if pod is not None and keys.TEAM in pod.labels:
            return pod.labels[keys.TEAM]
    return gang.key.split("/", 1)[0]


def stated(cluster: Cluster, gang: Gang) -> float | None:
    """``baton.io/expected-duration`` on the PodGroup, else on its first member (members
    share a template; an invalid value is no estimate: the webhook refuses it before it
    gets here)."""
    if gang.group is not None:
        found = durations.seconds_or_none(gang.group.annotations.get(keys.EXPECTED_DURATION))
        if found is not None:
            return found
    for members in (gang.pending, gang.bound):
        pod = cluster.pods.get(min(members)) if members else None
        if pod is not None:
            return durations.seconds_or_none(pod.annotations.get(keys.EXPECTED_DURATION))
    return None


def expected(cluster: Cluster, gang: Gang, runs: Runs, policy: GangPolicy) -> float | None:
    """A waiting gang's expected run time, or None (it is never backfilled on a guess)."""
    found = stated(cluster, gang)
    if found is not None or not policy.learn_estimates:
        return found
    size = size_class(gpus(cluster, gang.pending))
    return runs.estimate(team(cluster, gang), size, policy)


def finished(cluster: Cluster, gang: Gang, runs: Runs, policy: GangPolicy, now: float) -> None:
    """A gang placed by this core ran to its end (its last bound member left, no restart
    under way): one more run for its team and size."""
    if gang.ran_gpus < 0 or not policy.learn_estimates:
        return
    runs.add(
        gang.ran_team, size_class(gang.ran_gpus), max(now - gang.started, 0.0),
        keep=policy.estimate_history,
    )  # fmt: skip


def shadow(
    cluster: Cluster, shape: Shape, need: int, reserved: frozenset[str], now: float
) -> float:
    """When ``need`` members of ``shape`` fit on the ``reserved`` nodes, going by the
    expected ends of what runs there (unknown or overrun ends count as now). ``now``
    when even everything ending would not make room (nothing may backfill)."""
    counts: dict[str, int] = {}
    free: dict[str, dict[str, int]] = {}
    ends: list[tuple[float, str, str]] = []
    for name in sorted(reserved):
        view = cluster.nodes.get(name)
        if view is None:
            continue
        free[name] = dict(view.free)
        counts[name] = count_fits(free[name], shape.requests)
        for key in cluster.on_node.get(name, ()):
            ends.append((max(_end(cluster, key), now), name, key))
    total = sum(counts.values())
    if total >= need:
        return now
    for end, name, key in sorted(ends):
        for res, amount in cluster.accounted.get(key, ("", {}))[1].items():
            free[name][res] = free[name].get(res, 0) + amount
        fits = count_fits(free[name], shape.requests)
        total += fits - counts[name]
        counts[name] = fits
        if total >= need:
            return end
    return now


def _end(cluster: Cluster, pod_key: str) -> float:
    """When a pod accounted on a node is expected to leave (-inf: not known)."""
    pod = cluster.pods.get(pod_key)
    gang = cluster.gangs.get(gang_key(pod)) if pod is not None else None
    if gang is None or gang.estimate is None or gang.ran_gpus < 0:
        return -math.inf
    return gang.started + gang.estimate
