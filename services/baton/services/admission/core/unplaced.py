"""Admitted gangs that are never placed give their quota back, and back off.

A gang is admitted against its team's quota before the gang service places it. One
that no node takes (the nodes shrank or went, its selector matches none, the cluster
is too fragmented) would hold that quota for nothing while the gangs behind it wait.
As Kueue's ``waitForPodsReady`` (a timeout, then requeued with exponential backoff):
once ``queueing.place_within_s`` has passed since its admission with no member bound,
its admission is taken back, its GPUs go back to its team and it queues again in its
old place; it is admitted again in its turn, but not before ``place_backoff_s`` x
2^(n-1) after its n-th release (at most ``MAX_BACKOFF_S``), so it does not flap. Its
count of releases restarts once a member is bound.
"""

from __future__ import annotations

from baton.proto.admission import GangQueued
from baton.services.admission.core import members
from baton.services.admission.core.reclaiming import Output, unadmit
from baton.services.admission.core.state import State

MAX_BACKOFF_S = 3600.0  # Kueue's backoffMaxSeconds default


def release(state: State, now: float) -> list[Output]:
    """Take back the admission of every gang admitted ``place_within_s`` ago or more
    with no member bound (those placed, or no longer admitted, are dropped from the set)."""
    queueing = state.config.queueing
    outputs: list[Output] = []
    for key in sorted(state.unplaced):
        gang = state.gangs.get(key)
        if gang is None or not gang.admitted or gang.bound:
            state.unplaced.discard(key)
            continue
        if now - gang.admitted_at < queueing.place_within_s or key in state.short:
            continue  # a gang short of members is given back by ``release_memberless``
        state.unplaced.discard(key)
        gpus = gang.held
        state.hold(gang, 0, borrowing=False)
        gang.admitted = False
        members.resume(state, gang)
        gang.releases += 1
        backoff = min(queueing.place_backoff_s * 2 ** (gang.releases - 1), MAX_BACKOFF_S)
        gang.retry_at = now + backoff
        state.enqueue(gang)
        state.untold.discard(key)
        gang.reason = (
            f"admitted but not placed within {queueing.place_within_s:g} s "
            f"(queueing.place_within_s): its {gpus} GPUs went back to team {gang.team!r}; "
            f"it is admitted again in its turn, not before {backoff:g} s from now "
            f"(again from {gang.retry_at:g} s; release {gang.releases})"
        )
        gang.told_gpus = gang.sized
        outputs.append(unadmit(gang, now, reason="not placed in time"))
        outputs.append(GangQueued(at=now, gang=key, team=gang.team, position=0,
                                  gpus=gang.gpus, reason=gang.reason))  # fmt: skip
    return outputs
