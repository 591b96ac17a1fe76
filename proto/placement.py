"""Gang placement decisions, published by the gang service.

Subjects: ``baton.<cluster>.placement.{placed,unschedulable,restarted}.<ns>.<gang>``
(EVENTS stream). A gang is ``"<namespace>/<podgroup>"``, or ``"<namespace>/<pod>"``
for a lone pod (a gang of one). ``at`` is the decision's time.
"""

from __future__ import annotations

import msgspec

from proto.actions import Binding
from proto.k8s import Resources


class PlacementEvent(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type"
):
    gang: str
    at: float


class GangPlaced(PlacementEvent, frozen=True, tag="placement.placed.v1"):
    """Every member got a node; the BindGang action ``action_id`` asks the actuator to bind them.

    ``level`` is the topology label key of the one domain that holds the whole gang
    ('' when it spans several domains of the broadest level). ``domains`` counts the
    narrowest-level domains (racks by default) the members landed in;
    ``min_domains`` is the fewest that could have held the gang on the free capacity
    at decision time.
    """

    action_id: str
    bindings: tuple[Binding, ...]
    level: str = ""
    domain: str = ""  # the domain's label value at ``level``
    domains: int = 0
    min_domains: int = 0
    attempt: int = 0


class Need(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What would make the gang fit: ``nodes`` more nodes shaped like ``shape``.

    ``within``: all of them in one domain of this topology level ('' anywhere).
    ``nodes`` is 0 when more nodes would not help (e.g. no node matches the pods'
    selectors and the shape is unknown).
    """

    nodes: int
    shape: Resources = {}
    within: str = ""


class GangUnschedulable(PlacementEvent, frozen=True, tag="placement.unschedulable.v1"):
    """The gang cannot be placed now. Published when the verdict changes, not every cycle.

    ``fits_when_free``: the gang would fit if running work finished (it waits; more
    nodes would only make it start sooner). ``blocked_by``: the gang holding the
    reservation this one may not backfill into ('' if none).
    """

    reason: str
    need: Need
    members: int = 0
    fits_when_free: bool = False
    blocked_by: str = ""


class GangRestarted(PlacementEvent, frozen=True, tag="placement.restarted.v1"):
    """A member's node failed: every member is evicted (and bare pods recreated)."""

    reason: str
    node: str
    evicted: int = 0
    recreated: int = 0
    restarts: int = 1


AnyPlacement = GangPlaced | GangUnschedulable | GangRestarted
