"""Active checks: preflight pods on new, returning and idle nodes.

A node in ``validating`` carries the ``baton.io/preflight`` NoSchedule taint and gets
a preflight pod once a test slot is free (``slots``: new and returning nodes take up to
``testing_share`` of the cluster at once, at least ``max_testing``; periodic checks,
which take in-service nodes out, ``max_testing``),
no other GPU pod runs there (balloons are evicted first: a balloon only holds
capacity) and the node shows the taint (seen back on a node event: the taint is on
the API before the pod is asked for, so a gang placed before the taint is refused by
the actuator rather than sharing the GPUs). The pod is created through the actuator,
bound to the node (``nodeName``), tolerating Baton's taints, labelled
``baton.io/preflight: "true"``, asking for every GPU of the node, and runs
``preflight_command`` (DCGM's ``dcgmi diag -r 2`` by default). Succeeded: the node
passes. Failed, or not done within ``preflight_timeout_s``: the node fails (latched
``preflight`` evidence). A pod that never appears (its create failed: no namespace, a
quota) says nothing about the node: it is asked for again, backing off up to
``RETRY_MAX_S``, and the node waits.

Periodic checks keep a coverage goal: every node is validated at least every
``recheck_days``. A due node is checked only while idle (no GPU pod but balloons),
balloon-held nodes first, then the longest unchecked. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from baton.libs.view import GangView, View, is_preemptible
from baton.proto import ids, keys
from baton.proto.actions import ActionResult, CreatePod, DeletePod, Evict, PodTemplate
from baton.proto.health import HealthPolicy
from baton.proto.k8s import GPU, Pod, Toleration
from baton.services.health.core import rules
from baton.services.health.core.nodes import INF, Check, NodeRecord

DAY = 86_400.0
RETRY_S, RETRY_MAX_S = 5.0, 300.0  # a pod that never appeared is asked for again
Output = CreatePod | DeletePod | Evict
PREFLIGHT_TOLERATIONS = (
    Toleration(key=keys.PREFLIGHT, operator="Exists"),
    Toleration(key=keys.UNHEALTHY, operator="Exists"),
    Toleration(key=keys.DRAINING, operator="Exists"),
)


def is_preflight(pod: Pod) -> bool:
    return pod.labels.get(keys.PREFLIGHT) == "true"


def gpu_pods(view: View[GangView], node: str) -> list[Pod]:
    """GPU pods running (or bound) on the node, preflight pods aside."""
    return [p for p in view.pods_on(node) if p.requests.get(GPU, 0) > 0 and not is_preflight(p)]


def workload(view: View[GangView], node: str) -> list[Pod]:
    """Pods that do real work on the node's GPUs (balloons only hold capacity)."""
    return [p for p in gpu_pods(view, node) if not is_preemptible(p)]


def pod_name(node: str, at: float) -> str:
    """``preflight-<node>-<digest>``: unique per ask, a valid pod name for any node name."""
    stem = node[:200].rstrip(".-")
    return f"preflight-{stem}-{ids.digest(node, repr(at))[:8]}"


def template(policy: HealthPolicy, *, node: str, name: str, gpus: int) -> PodTemplate:
    return PodTemplate(
        namespace=policy.preflight_namespace,
        name=name,
        labels={keys.PREFLIGHT: "true"},
        image=policy.preflight_image,
        command=policy.preflight_command,
        restart_policy="Never",
        requests={GPU: gpus} if gpus else {},
        node_name=node,
        tolerations=PREFLIGHT_TOLERATIONS,
    )


def slots(policy: HealthPolicy, nodes: int) -> int:
    """New and returning nodes under test at once: a share of the cluster, at least
    ``max_testing``. Such a node runs nothing yet, so testing it costs no capacity, only
    API writes (paced by the actuator) and image pulls: a fixed handful took a new
    7,500-node cluster hours to validate."""
    return max(policy.max_testing, int(policy.testing_share * nodes))


def tainted(rec: NodeRecord) -> bool:
    """The node shows its preflight taint (seen back from the API): only then is the pod
    asked for. A gang bound there by a placement made before the taint is then refused
    by the actuator (it checks the node's taints under the node's lock, and the pod is
    created under the same lock after a read that shows the taint)."""
    return keys.PREFLIGHT in rec.shown


def due_at(rec: NodeRecord, policy: HealthPolicy) -> float:
    """When the node is next due for a periodic check (0: never validated: now)."""
    if not policy.preflight:
        return INF
    return rec.validated + policy.recheck_days * DAY if rec.validated else 0.0


@dataclass(slots=True)
class Asked:
    outputs: list[Output]
    waiting: str  # '' once the pod is asked for; else why the check waits


