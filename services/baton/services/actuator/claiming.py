"""A gang's DRA ResourceClaims: written before any member is bound, undone with them.

``claim_all``: every member's claims (``Binding.claims``, in the pod's namespace) are
judged (``core.claims.judge``) and written through the ``status`` subresource, a merge
patch carrying the resourceVersion judged (a 409: someone changed the claim meanwhile,
so it is read and judged again, up to ``REREADS`` times; it never overwrites another's
write). A claim the decision found unallocated carries the resourceVersion it was
found at, and is judged as that and written at once: one request instead of a read and
a write, the common case of a gang's freshly made claims. Any change since (another
allocation, a deletion, a claim made again under the name) is a 409, and the claim
is then read as any other. ``concurrency`` at once; after the first failure no new
claim is started. The pod each is reserved for is ``Binding.uid``, or the pod as read.

``release``: undo what ``claim_all`` wrote (``core.claims.plan_release``): each claim
is read again and changed only where it still holds what this action wrote.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import msgspec

from baton.libs.kube import dra as kube_dra
from baton.proto.actions import Binding
from baton.proto.dra import ClaimAllocation
from baton.services.actuator.calling import MERGE, ApiError, Obj, Session, bounded
from baton.services.actuator.core.claims import (
    Claimed,
    Consumer,
    Held,
    Release,
    Write,
    judge,
    plan_release,
    released,
)

REREADS = 5


async def claim_all(
    s: Session, bindings: Sequence[Binding], *, concurrency: int
) -> tuple[Claimed, ...]:
    """Allocate and reserve every member's claims; what happened to each, in order."""
    claiming = [b for b in bindings if b.claims]
    if not claiming:
        return ()
    pods = await bounded(claiming, lambda b: _consumer(s, b), limit=concurrency)
    work = [(b, pod, want) for b, pod in zip(claiming, pods, strict=True) for want in b.claims]
    stop = asyncio.Event()

    async def one(item: tuple[Binding, Consumer | str, ClaimAllocation]) -> Claimed:
        b, pod, want = item
        if stop.is_set():
            got = Claimed(binding=b, claim=want, state="skipped")
        elif isinstance(pod, str):
            got = Claimed(binding=b, claim=want, state="failed", error=pod)
        else:
            got = await _claim_safely(s, b, want, pod)
        if got.state == "failed":
            stop.set()
        return got

    return tuple(await bounded(work, one, limit=concurrency))


async def release(s: Session, claimed: tuple[Claimed, ...], *, concurrency: int) -> int:
    """Undo what was written; returns how many claims it had written. Raises ApiError
    if one cannot be undone (the action is retried)."""
    steps = plan_release(claimed)
    await bounded(steps, lambda step: _release_one(s, step), limit=concurrency)
    return len(steps)


async def _consumer(s: Session, b: Binding) -> Consumer | str:
    """The pod's ``reservedFor`` entry, or why there is none. Never raises (``bounded``)."""
    if b.uid:
        return Consumer(name=b.pod, uid=b.uid)
    try:
        pod = await s.call("get", s.api.core.read_namespaced_pod, b.pod, b.namespace)
    except ApiError as exc:
        return f"pod {b.namespace}/{b.pod} not found" if exc.status == 404 else str(exc)
    return Consumer(name=b.pod, uid=str(pod.get("metadata", {}).get("uid", "")))


async def _claim_safely(s: Session, b: Binding, want: ClaimAllocation, pod: Consumer) -> Claimed:
    try:
        return await _claim_one(s, b, want, pod)
    except ApiError as exc:
        return Claimed(binding=b, claim=want, state="failed", error=str(exc), pod=pod)
    except Exception as exc:  # our bug or a broken connection: the gang is rolled back
        error = f"{type(exc).__name__}: {exc}"
        return Claimed(binding=b, claim=want, state="failed", error=error, pod=pod)


