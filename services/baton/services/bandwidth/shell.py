"""The bandwidth service's edges: where its outputs go, logs and metrics.

The runner (``libs.runner``) does the I/O: it feeds the core pods, EndpointSlices,
node agents' egress, admission's ``TeamsLoaded`` and ``Capacity`` in HISTORY's order,
ticks it every ``interval_s`` while something moved, and publishes the routes below:

| output | subject | msg id |
|---|---|---|
| ``NodeLimits`` | ``baton.<c>.bandwidth.limits.<node>`` | ``<node>:<generation>`` |
| ``Allocation`` | ``baton.<c>.bandwidth.allocation`` | ``allocation:<at>`` |
| ``Annotate`` (action; not in dry run) | ``baton.<c>.action.annotate.bandwidth.<ns>.<pod>`` | id |
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog

from baton.libs.runner import Route, action_route
from baton.proto.actions import Annotate
from baton.proto.bandwidth import Allocation, NodeLimits, allocation_subject, limits_subject
from baton.services.bandwidth import core, metrics

log = structlog.get_logger("baton.bandwidth")


def _limits(cluster: str, limits: NodeLimits) -> tuple[str, str]:
    return limits_subject(cluster, limits.node), limits.id


def _allocation(cluster: str, allocation: Allocation) -> tuple[str, str]:
    return allocation_subject(cluster), f"allocation:{allocation.at}"


ROUTES = (
    Route(NodeLimits, to=_limits),
    Route(Allocation, to=_allocation),
    Route(Annotate, to=action_route, action=True),
)


def observe(state: core.State, outputs: Sequence[Any]) -> None:
    nodes = sum(1 for o in outputs if isinstance(o, NodeLimits))
    notes = sum(1 for o in outputs if isinstance(o, Annotate))
    metrics.LIMITS.inc(nodes)
    metrics.ANNOTATIONS.inc(notes)
    if nodes or notes:
        log.info("limits published", nodes=nodes, annotations=notes, pods=len(state.pods))


def gauges(state: core.State) -> None:
    metrics.CAPACITY.set(state.capacity)
    metrics.QUEUED.set(len(state.queued))
    for gauge in (metrics.ALLOCATED, metrics.USED, metrics.DEMAND, metrics.PODS):
        gauge.clear()
    for book in state.books.values():  # not books(): gauges must not change the state
        name = book.team.name
        metrics.ALLOCATED.labels(team=name).set(sum(book.pub))
        metrics.USED.labels(team=name).set(book.used_total)
        metrics.DEMAND.labels(team=name).set(-1 if book.want == float("inf") else book.want)
        metrics.PODS.labels(team=name).set(len(book))
