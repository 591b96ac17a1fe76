"""Recreating a pod in place (``RecreatePod``): a faithful, unbound copy, same name.

1. read the live pod. One of that name with another uid is our copy from an earlier
   attempt (``already``, it carries ``baton.io/recreated-from: <old uid>``) or
   someone else's (left alone: ``failed``, saying so);
2. a pod with a controller is only deleted: its controller makes the replacement;
3. copy it (``podspec.unbound_copy``) and keep the copy in memory until it is
   created, so a retry after the delete (a webhook that is not ready, a 5xx) still
   has it;
4. delete the old pod (uid precondition, the action's grace period or the pod's own)
   and wait until it is gone: a bound pod lingers, terminating, until its kubelet has
   stopped it, and its name cannot be reused before. Still there after its grace
   period plus a margin: a retryable error (the next attempt waits again);
5. create the copy.

A copy lost between the delete and the create (the actuator killed in between) cannot
be made again: the live pod was its only source. The next attempt says the pod is gone.
"""

from __future__ import annotations

import asyncio

from baton.proto.actions import Outcome, RecreatePod
from baton.proto.keys import RECREATED_FROM
from baton.services.actuator import podspec
from baton.services.actuator.calling import ApiError, Obj, Session

Applied = tuple[Outcome, str]
DEFAULT_GRACE_S = 30  # Kubernetes' default terminationGracePeriodSeconds
GONE_MARGIN_S = 10.0  # waited beyond the grace period for the old pod to go
MAX_WAIT_S = 60.0  # the longest one attempt waits; a longer grace takes more attempts
COPIES_LIMIT = 10_000  # copies held for retries; the oldest is forgotten beyond


async def recreate_pod(s: Session, action: RecreatePod) -> Applied:
    where, copies = f"{action.namespace}/{action.pod}", s.api.copies
    live = await _read(s, action)
    if live is None:
        body = copies.get(action.uid)
        if body is None:
            return "failed", f"pod {where} (uid {action.uid}) is gone: nothing left to copy"
        return await _create(s, action, body)  # deleted by an earlier attempt
    if _uid(live) != action.uid:
        copies.pop(action.uid, None)
        return _replaced(live, action)
    if podspec.has_controller(live):
        await _delete(s, action, live)
        return "applied", ""
    body = copies[action.uid] = podspec.unbound_copy(live)
    while len(copies) > COPIES_LIMIT:
        copies.pop(next(iter(copies)))
    await _delete(s, action, live)
    await _until_gone(s, action, within=wait_s(action, live))
    return await _create(s, action, body)


def _replaced(live: Obj, action: RecreatePod) -> Applied:
    """A pod of the name with another uid: our copy, or someone else's pod."""
    uid = _uid(live)
    if (live.get("metadata", {}).get("annotations") or {}).get(RECREATED_FROM) == action.uid:
        return "already", ""
    where = f"{action.namespace}/{action.pod}"
    return "failed", f"pod {where} was replaced by someone else (uid {uid}, not {action.uid})"


async def _read(s: Session, action: RecreatePod) -> Obj | None:
    try:
        return await s.call("get", s.api.core.read_namespaced_pod, action.pod, action.namespace)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


async def _delete(s: Session, action: RecreatePod, live: Obj) -> None:
    if live.get("metadata", {}).get("deletionTimestamp") and action.grace_seconds is None:
        return  # already terminating: deleting again changes nothing
    options: Obj = {"preconditions": {"uid": action.uid}}
    if action.grace_seconds is not None:
        options["gracePeriodSeconds"] = action.grace_seconds
    core = s.api.core
    try:
        await s.call(
            "delete", core.delete_namespaced_pod, action.pod, action.namespace, body=options
        )
    except ApiError as exc:
        if exc.status != 404:  # gone already: fine. 409: replaced meanwhile, read again
            raise


def wait_s(action: RecreatePod, live: Obj) -> float:
    """How long one attempt waits for the deleted pod to go: its grace period (the
    action's, the one it is already terminating with, or its own) plus a margin."""
    grace = action.grace_seconds
    if grace is None:
        grace = live.get("metadata", {}).get("deletionGracePeriodSeconds")
    if grace is None:
        grace = live.get("spec", {}).get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
    return min(float(grace) + GONE_MARGIN_S, MAX_WAIT_S)


async def _until_gone(s: Session, action: RecreatePod, *, within: float) -> None:
    loop = asyncio.get_running_loop()
    deadline, pause = loop.time() + within, 0.02
    while (live := await _read(s, action)) is not None and _uid(live) == action.uid:
        if loop.time() >= deadline:
            where = f"{action.namespace}/{action.pod}"
            raise ApiError(
                504, f"pod {where} still terminating after {within:.0f} s", reason="Timeout"
            )
        await asyncio.sleep(pause)
        pause = min(pause * 2, 1.0)


async def _create(s: Session, action: RecreatePod, body: Obj) -> Applied:
    core = s.api.core
    try:
        await s.call("create", core.create_namespaced_pod, action.namespace, body)
    except ApiError as exc:
        if exc.status != 409:
            raise  # the copy stays in memory for the next attempt
        live = await _read(s, action)  # someone took the name first, or our create landed
        if live is None or _uid(live) == action.uid:
            raise
        outcome, error = _replaced(live, action)
        s.api.copies.pop(action.uid, None)
        return ("applied" if outcome == "already" else outcome), error
    s.api.copies.pop(action.uid, None)
    return "applied", ""


def _uid(pod: Obj) -> str:
    return str(pod.get("metadata", {}).get("uid", ""))
