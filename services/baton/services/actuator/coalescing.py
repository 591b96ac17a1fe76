"""Only the latest status per object matters, and two writes of one object's status must
never race (the older landing last): pure bookkeeping for the actuator's core.

An action with a coalescing key (``key_of``) replaces the queued one with the same key;
one published before what was already queued or started for its key (a redelivery
after a retry: its ACTIONS stream sequence is lower) is stale at once. While one with
that key is in flight, the next waits aside (*parked*) and is queued again when it
finishes.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from baton.proto.actions import AnyAction, SetGroupStatus, SetPodCondition, SetTeamStatus

REMEMBERED = 100_000  # keys whose newest time is kept (oldest forgotten first)


def key_of(action: AnyAction) -> str:
    """Actions of which only the latest per object matters ('' for every other)."""
    match action:
        case SetGroupStatus():
            return f"status/{action.api}/{action.namespace}/{action.name}"
        case SetPodCondition():
            return f"condition/{action.gang}/{action.condition.type}"
        case SetTeamStatus():
            return f"team/{action.team}"
    return ""


STALE = "\x00stale"  # ``arrive``'s answer for an action older than its key's newest


@dataclass(slots=True)
class Latest:
    queued: dict[str, str] = field(default_factory=dict)  # key -> the newest waiting id
    busy: dict[str, str] = field(default_factory=dict)  # key -> the id in flight
    parked: set[str] = field(default_factory=set)  # ids waiting for their key's flight
    newest: OrderedDict[str, int] = field(default_factory=OrderedDict)  # key -> newest seq

    def arrive(self, action: AnyAction, seq: int = 0) -> str:
        """Note a new action (``seq``: its stream sequence, 0 unknown): the id of the one
        it supersedes ('' if none), or ``STALE`` when one published after it was seen."""
        key = key_of(action)
        if not key:
            return ""
        if seq and seq < self.newest.get(key, 0):
            return STALE
        self.newest[key] = max(seq, self.newest.get(key, 0))
        self.newest.move_to_end(key)
        while len(self.newest) > REMEMBERED:
            self.newest.popitem(last=False)
        older = self.queued.get(key, "")
        self.queued[key] = action.id
        self.parked.discard(older)
        return older

    def may_start(self, action: AnyAction) -> bool:
        """False (and parked) while another write of the same object is in flight."""
        key = key_of(action)
        if key and key in self.busy:
            self.parked.add(action.id)
            return False
        if key:
            self.busy[key] = action.id
            if self.queued.get(key) == action.id:
                del self.queued[key]
        return True

    def finished(self, action: AnyAction) -> str:
        """The id to queue again now that its key is free ('' if none)."""
        key = key_of(action)
        if not key or self.busy.get(key) != action.id:
            return ""
        del self.busy[key]
        waiting = self.queued.get(key, "")
        if waiting in self.parked:
            self.parked.discard(waiting)
            return waiting
        return ""
