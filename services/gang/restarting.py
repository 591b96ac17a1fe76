"""Whole-gang restart when a node under a running gang fails or disappears.

Every live member is evicted in one ``EvictGang``; the job restarts from its
checkpoint anyway, and a gang missing a member trains nothing. Pods owned by a
controller (Job, JobSet, LeaderWorkerSet: recognised by the labels those
controllers put on their pods) are recreated by it. Bare pods have no one to
recreate them, so the gang service asks the actuator to create each one again
(``CreatePod``, name suffixed ``-r<n>``) unless the pod opts out with
``baton.io/recreate: "false"``. The new pods are placed once every evicted member
is gone.
"""

from __future__ import annotations

import re

from proto.actions import Binding, CreatePod, EvictGang, PodTemplate
from proto.k8s import Pod
from proto.placement import GangRestarted
from services.gang.cluster import UNHEALTHY_TAINT, Cluster, Gang, NodeState
from services.gang.ids import digest

CONTROLLER_LABELS = (
    "batch.kubernetes.io/job-name",
    "job-name",
    "jobset.sigs.k8s.io/jobset-name",
    "leaderworkerset.sigs.k8s.io/name",
)
RECREATE = "baton.io/recreate"
_SUFFIX = re.compile(r"-r\d+$")

Restart = EvictGang | CreatePod | GangRestarted


def failure(state: NodeState | None, pod: Pod) -> str:
    """Why ``pod`` cannot keep running on this node ('' if it can). None: node deleted."""
    if state is None:
        return "node deleted"
    node = state.node
    if not node.ready:
        return "node NotReady"
    for taint in node.taints:
        if taint.key == UNHEALTHY_TAINT:
            return f"node tainted {UNHEALTHY_TAINT}"
        if taint.effect == "NoExecute" and not any(t.tolerates(taint) for t in pod.tolerations):
            return f"node tainted {taint.key}:NoExecute"
    return ""


def check_node(cluster: Cluster, name: str, *, recreate: bool, now: float) -> list[Restart]:
    """Restart every running gang with a member on this node, if the node failed it."""
    outputs: list[Restart] = []
    state = cluster.nodes.get(name)
    for key in sorted(cluster.on_node.get(name, ())):
        pod = cluster.pods.get(key)
        gang = cluster.gangs.get(f"{pod.namespace}/{pod.gang or pod.name}") if pod else None
        if pod is None or gang is None or gang.restarting or key not in gang.bound:
            continue
        reason = failure(state, pod)
        if reason:
            outputs += restart(cluster, gang, node=name, reason=reason, recreate=recreate, now=now)
    return outputs


def restart(
    cluster: Cluster, gang: Gang, *, node: str, reason: str, recreate: bool, now: float
) -> list[Restart]:
    pods = [cluster.pods[k] for k in sorted(gang.bound) if k in cluster.pods]
    gang.restarting = True
    gang.restarts += 1
    uid = gang.group.uid if gang.group is not None else pods[0].uid
    evict = EvictGang(
        id="evict-" + digest(uid, "restart", *sorted(p.uid for p in pods)),
        by="gang",
        at=now,
        reason=f"{reason} ({node})",
        gang=gang.key,
        pods=tuple(
            Binding(namespace=p.namespace, pod=p.name, uid=p.uid, node=p.node_name) for p in pods
        ),
    )
    creates = [_recreate(p, gang.restarts, now) for p in pods if recreate and _is_bare(p)]
    event = GangRestarted(
        gang=gang.key,
        at=now,
        reason=reason,
        node=node,
        evicted=len(pods),
        recreated=len(creates),
        restarts=gang.restarts,
    )
    return [evict, *creates, event]


def _is_bare(pod: Pod) -> bool:
    if pod.annotations.get(RECREATE) == "false":
        return False
    return not any(label in pod.labels for label in CONTROLLER_LABELS)


def _recreate(pod: Pod, restarts: int, now: float) -> CreatePod:
    name = f"{_SUFFIX.sub('', pod.name)[:240]}-r{restarts}"
    return CreatePod(
        id="create-" + digest(pod.uid, "recreate"),
        by="gang",
        at=now,
        reason=f"gang restart {restarts}",
        pod=PodTemplate(
            namespace=pod.namespace,
            name=name,
            labels=pod.labels,
            annotations=pod.annotations,
            requests=pod.requests,
            priority=pod.priority,
            scheduler_name=pod.scheduler_name,
            tolerations=pod.tolerations,
            node_selector=pod.node_selector,
        ),
    )
