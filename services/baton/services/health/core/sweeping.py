"""Sweeping the preflight pods that passed: a few at a time, after everything else.

A passed preflight pod holds nothing (it Succeeded), so deleting it can wait: the
``DeletePod`` is of the balloon class, applied when binds, marks and new checks leave
the write budget room. But an action waiting for tokens holds a place in the
actuator's delivery window (1,024 unanswered per consumer), which health's other
writes and admission's marks share. A new 7,500-node cluster's sweeps, asked all at
once, filled it, and the preflight pods and admission marks behind them were not
delivered; made validation-class instead, the 7,500 deletes took budget the checks
needed (every node validated at 272-281 s either way). So at most ``AT_ONCE`` sweeps
are asked at a time, the next when one is answered.

Which pods: every preflight pod seen Succeeded (its node's check has read it by then:
the core sees the event first), so a restart that lists the pods again sweeps what the
last run left. Pure.
"""

from __future__ import annotations

from baton.proto import ids
from baton.proto.actions import ActionResult, DeletePod
from baton.proto.k8s import Pod
from baton.services.health.core.checks import is_preflight
from baton.services.health.core.model import State

AT_ONCE = 32


def on_pod(s: State, pod: Pod, *, deleted: bool, now: float) -> list[DeletePod]:
    """A passed preflight pod is queued for its sweep; a deleted one leaves the queue."""
    if not is_preflight(pod):
        return []
    if deleted:
        s.sweeps.pop(pod.key, None)
        return []
    if pod.phase != "Succeeded" or pod.key in s.sweeps or pod.key in s.sweeping.values():
        return []
    s.sweeps[pod.key] = (pod.namespace, pod.name)
    return more(s, now)


def on_result(s: State, result: ActionResult, now: float) -> list[DeletePod] | None:
    """A sweep answered frees its place for the next (None: not a sweep)."""
    if s.sweeping.pop(result.action_id, None) is None:
        return None
    return more(s, now)


def more(s: State, now: float) -> list[DeletePod]:
    out: list[DeletePod] = []
    while s.sweeps and len(s.sweeping) < AT_ONCE:
        key = next(iter(s.sweeps))
        namespace, name = s.sweeps.pop(key)
        action = DeletePod(
            id=ids.make("delete", name, "preflight"), by="health", at=now, priority="balloon",
            reason="preflight passed", namespace=namespace, pod=name, grace_seconds=0,
        )  # fmt: skip
        s.sweeping[action.id] = key
        out.append(action)
    return out
