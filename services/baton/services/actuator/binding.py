"""Binding a gang all-or-nothing, rolling back a partial one, and evicting gangs.

0. delete the placeholders (balloons) the gang takes the place of, if any: one that
   cannot be deleted fails the action before anything is bound;
1. inside each target node's gate (``calling.node_gate``), check every target node
   exists and carries none of Baton's taints that keep pods off (``KEEP_OFF``: a
   preflight or a quarantine the gang service had not seen when it decided; a short
   cache, reads are not rate limited), so such a gang binds nothing at all and is
   placed again;
2. still inside the gates, allocate every member's DRA ResourceClaims on its node and
   reserve them for it (``claiming``, as kube-scheduler's PreBind does); if one fails,
   release those written and bind nothing;
3. bind members concurrently (bounded) through ``pods/binding``; stop starting new
   binds at the first failure;
   (the gates are held until the binds are done: a preflight pod created on one of
   these nodes by name waits, then finds the GPUs taken);
4. on any failure, undo every member this gang bound (see ``gangs``), then release the
   claims this action wrote (``core.claims``): the gang is reported ``rolled-back`` and
   the gang service decides again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from baton.proto.actions import BindGang, Binding, Outcome
from baton.services.actuator import claiming, podspec
from baton.services.actuator.calling import (
    ApiError,
    Obj,
    Session,
    bounded,
    node_gate,
    node_marks,
)
from baton.services.actuator.core import claims
from baton.services.actuator.core.claims import Claimed
from baton.services.actuator.core.gangs import (
    Member,
    Undo,
    gang_error,
    gang_outcome,
    plan_rollback,
    to_undo,
)

Applied = tuple[Outcome, str]
Marks = dict[str, tuple[str, ...] | None]  # node -> Baton's taints keeping pods off; None: gone
RECREATE_TRIES = 20


async def bind_gang(s: Session, action: BindGang, *, concurrency: int) -> Applied:
    if action.evict:  # balloons on the target nodes go first, or nothing is bound
        errors = [e for e in await bounded(action.evict, lambda b: _drop(s, b), limit=concurrency)
                  if e]  # fmt: skip
        if errors:
            return "failed", "placeholders not removed, nothing bound: " + "; ".join(errors)
    nodes = sorted({b.node for b in action.bindings})
    members: tuple[Member, ...] = ()
    async with contextlib.AsyncExitStack() as held:
        for node in nodes:  # in name order: no two actions wait on each other in a cycle
            await held.enter_async_context(node_gate(s.api, node).shared())
        marks = dict(zip(nodes, await bounded(nodes, lambda n: node_marks(s, n),
                                              limit=concurrency), strict=True))  # fmt: skip
        claimed = await _claim(s, action, marks, concurrency=concurrency)
        if not claims.failed(claimed):
            members = await _bind_all(s, action, marks, concurrency=concurrency)
    outcome = claims.outcome(gang_outcome(members), claimed)
    if outcome != "rolled-back":
        return outcome, ""
    return outcome, await _undo_all(s, members, claimed, concurrency=concurrency)


async def _claim(
    s: Session, action: BindGang, marks: Marks, *, concurrency: int
) -> tuple[Claimed, ...]:
    """The members' ResourceClaims, allocated and reserved; none when a node already
    fails the gang (its binds say why)."""
    if any(found is None or found for found in marks.values()):
        return ()
    return await claiming.claim_all(s, action.bindings, concurrency=concurrency)


async def _undo_all(
    s: Session, members: tuple[Member, ...], claimed: tuple[Claimed, ...], *, concurrency: int
) -> str:
    """Roll back the members bound, then release the claims written; returns the error."""
    if claims.failed(claimed):  # nothing was bound
        undone = await claiming.release(s, claimed, concurrency=concurrency)
        return claims.claims_error(claimed, undone=undone)
    await roll_back(s, members, concurrency=concurrency)
    undone = await claiming.release(s, claimed, concurrency=concurrency)
    return gang_error(members) + claims.released_note(undone)


async def _bind_all(
    s: Session, action: BindGang, marks: Marks, *, concurrency: int
) -> tuple[Member, ...]:
    failed = asyncio.Event()

    async def one(b: Binding) -> Member:
        found = marks[b.node]
        if found is None:
            failed.set()
            return Member(binding=b, state="failed", error=f"node {b.node} not found")
        if found:
            failed.set()
            return Member(
                binding=b,
                state="failed",
                error=(f"node {b.node} carries {', '.join(found)} (NoSchedule): not bound there"),
            )
        if failed.is_set():
            return Member(binding=b, state="skipped")
        try:
            member = await bind_one(s, b)
        except Exception as exc:  # our bug or a broken connection: still roll back
            member = Member(binding=b, state="failed", error=f"{type(exc).__name__}: {exc}")
        if member.state == "failed":
            failed.set()
        return member

    return tuple(await bounded(action.bindings, one, limit=concurrency))


async def _drop(s: Session, b: Binding) -> str:
    """Delete one placeholder; '' when gone, else why not. Never raises: a child that
    raises in ``bounded``'s TaskGroup leaves this task marked cancelling on Python 3.11."""
    try:
        await _delete(s, b.namespace, b.pod, uid=b.uid)
    except ApiError as exc:
        return f"{b.namespace}/{b.pod}: {exc}"
    return ""


