"""Only the latest status per object matters, and two writes of one object's status must
never race (the older landing last): pure bookkeeping for the actuator's core.

An action with a coalescing key (``key_of``) replaces the queued one with the same key;
one published before what was already queued or started for its key (a redelivery
after a retry: its ACTIONS stream sequence is lower) is stale at once. While one of a
*lane* (``lane_of``: the same key, or the same gang's pod conditions, whichever pods
they name) is in flight, the next ones wait aside (*parked*) and are queued again one at
a time, oldest first, as each finishes.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from baton.proto import ids
from baton.proto.actions import AnyAction, SetGroupStatus, SetPodCondition, SetTeamStatus

REMEMBERED = 100_000  # keys whose newest time is kept (oldest forgotten first)


def key_of(action: AnyAction) -> str:
    """Actions of which only the latest per object matters ('' for every other)."""
    match action:
        case SetGroupStatus():
            return f"status/{action.api}/{action.namespace}/{action.name}"
        case SetPodCondition():  # the pods it names: a write for others drops nothing
            pods = ids.digest(*sorted(f"{p.name}/{p.uid}" for p in action.pods))
            return f"condition/{action.gang}/{action.condition.type}/{pods}"
        case SetTeamStatus():
            return f"team/{action.team}"
    return ""


def lane_of(action: AnyAction) -> str:
    """Writes that must not be in flight together: those of one key, and a gang's pod
    conditions whatever pods each names (two may name the same pod)."""
    if isinstance(action, SetPodCondition):
        return f"condition/{action.gang}/{action.condition.type}"
    return key_of(action)


STALE = "\x00stale"  # ``arrive``'s answer for an action older than its key's newest


@dataclass(slots=True)
class Latest:
    queued: dict[str, str] = field(default_factory=dict)  # key -> the newest waiting id
    busy: dict[str, str] = field(default_factory=dict)  # lane -> the id in flight
    parked: dict[str, list[str]] = field(default_factory=dict)  # lane -> ids aside, oldest first
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
        self._unpark(lane_of(action), older)
        return older

    def may_start(self, action: AnyAction) -> bool:
        """False (and parked) while another write of the same lane is in flight."""
        key, lane = key_of(action), lane_of(action)
        if lane and lane in self.busy:
            self.parked.setdefault(lane, []).append(action.id)
            return False
        if lane:
            self.busy[lane] = action.id
            if self.queued.get(key) == action.id:
                del self.queued[key]
        return True

    def finished(self, action: AnyAction) -> str:
        """The id to queue again now that its lane is free ('' if none)."""
        lane = lane_of(action)
        if not lane or self.busy.get(lane) != action.id:
            return ""
        del self.busy[lane]
        waiting = self.parked.get(lane)
        if not waiting:
            return ""
        first = waiting.pop(0)
        if not waiting:
            del self.parked[lane]
        return first

    def _unpark(self, lane: str, older: str) -> None:
        waiting = self.parked.get(lane)
        if older and waiting and older in waiting:
            waiting.remove(older)
            if not waiting:
                del self.parked[lane]
