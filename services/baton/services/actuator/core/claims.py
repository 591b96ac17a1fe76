"""DRA claims in a gang bind, all or nothing (pure): what to write to each claim, what
to undo, and what the result says.

Before any member of a gang is bound, each member's ResourceClaims are allocated on its
node and reserved for it, as kube-scheduler's DRA plugin does in PreBind (``judge``):

| the claim as read                                   | write               | state     |
|-----------------------------------------------------|---------------------|-----------|
| gone, being deleted, or not of the action's uid    | nothing             | failed    |
| not allocated                                       | allocation, [pod]   | allocated |
| allocated the same (devices, node), pod reserved    | nothing             | already   |
| allocated the same, pod not reserved, room left     | reservedFor + pod   | reserved  |
| allocated otherwise, or reserved for 256 already    | nothing             | failed    |

If any claim fails, or a bind after them, what this action wrote is undone
(``plan_release``, ``released``): a claim it allocated is cleared, one it only reserved
loses its reservations; a claim allocated before this action (``already``) is never
touched, and neither is one that someone changed since (other devices, another uid).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import msgspec

from baton.proto.actions import Binding, Outcome
from baton.proto.dra import ClaimAllocation, DeviceResult

MAX_RESERVED = 256  # ResourceClaimReservedForMaxSize: consumers one claim may have
ClaimState = Literal["allocated", "reserved", "already", "failed", "skipped"]
WriteKind = Literal["allocate", "reserve", "unreserve", "clear"]


class Consumer(msgspec.Struct, frozen=True, kw_only=True):
    """One ``status.reservedFor`` entry."""

    name: str
    uid: str
    resource: str = "pods"
    api_group: str = ""


class Held(msgspec.Struct, frozen=True, kw_only=True):
    """What the actuator reads of a ResourceClaim: its allocation (``node`` from the
    allocation's node selector, "" when it has none) and whom it is reserved for."""

    uid: str
    resource_version: str = ""
    deleting: bool = False  # it has a deletionTimestamp
    allocated: bool = False
    results: tuple[DeviceResult, ...] = ()
    node: str = ""
    reserved_for: tuple[Consumer, ...] = ()


class Write(msgspec.Struct, frozen=True, kw_only=True):
    """One write of a claim's status: ``allocate`` sets the allocation (``results`` on
    ``node``) and ``reserved_for``; ``reserve``/``unreserve`` set only ``reserved_for``;
    ``clear`` removes both."""

    kind: WriteKind
    results: tuple[DeviceResult, ...] = ()
    node: str = ""
    reserved_for: tuple[Consumer, ...] = ()


class Claimed(msgspec.Struct, frozen=True, kw_only=True):
    """What happened to one claim of one member: ``pod`` its consumer entry, ``uid`` the
    claim's uid as found (what an undo checks)."""

    binding: Binding
    claim: ClaimAllocation
    state: ClaimState
    error: str = ""
    pod: Consumer | None = None
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.binding.namespace}/{self.claim.name}"


class Release(msgspec.Struct, frozen=True, kw_only=True):
    """Undo what this action wrote to one claim: its reservations for ``pods`` (uids),
    and its allocation too when ``deallocate`` (this action allocated it)."""

    namespace: str
    name: str
    uid: str
    results: tuple[DeviceResult, ...]
    node: str
    pods: frozenset[str]
    deallocate: bool


def _same(results: Iterable[DeviceResult]) -> list[tuple[str, str, str, str]]:
    return sorted((r.request, r.driver, r.pool, r.device) for r in results)


def _allocated_as(held: Held, results: tuple[DeviceResult, ...], node: str) -> bool:
    """The claim holds exactly these devices for ``node`` (or for no node in particular)."""
    return held.allocated and held.node in ("", node) and _same(held.results) == _same(results)


