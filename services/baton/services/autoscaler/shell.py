"""The autoscaler's edges: where its outputs go and what people see of them.

The runner feeds nodes, pods, MachineDeployments, the gang service's verdicts,
admission's queue, balloons' headroom, its own actions' results and ticks to the
core in HISTORY's order, publishes the routes below and withholds actions in dry run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog

from baton.libs.runner import Route, action_route
from baton.proto import autoscaler
from baton.proto.actions import Annotate, MarkNode, ScaleMachineDeployment
from baton.proto.autoscaler import NodeReplaced, ScaledDown, ScaledUp, ScaleRefused, ScaleReverted
from baton.services.autoscaler import core, metrics

log = structlog.get_logger("baton.autoscaler")
_KIND: dict[type[Any], str] = {
    ScaledUp: autoscaler.UP,
    ScaleRefused: autoscaler.REFUSED,
    ScaleReverted: autoscaler.REVERTED,
    ScaledDown: autoscaler.DOWN,
    NodeReplaced: autoscaler.REPLACED,
}


def _decision(cluster: str, event: Any) -> tuple[str, str]:
    subject = autoscaler.subject(cluster, event)
    return subject, f"{subject}:{event.at!r}"


ROUTES = (
    Route((ScaleMachineDeployment, MarkNode, Annotate), to=action_route, action=True),
    Route((ScaledUp, ScaleRefused, ScaleReverted, ScaledDown, NodeReplaced), to=_decision),
)


def observe(state: core.State, outputs: Sequence[core.Output]) -> None:
    for output in outputs:
        match output:
            case ScaledUp():
                metrics.NODES_ASKED.labels(pool=output.pool).inc(output.nodes)
                log.info("scale up", gang=output.gang, pool=output.pool, nodes=output.nodes,
                         replicas=output.replicas, within=output.within)  # fmt: skip
            case ScaleRefused():
                log.info("no scale-up", gang=output.gang, nodes=output.nodes,
                         reason=output.reason)  # fmt: skip
            case ScaleReverted():
                metrics.REVERTED.labels(pool=output.pool).inc(output.nodes)
                log.warning("scale-up reverted", gang=output.gang, pool=output.pool,
                            nodes=output.nodes, reason=output.reason)  # fmt: skip
            case ScaledDown():
                log.info("scale down", node=output.node, pool=output.pool, replace=output.replace,
                         replicas=output.replicas, idle_s=round(output.idle_s))  # fmt: skip
            case NodeReplaced():
                log.info("replacement asked", node=output.node, pool=output.pool,
                         replicas=output.replicas)  # fmt: skip
            case _:
                continue
        metrics.DECISIONS.labels(kind=_KIND[type(output)]).inc()


def gauges(state: core.State) -> None:
    for key, md in state.pools.items():
        metrics.REPLICAS.labels(pool=key).set(state.asked.get(key, md.replicas))
        metrics.READY.labels(pool=key).set(core.ready(state, key))
    metrics.JOINING.set(core.joining(state))
    metrics.WAITING.set(len(state.waiting))
    metrics.PARTIAL.set(state.partial)