def ask(
    view: View[GangView], rec: NodeRecord, check: Check, policy: HealthPolicy, now: float
) -> Asked:
    """Make way for the preflight pod (evict balloons), then ask for it."""
    held = gpu_pods(view, rec.name)
    balloons = [p for p in held if is_preemptible(p)]
    if len(balloons) < len(held):
        return Asked([], "waiting for GPU pods to leave the node")
    if balloons:
        evictions: list[Output] = [
            Evict(id=ids.make("evict", p.uid, "preflight"), by="health", at=now,
                  priority="validation", reason=f"preflight check of {rec.name}",
                  namespace=p.namespace, pod=p.name, uid=p.uid)
            for p in balloons
        ]  # fmt: skip
        return Asked(evictions, "waiting for balloons to leave the node")
    state = view.nodes.get(rec.name)
    gpus = state.node.allocatable.get(GPU, 0) if state is not None else 0
    name = pod_name(rec.name, now)
    action = CreatePod(
        id=ids.make("preflight", rec.uid, name), by="health", at=now, priority="validation",
        reason=f"preflight ({check.why}) of {rec.name}",
        pod=template(policy, node=rec.name, name=name, gpus=gpus),
    )  # fmt: skip
    check.pod, check.action, check.asked, check.seen = name, action.id, now, False
    check.tries += 1
    return Asked([action], "")


def cleanup(rec: NodeRecord, policy: HealthPolicy, now: float) -> list[Output]:
    """Delete the node's preflight pod, if one was asked for and has not passed (one that
    passed holds nothing: ``sweeping`` deletes it later, with the others)."""
    check = rec.check
    if check is None or not check.pod or check.passed:
        return []
    return [
        DeletePod(id=ids.make("delete", check.pod, "preflight"), by="health", at=now,
                  priority="validation", reason="preflight done",
                  namespace=policy.preflight_namespace, pod=check.pod, grace_seconds=0)
    ]  # fmt: skip


def on_pod(rec: NodeRecord, pod: Pod, *, deleted: bool, now: float, policy: HealthPolicy) -> str:
    """What the node's preflight pod says: 'passed', 'failed', 'gone' or ''."""
    check = rec.check
    if check is None or pod.name != check.pod or check.passed:
        return ""
    check.seen = True
    if pod.phase == "Succeeded":
        check.passed = now
        return "passed"
    if pod.phase == "Failed":
        fail(rec, f"preflight pod {pod.name} failed", now=now, policy=policy)
        return "failed"
    if deleted:
        check.pod = ""  # someone removed it before it finished: ask again
        return "gone"
    return ""


def on_result(rec: NodeRecord, result: ActionResult) -> bool:
    """A failed create: ask again later (``retry_at``). True if the result is ours."""
    check = rec.check
    if check is None or result.action_id != check.action:
        return False
    if result.outcome in ("failed", "stale") and not result.fenced:  # fenced: a deposed
        # leader's copy; this leader's own copy of the same create is judged apart
        check.pod = ""
    return True


def overdue(rec: NodeRecord, policy: HealthPolicy, now: float) -> str:
    """Why the check in progress has failed by now ('' if it has not)."""
    check = rec.check
    if check is None or check.passed:
        return ""
    if check.pod and check.seen and now >= check.asked + policy.preflight_timeout_s:
        return f"preflight pod {check.pod} did not finish within {policy.preflight_timeout_s:g} s"
    return ""


def lost(rec: NodeRecord, policy: HealthPolicy, now: float) -> list[Output]:
    """The pod asked for never appeared within the timeout: not the node's fault; ask
    again, and delete the old one in case it shows up late (it would hold the GPUs)."""
    check = rec.check
    if check is None or check.passed or not check.pod or check.seen:
        return []
    if now < check.asked + policy.preflight_timeout_s:
        return []
    gone = cleanup(rec, policy, now)
    check.pod = ""
    return gone


def retry_at(check: Check) -> float:
    """When a check whose pod never appeared asks again: backing off per try."""
    return check.asked + min(RETRY_S * 2.0 ** max(check.tries - 1, 0), RETRY_MAX_S)


def fail(rec: NodeRecord, detail: str, *, now: float, policy: HealthPolicy) -> None:
    rec.start("preflight", rules.PREFLIGHT, detail, now=now, source="preflight", policy=policy)


def check_deadline(rec: NodeRecord, policy: HealthPolicy) -> float:
    check = rec.check
    if check is None or check.passed or not check.pod:
        return INF
    return check.asked + policy.preflight_timeout_s


def order(view: View[GangView], candidates: Sequence[NodeRecord]) -> list[NodeRecord]:
    """Periodic checks: balloon-held nodes first, then the longest unchecked."""

    def key(rec: NodeRecord) -> tuple[int, float, str]:
        held = any(is_preemptible(p) for p in gpu_pods(view, rec.name))
        return (0 if held else 1, rec.validated, rec.name)

    return sorted(candidates, key=key)
