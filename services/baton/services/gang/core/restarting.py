"""Whole-gang restart when a node under a running gang is drained or disappears.

The gang service does not judge node health: the health service does, and when it
decides a node failed it drains it with the ``baton.io/draining`` NoExecute taint
(after a grace for the job to checkpoint, see docs/health.md). A gang with a member
on a draining node, on a node that was deleted, or on a node with any other NoExecute
taint the member does not tolerate (Kubernetes evicts such a pod anyway) restarts
whole. A node that is merely NotReady is health's to judge (it waits, per condition,
before it counts), so it restarts nothing here.

Every live member goes at once; the job restarts from its checkpoint anyway, and a
gang missing a member trains nothing. Pods owned by a controller (Job, JobSet,
LeaderWorkerSet: recognised by the labels those controllers put on their pods) are
evicted in one ``EvictGang`` and recreated by their controller. Bare pods have no
one to recreate them: each gets a ``RecreatePod``, and the actuator replaces it with
a faithful, unbound copy of the live pod under the same name (the slim pod on the
bus has too little of it to rebuild it here), unless the pod opts out with
``baton.io/recreate: "false"`` (then it is only evicted). A node that is deleted or
not Ready has no kubelet to stop its pods gracefully, so the copies of the pods there
replace them at once (grace 0): readiness decides how a pod is deleted, never whether
its gang restarts. The gang is placed again once every old member is gone.
"""

from __future__ import annotations

from baton.libs.view import NodeView, gang_key, is_bare
from baton.proto import ids, keys
from baton.proto.actions import Binding, EvictGang, RecreatePod
from baton.proto.k8s import Pod
from baton.proto.placement import GangRestarted
from baton.services.gang.core.gangs import Cluster, Gang

NODE_DELETED = "node deleted"
NODE_DRAINING = f"node draining ({keys.DRAINING})"

Restart = EvictGang | RecreatePod | GangRestarted


def failure(state: NodeView | None, pod: Pod) -> str:
    """Why ``pod`` cannot keep running on this node ('' if it can). None: node deleted."""
    if state is None:
        return NODE_DELETED
    taints = state.node.taints
    if any(t.key == keys.DRAINING for t in taints):
        return NODE_DRAINING
    for taint in taints:
        if taint.effect == "NoExecute" and not any(t.tolerates(taint) for t in pod.tolerations):
            return f"node tainted {taint.key}:NoExecute"
    return ""


def no_kubelet(state: NodeView | None) -> bool:
    """Nothing will stop the node's pods gracefully: deleted, or not Ready."""
    return state is None or not state.node.ready


def check_node(cluster: Cluster, name: str, *, recreate: bool, now: float) -> list[Restart]:
    """Restart every running gang with a member on this node, if the node failed it."""
    outputs: list[Restart] = []
    state = cluster.nodes.get(name)
    for pod in cluster.pods_on(name):
        gang = cluster.gangs.get(gang_key(pod))
        if gang is None or gang.restarting or pod.key not in gang.bound:
            continue
        reason = failure(state, pod)
        if reason:
            outputs += restart(cluster, gang, node=name, reason=reason, recreate=recreate, now=now,
                               forced=no_kubelet(state))  # fmt: skip
    return outputs


def restart(
    cluster: Cluster, gang: Gang, *, node: str, reason: str, recreate: bool, now: float,
    forced: bool = False, grace: int | None = None,
) -> list[Restart]:  # fmt: skip
    """Every member off at once (``grace``: their termination grace; None: their own);
    also how a gang is preempted (``node`` '': no node failed)."""
    pods = [cluster.pods[k] for k in sorted(gang.bound) if k in cluster.pods]
    gang.restarting = True
    gang.restarts += 1
    bare = [p for p in pods if recreate and is_bare(p)]
    evicted = [p for p in pods if p not in bare]
    outputs: list[Restart] = []
    if evicted:
        uid = gang.group.uid if gang.group is not None else evicted[0].uid
        outputs.append(
            EvictGang(
                id=ids.make("evict", uid, "restart", *sorted(p.uid for p in evicted)),
                by="gang",
                at=now,
                reason=f"{reason} ({node})" if node else reason,
                gang=gang.key,
                pods=tuple(
                    Binding(namespace=p.namespace, pod=p.name, uid=p.uid, node=p.node_name)
                    for p in evicted
                ),
                grace_seconds=grace,
            )
        )
    outputs += [
        RecreatePod(
            id=ids.make("recreate", p.uid, "recreate"),
            by="gang",
            at=now,
            reason=f"gang restart {gang.restarts}: {reason}" + (f" ({node})" if node else ""),
            gang=gang.key,
            namespace=p.namespace,
            pod=p.name,
            uid=p.uid,
            grace_seconds=0 if forced and p.node_name == node else grace,
        )
        for p in bare
    ]
    outputs.append(
        GangRestarted(
            gang=gang.key,
            at=now,
            reason=reason,
            node=node,
            evicted=len(pods),
            recreated=len(bare),
            restarts=gang.restarts,
        )
    )
    return outputs
