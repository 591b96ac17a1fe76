"""Gang binding, all members or none: the verdict and the rollback plan (pure).

Kubernetes cannot unbind a pod. A member bound before the gang failed is undone by
deleting it, so its controller (Job, JobSet, ...) creates a fresh, unbound replacement;
a pod without a controller is recreated unbound from its own spec (read it, drop
nodeName, status, uid and resourceVersion, delete it, create it again).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from baton.proto.actions import Binding, Outcome

MemberState = Literal["bound", "already", "failed", "skipped"]


class Member(msgspec.Struct, frozen=True, kw_only=True):
    """What happened to one binding of a BindGang (``already``: bound there before)."""

    binding: Binding
    state: MemberState
    error: str = ""


class Undo(msgspec.Struct, frozen=True, kw_only=True):
    """Unbind one member. Kubernetes cannot unbind a pod: ``delete`` lets its controller
    recreate it; ``recreate`` deletes it and creates it again, unbound, from its spec."""

    namespace: str
    pod: str
    uid: str
    how: Literal["delete", "recreate"]


def gang_outcome(members: tuple[Member, ...]) -> Outcome:
    states = {m.state for m in members}
    if states <= {"already"}:
        return "already"
    if states <= {"bound", "already"}:
        return "applied"
    return "rolled-back"


def gang_error(members: tuple[Member, ...]) -> str:
    failed = [m for m in members if m.state == "failed"]
    if not failed:
        return ""
    first = failed[0]
    where = f"{first.binding.namespace}/{first.binding.pod} -> {first.binding.node}"
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    undone = sum(m.state in ("bound", "already") for m in members)
    return f"bind {where} failed: {first.error}{more}; rolled back {undone} bound members"


def to_undo(members: tuple[Member, ...]) -> tuple[Member, ...]:
    """Members this gang bound (now or in an earlier attempt): each must be unbound."""
    return tuple(m for m in members if m.state in ("bound", "already"))


def plan_rollback(members: tuple[Member, ...], *, controlled: dict[str, bool]) -> tuple[Undo, ...]:
    """One Undo per bound member; ``controlled`` maps "<ns>/<pod>" to having an owner
    controller (a pod that vanished meanwhile is absent and needs nothing)."""
    steps = []
    for m in to_undo(members):
        key = f"{m.binding.namespace}/{m.binding.pod}"
        if key not in controlled:
            continue
        how: Literal["delete", "recreate"] = "delete" if controlled[key] else "recreate"
        b = m.binding
        steps.append(Undo(namespace=b.namespace, pod=b.pod, uid=b.uid, how=how))
    return tuple(steps)
