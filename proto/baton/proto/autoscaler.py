"""Autoscaler decisions: whole-gang scale-ups, refusals, reverts and scale-downs.

Subjects (EVENTS stream): ``baton.<cluster>.autoscaler.<kind>.<key...>`` with kind
``up``, ``refused``, ``reverted`` (key: the gang, ``<ns>.<name>``; a balloon deficit's
gang is ``balloon/<pool namespace>/<pool name>``: ``balloon.<ns>.<name>``) and
``down`` and ``replaced`` (key: the node). ``at`` is the decision's time. The pool is a Cluster API
MachineDeployment, named ``<namespace>/<name>``.
"""

from __future__ import annotations

import msgspec

from baton.proto import keys, subjects

UP = "up"
REFUSED = "refused"
REVERTED = "reverted"
DOWN = "down"
REPLACED = "replaced"


class AutoscalerEvent(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type"
):
    at: float


class ScaledUp(AutoscalerEvent, frozen=True, tag="autoscaler.up.v1"):
    """The pool asked for ``nodes`` more machines (``replicas`` in all): the whole gang's need."""

    gang: str
    pool: str
    nodes: int
    replicas: int
    action_id: str
    within: str = ""  # the topology level the gang needs one domain of ('' anywhere)
    domain: str = ""  # the pool's single domain at that level


class ScaleRefused(AutoscalerEvent, frozen=True, tag="autoscaler.refused.v1"):
    """No pool grows for the gang, and why (published when the reason changes)."""

    gang: str
    nodes: int
    reason: str


class ScaleReverted(AutoscalerEvent, frozen=True, tag="autoscaler.reverted.v1"):
    """A scale-up that did not yield Ready nodes in time (or hit the cloud's quota):
    ``nodes`` machines that never became Ready are taken back (``replicas`` in all)."""

    gang: str
    pool: str
    nodes: int
    replicas: int
    reason: str
    action_id: str


class ScaledDown(AutoscalerEvent, frozen=True, tag="autoscaler.down.v1"):
    """An idle node's machine is removed: marked ``cluster.x-k8s.io/delete-machine``,
    then its pool shrinks by one (``replicas`` in all)."""

    node: str
    pool: str
    replicas: int
    idle_s: float
    action_id: str
    replace: bool = False  # health asked to replace the node: the pool grows back once it is gone


class NodeReplaced(AutoscalerEvent, frozen=True, tag="autoscaler.replaced.v1"):
    """The node health asked to replace is gone; its pool grows back by one."""

    node: str
    pool: str
    replicas: int
    action_id: str


AnyAutoscaler = ScaledUp | ScaleRefused | ScaleReverted | ScaledDown | NodeReplaced


class AutoscalerPolicy(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The autoscaler core's knobs (settings ``BATON_AUTOSCALER_*``), recorded with
    every start like the other services' policies."""

    topology_keys: tuple[str, ...] = keys.DEFAULT_LEVELS  # broad -> narrow, as gang's
    max_joining: int = 64  # nodes asked for per join_interval_s (and joining at once), at most
    join_interval_s: float = 60.0
    provisioning_timeout_s: float = 900.0  # a scale-up's nodes must be Ready by then
    backoff_s: float = 300.0  # a pool whose scale-up was reverted is not grown again for this
    unneeded_s: float = 600.0  # a node idle this long is removed (0: never scale down)
    deletion_timeout_s: float = 900.0  # a marked machine not gone by then is given up on
    # also mark the node's Cluster API Machine (where Cluster API reads delete-machine);
    # off on simcluster, which has no Machines and reads the mark on the node
    mark_machines: bool = True


def subject(cluster: str, event: AnyAutoscaler) -> str:
    match event:
        case ScaledDown():
            return subjects.subject(cluster, subjects.AUTOSCALER, DOWN, event.node)
        case NodeReplaced():
            return subjects.subject(cluster, subjects.AUTOSCALER, REPLACED, event.node)
        case ScaledUp():
            kind = UP
        case ScaleRefused():
            kind = REFUSED
        case ScaleReverted():
            kind = REVERTED
    return subjects.subject(cluster, subjects.AUTOSCALER, kind, *event.gang.split("/"))