async def _claim_one(s: Session, b: Binding, want: ClaimAllocation, pod: Consumer) -> Claimed:
    if want.resource_version and want.uid:  # as the decision found it: unallocated
        seen = Held(uid=want.uid, resource_version=want.resource_version)
        state, write, error = judge(seen, want, pod=pod, node=b.node)
        if write is not None and await _write_seen(s, b.namespace, want.name, write, seen):
            return Claimed(binding=b, claim=want, state=state, error=error, pod=pod, uid=want.uid)
    for _ in range(REREADS):
        held = await _read(s, b.namespace, want.name)
        state, write, error = judge(held, want, pod=pod, node=b.node)
        uid = held.uid if held is not None else ""
        done = Claimed(binding=b, claim=want, state=state, error=error, pod=pod, uid=uid)
        if write is None or await _write(s, b.namespace, want.name, write, rv=_rv(held)):
            return done
    error = f"changed by someone else each of the {REREADS} times it was written (409)"
    return Claimed(binding=b, claim=want, state="failed", error=error, pod=pod)


async def _release_one(s: Session, step: Release) -> None:
    for _ in range(REREADS):
        held = await _read(s, step.namespace, step.name)
        write = released(held, step)
        if write is None or await _write(s, step.namespace, step.name, write, rv=_rv(held)):
            return
    raise ApiError(409, f"still conflicting after {REREADS} re-reads", reason="Conflict")


async def _write_seen(s: Session, namespace: str, name: str, write: Write, seen: Held) -> bool:
    """``_write`` from what the decision saw; False when that is not what is there now
    (409: changed; 404: gone), for the caller to read it."""
    try:
        return await _write(s, namespace, name, write, rv=seen.resource_version)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise


def _rv(held: Held | None) -> str:
    return held.resource_version if held is not None else ""


async def _read(s: Session, namespace: str, name: str) -> Held | None:
    try:
        got = await s.call("get", s.api.resource.read_namespaced_resource_claim, name, namespace)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return held_of(got)


async def _write(s: Session, namespace: str, name: str, write: Write, *, rv: str) -> bool:
    """Patch the claim's status from resourceVersion ``rv``; False on a 409."""
    body = {"metadata": {"resourceVersion": rv}, "status": status_of(write)}
    patch = s.api.resource.patch_namespaced_resource_claim_status
    try:
        await s.call("patch", patch, name, namespace, body, _content_type=MERGE)
    except ApiError as exc:
        if exc.status == 409:
            return False
        raise
    return True


def held_of(claim: Obj) -> Held:
    """The allocation and reservations of a ResourceClaim as the API returns it, read as
    the bridge reads claims (``libs.kube.dra``)."""
    raw = msgspec.convert(claim, kube_dra.WireResourceClaim)
    slim = kube_dra.resource_claim(raw)
    reserved = tuple(
        Consumer(name=c.name, uid=c.uid, resource=c.resource, api_group=c.api_group)
        for c in raw.status.reserved_for or ()
    )
    return Held(
        uid=slim.uid, resource_version=slim.resource_version,
        deleting=raw.metadata.deletion_timestamp is not None,
        allocated=raw.status.allocation is not None, results=slim.allocated, node=slim.node,
        reserved_for=reserved,
    )  # fmt: skip


def status_of(write: Write) -> Obj:
    """The ``status`` a merge patch sets for ``write`` (null removes a field)."""
    reserved = [_entry(c) for c in write.reserved_for] or None
    if write.kind == "clear":
        return {"allocation": None, "reservedFor": None}
    if write.kind != "allocate":
        return {"reservedFor": reserved}
    results = [{"request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device}
               for r in write.results]  # fmt: skip
    selector = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [write.node]}]}]}  # fmt: skip
    return {"allocation": {"devices": {"results": results}, "nodeSelector": selector},
            "reservedFor": reserved}  # fmt: skip


def _entry(c: Consumer) -> Obj:
    return {**({"apiGroup": c.api_group} if c.api_group else {}), "resource": c.resource,
            "name": c.name, "uid": c.uid}  # fmt: skip
