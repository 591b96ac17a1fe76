"""What each replayable service's core reads and decides, for ``baton replay``.

One ``Service`` per core: the payload types a recording holds for it, how to build a
fresh state, the order its inputs are fed in, and which recorded events are its
decisions and actions (compared with the replay's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, get_args

from libs.runtime import load_settings
from proto.actions import (
    ActionResult,
    Annotate,
    BindGang,
    CreatePod,
    EvictGang,
    SetLabels,
    SetTaint,
)
from proto.admission import GangAdmitted, GangPreempted, GangQueued, GangReleased, NodeTeamChanged
from proto.k8s import EndpointSliceEvent, NodeEvent, PodEvent, PodGroupEvent
from proto.placement import GangPlaced, GangRestarted, GangUnschedulable
from proto.ticks import RecordedPolicy, RecordedTick
from services.admission import core as admission_core
from services.admission.shell import load_teams
from services.cli.recording import Record
from services.gang import core as gang_core
from services.gang.main import PREFIX, Settings


@dataclass(frozen=True, slots=True)
class Service:
    name: str
    types: Any  # tagged union of every payload this replay reads
    initial: Callable[[str, str], Any]  # (settings file, teams file) -> fresh core state
    step: Callable[[Any, Any, float], tuple[Any, tuple[Any, ...]]]
    to_core: Callable[[Any], Any]  # recorded input -> the core's input type
    inputs: Callable[[Sequence[Record]], tuple[list[Record], str]]  # feed order, how found
    is_decision: Callable[[Any], bool]
    is_action: Callable[[Any], bool]
    # A fresh state under the policy the recording says the service ran with, if it says.
    recorded_initial: Callable[[Sequence[Record]], Any | None] = lambda records: None
    settings_prefix: str = ""  # env variables that override the recorded policy

    @property
    def tags(self) -> frozenset[str]:
        return frozenset(str(t.__struct_config__.tag) for t in get_args(self.types))


K8S_TYPES = (NodeEvent, PodEvent, PodGroupEvent, EndpointSliceEvent)
BIND_GANG = "action.bind-gang.v1"


def gang_inputs(records: Sequence[Record]) -> tuple[list[Record], str]:
    """Object events, bind-gang results and recorded ticks, in the order the shell applied
    them: each tick after exactly the inputs it had seen (its ``k8s_seq``/``result_seq``),
    the inputs between two ticks in file order."""
    k8s = [r for r in records if isinstance(r.event, K8S_TYPES)]
    results = [
        r for r in records if isinstance(r.event, ActionResult) and r.event.action_type == BIND_GANG
    ]
    ticks = [r for r in records if isinstance(r.event, RecordedTick)]
    everything = sorted(k8s + results + ticks, key=lambda r: r.line)
    if not ticks or not all(r.seq for r in everything):
        return everything, "file order (no stream sequences)"
    k8s.sort(key=lambda r: r.seq)
    results.sort(key=lambda r: r.seq)
    ticks.sort(key=lambda r: r.seq)
    feed: list[Record] = []
    i = j = 0
    for tick in ticks:
        before: list[Record] = []
        while i < len(k8s) and k8s[i].seq <= tick.event.k8s_seq:
            before.append(k8s[i])
            i += 1
        while j < len(results) and results[j].seq <= tick.event.result_seq:
            before.append(results[j])
            j += 1
        feed += sorted(before, key=lambda r: r.line)
        feed.append(tick)
    feed += sorted(k8s[i:] + results[j:], key=lambda r: r.line)
    return feed, "ticks placed by stream sequence"


def _gang_initial(settings: str, teams: str) -> Any:
    return gang_core.initial(load_settings(Settings, PREFIX, file=settings or None).policy())


def _gang_recorded_initial(records: Sequence[Record]) -> Any | None:
    policies = [r.event.policy for r in records if isinstance(r.event, RecordedPolicy)]
    return gang_core.initial(policies[0]) if policies else None


def _gang_step(state: Any, event: Any, now: float) -> tuple[Any, tuple[Any, ...]]:
    return gang_core.step(state, event, now)


def _gang_tick(event: Any) -> Any:
    return gang_core.Tick(at=event.at) if isinstance(event, RecordedTick) else event


def _admission_initial(settings: str, teams: str) -> Any:
    return admission_core.initial(load_teams(teams))


def _admission_step(state: Any, event: Any, now: float) -> tuple[Any, tuple[Any, ...]]:
    return admission_core.step(state, event, now)


def _admission_inputs(records: Sequence[Record]) -> tuple[list[Record], str]:
    k8s = [r for r in records if isinstance(r.event, NodeEvent | PodEvent | PodGroupEvent)]
    if all(r.seq for r in k8s):
        return sorted(k8s, key=lambda r: r.seq), "K8S stream order"
    return k8s, "file order (no stream sequences)"


SERVICES: dict[str, Service] = {
    "gang": Service(
        name="gang",
        types=NodeEvent
        | PodEvent
        | PodGroupEvent
        | EndpointSliceEvent
        | ActionResult
        | RecordedTick
        | RecordedPolicy
        | GangPlaced
        | GangUnschedulable
        | GangRestarted
        | BindGang
        | EvictGang
        | CreatePod,
        initial=_gang_initial,
        step=_gang_step,
        to_core=_gang_tick,
        inputs=gang_inputs,
        is_decision=lambda e: isinstance(e, GangPlaced | GangUnschedulable | GangRestarted),
        is_action=lambda e: isinstance(e, BindGang | EvictGang | CreatePod) and e.by == "gang",
        recorded_initial=_gang_recorded_initial,
        settings_prefix=PREFIX,
    ),
    "admission": Service(
        name="admission",
        types=NodeEvent
        | PodEvent
        | PodGroupEvent
        | EndpointSliceEvent
        | GangAdmitted
        | GangQueued
        | GangPreempted
        | GangReleased
        | NodeTeamChanged
        | SetTaint
        | SetLabels
        | Annotate
        | EvictGang,
        initial=_admission_initial,
        step=_admission_step,
        to_core=lambda e: e,
        inputs=_admission_inputs,
        is_decision=lambda e: isinstance(
            e, GangAdmitted | GangQueued | GangPreempted | GangReleased | NodeTeamChanged
        ),
        is_action=lambda e: (
            isinstance(e, SetTaint | SetLabels | Annotate | EvictGang) and e.by == "admission"
        ),
    ),
}
