"""The reporter's edges: where its actions go, and its logs and metrics.

The runner (``libs.runner``) feeds pods, PodGroups (both APIs), nodes, gang and
admission decisions and ticks in HISTORY's order, and publishes the actions below to
the actuator (withheld in dry run). Nothing else is I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from baton.libs.runner import Route, action_route
from baton.proto.actions import RecordEvent, SetGroupStatus, SetPodCondition
from baton.services.reporter import core, metrics

log = structlog.get_logger("baton.reporter")


ROUTES = (Route((SetGroupStatus, SetPodCondition, RecordEvent), to=action_route, action=True),)


def observe(state: core.State, outputs: Sequence[core.Output]) -> None:
    for output in outputs:
        metrics.TOLD.labels(type=str(type(output).__struct_config__.tag)).inc()
        if isinstance(output, RecordEvent):
            metrics.EVENTS.labels(reason=output.reason).inc()
        elif isinstance(output, SetGroupStatus):
            log.info("podgroup status", group=f"{output.namespace}/{output.name}",
                     phase=output.status.phase, reason=output.reason)  # fmt: skip


def gauges(state: core.State) -> None:
    gangs = state.view.gangs.values()
    metrics.GANGS.set(len(gangs))
    metrics.OWING.set(sum(1 for g in gangs if g.owes))