def judge(
    held: Held | None, want: ClaimAllocation, *, pod: Consumer, node: str
) -> tuple[ClaimState, Write | None, str]:
    """What to write to one claim before its pod is bound to ``node`` (see the table)."""
    if held is None:
        return "failed", None, "not found"
    if want.uid and held.uid != want.uid:
        return "failed", None, f"claim was replaced (uid {held.uid}, not {want.uid})"
    if held.deleting:
        return "failed", None, "claim is being deleted"
    if not held.allocated:
        mine = Write(kind="allocate", results=want.results, node=node, reserved_for=(pod,))
        return "allocated", mine, ""
    if not _allocated_as(held, want.results, node):
        return "failed", None, f"already allocated otherwise ({_where(held)}){_holders(held)}"
    if any(c.uid == pod.uid for c in held.reserved_for):
        return "already", None, ""
    if len(held.reserved_for) >= MAX_RESERVED:
        return "failed", None, f"already reserved for {MAX_RESERVED} consumers, the most"
    return "reserved", Write(kind="reserve", reserved_for=(*held.reserved_for, pod)), ""


def _where(held: Held) -> str:
    devices = ", ".join(r.device for r in held.results[:4])
    more = f" and {len(held.results) - 4} more" if len(held.results) > 4 else ""
    return f"{devices or 'no devices'}{more} on {held.node or 'any node'}"


def _holders(held: Held) -> str:
    if not held.reserved_for:
        return ", reserved for nobody"
    names = ", ".join(f"{c.resource}/{c.name}" for c in held.reserved_for[:4])
    more = f" and {len(held.reserved_for) - 4} more" if len(held.reserved_for) > 4 else ""
    return f", held by {names}{more}"


def failed(claimed: tuple[Claimed, ...]) -> bool:
    return any(c.state == "failed" for c in claimed)


def wrote(claimed: tuple[Claimed, ...]) -> bool:
    return any(c.state in ("allocated", "reserved") for c in claimed)


def plan_release(claimed: tuple[Claimed, ...]) -> tuple[Release, ...]:
    """One Release per claim this action allocated or reserved (a claim two members
    share is released once, for both), in claim order; nothing for the rest."""
    mine: dict[str, list[Claimed]] = {}
    for c in claimed:
        if c.state in ("allocated", "reserved") and c.pod is not None:
            mine.setdefault(c.key, []).append(c)
    steps = []
    for key in sorted(mine):
        first = mine[key][0]
        steps.append(Release(
            namespace=first.binding.namespace, name=first.claim.name, uid=first.uid,
            results=first.claim.results, node=first.binding.node,
            pods=frozenset(c.pod.uid for c in mine[key] if c.pod is not None),
            deallocate=any(c.state == "allocated" for c in mine[key]),
        ))  # fmt: skip
    return tuple(steps)


def released(held: Held | None, step: Release) -> Write | None:
    """The write that undoes ``step`` on the claim as read now (None: nothing to undo,
    or it is no longer what this action wrote: gone, replaced, allocated otherwise)."""
    if held is None or held.uid != step.uid or not _allocated_as(held, step.results, step.node):
        return None
    others = tuple(c for c in held.reserved_for if c.uid not in step.pods)
    if step.deallocate and not others:
        return Write(kind="clear")
    if len(others) == len(held.reserved_for):
        return None
    return Write(kind="unreserve", reserved_for=others)


def outcome(gang: Outcome, claimed: tuple[Claimed, ...]) -> Outcome:
    """The gang's outcome (``gang``: its members' verdict) with its claims: a claim
    that failed rolls the gang back; one written makes an ``already`` gang ``applied``."""
    if failed(claimed):
        return "rolled-back"
    if gang == "already" and wrote(claimed):
        return "applied"
    return gang


def claims_error(claimed: tuple[Claimed, ...], *, undone: int) -> str:
    """Why the claims failed: the first failed claim, whose pod and node, why; then what
    was undone. Nothing was bound."""
    bad = [c for c in claimed if c.state == "failed"]
    if not bad:
        return ""
    first, b = bad[0], bad[0].binding
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    return (
        f"claim {first.key} of {b.namespace}/{b.pod} -> {b.node} failed: {first.error}{more}; "
        f"released {undone} claims written, bound nothing"
    )


def released_note(undone: int) -> str:
    """What a gang rolled back after its claims were written adds to its error."""
    return f"; released {undone} claims written" if undone else ""