async def bind_one(s: Session, b: Binding) -> Member:
    meta: Obj = {"name": b.pod, "namespace": b.namespace, **({"uid": b.uid} if b.uid else {})}
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": b.node}}  # fmt: skip
    try:
        await s.call("create", s.api.core.create_namespaced_pod_binding, b.pod, b.namespace, body)
    except ApiError as exc:
        if exc.status == 409:
            return await _why_conflict(s, b, exc)
        if exc.status == 404:
            return Member(binding=b, state="failed", error=f"pod {b.namespace}/{b.pod} not found")
        return Member(binding=b, state="failed", error=str(exc))
    return Member(binding=b, state="bound")


async def _why_conflict(s: Session, b: Binding, exc: ApiError) -> Member:
    """A 409 on a binding: already bound (here: fine; elsewhere: failed) or replaced."""
    try:
        pod = await s.call("get", s.api.core.read_namespaced_pod, b.pod, b.namespace)
    except ApiError as again:
        return Member(binding=b, state="failed", error=f"{exc}; then {again}")
    node = pod.get("spec", {}).get("nodeName", "")
    uid = pod.get("metadata", {}).get("uid", "")
    if b.uid and uid != b.uid:
        return Member(binding=b, state="failed", error=f"pod was replaced (uid {uid}, not {b.uid})")
    if node == b.node:
        return Member(binding=b, state="already")
    return Member(
        binding=b, state="failed", error=f"pod already bound to {node or '?'}: {exc.message}"
    )


async def roll_back(s: Session, members: tuple[Member, ...], *, concurrency: int) -> None:
    """Undo every bound member. Raises ApiError if one cannot be undone (retry later)."""
    undo = to_undo(members)
    pods = await bounded(undo, lambda m: _read_or_none(s, m.binding), limit=concurrency)
    found = {
        f"{m.binding.namespace}/{m.binding.pod}": p for m, p in zip(undo, pods, strict=True) if p
    }
    controlled = {key: podspec.has_controller(pod) for key, pod in found.items()}
    steps = plan_rollback(members, controlled=controlled)
    await bounded(
        steps, lambda step: _undo(s, step, found[f"{step.namespace}/{step.pod}"]), limit=concurrency
    )


async def _read_or_none(s: Session, b: Binding) -> Obj | None:
    try:
        return await s.call("get", s.api.core.read_namespaced_pod, b.pod, b.namespace)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


async def _undo(s: Session, step: Undo, pod: Obj) -> None:
    uid = step.uid or pod.get("metadata", {}).get("uid", "")
    await _delete(s, step.namespace, step.pod, uid=uid)
    if step.how == "delete":
        return
    body = podspec.unbound_copy(pod)
    core = s.api.core
    for attempt in range(1, RECREATE_TRIES + 1):
        try:
            await s.call("create", core.create_namespaced_pod, step.namespace, body)
            return
        except ApiError as exc:  # 409: the old pod is still terminating
            if exc.status != 409 or attempt == RECREATE_TRIES:
                raise
            await asyncio.sleep(min(0.05 * attempt, 1.0))


async def _delete(s: Session, namespace: str, pod: str, *, uid: str) -> None:
    options: Obj = {"gracePeriodSeconds": 0, **({"preconditions": {"uid": uid}} if uid else {})}
    try:
        await s.call("delete", s.api.core.delete_namespaced_pod, pod, namespace, body=options)
    except ApiError as exc:
        if exc.status != 404:
            raise


async def evict_all(
    s: Session,
    pods: Sequence[tuple[str, str, str]],
    *,
    concurrency: int = 64,
    grace_seconds: int | None = None,
) -> Applied:
    """Evict each (namespace, pod, uid) through ``pods/eviction``; a pod already gone is
    fine. ``grace_seconds``: the pods' termination grace (None: their own)."""

    async def one(target: tuple[str, str, str]) -> bool:
        namespace, pod, uid = target
        body: Obj = {"apiVersion": "policy/v1", "kind": "Eviction",
                     "metadata": {"name": pod, "namespace": namespace}}  # fmt: skip
        options: Obj = {}
        if uid:
            options["preconditions"] = {"uid": uid}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        if options:
            body["deleteOptions"] = options
        try:
            await s.call("create", s.api.core.create_namespaced_pod_eviction, pod, namespace, body)
        except ApiError as exc:
            if exc.status == 404:
                return False
            if exc.status == 409 and uid:  # the uid precondition: that pod is gone
                return False
            raise
        return True

    evicted = await bounded(pods, one, limit=concurrency)
    return ("applied" if any(evicted) else "already"), ""
