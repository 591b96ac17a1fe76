"""The balloon service's edges: where its outputs go and what people see of them.

The runner feeds nodes, pods, MachineDeployments, placed gangs, create-pod results and
ticks to the core in HISTORY's order, publishes the routes below and withholds actions
in dry run.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from baton.libs.runner import Route, action_route
from baton.proto import balloon
from baton.proto.actions import CreatePod, DeletePod
from baton.proto.balloon import Headroom
from baton.services.balloon import core, metrics

log = structlog.get_logger("baton.balloon")


def _headroom(cluster: str, event: Headroom) -> tuple[str, str]:
    subject = balloon.subject(cluster, event.pool, event.team)
    return subject, f"{subject}:{event.at!r}"


ROUTES = (
    Route((CreatePod, DeletePod), to=action_route, action=True),
    Route(Headroom, to=_headroom),
)


def observe(state: core.State, outputs: Sequence[core.Output]) -> None:
    for output in outputs:
        match output:
            case Headroom():
                metrics.WANT.labels(pool=output.pool).set(output.want)
                metrics.HELD.labels(pool=output.pool).set(output.held)
                metrics.DEFICIT.labels(pool=output.pool).set(output.deficit)
                log.info("headroom", pool=output.pool, want=output.want, held=output.held,
                         deficit=output.deficit, why=output.why)  # fmt: skip
            case CreatePod() | DeletePod():
                metrics.ACTIONS.labels(type=type(output).__name__).inc()


def gauges(state: core.State) -> None:
    return None
