"""Gang placement decisions, published by the gang service.

Subjects: ``baton.<cluster>.placement.{placed,unschedulable,restarted}.<ns>.<gang>``
(EVENTS stream). A gang is ``"<namespace>/<podgroup>"``, or ``"<namespace>/<pod>"``
for a lone pod (a gang of one). ``at`` is the decision's time.
"""

from __future__ import annotations

import msgspec

from baton.proto import keys
from baton.proto.actions import Binding
from baton.proto.k8s import Resources


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


class GangPolicy(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The gang core's knobs (``services.gang.core.Policy``; settings ``BATON_GANG_*``).

    Recorded with every start (``proto.runner.Started.policy``): the same events decided
    under another policy give other decisions, so replay takes the recorded one unless
    told otherwise."""

    topology_keys: tuple[str, ...] = keys.DEFAULT_LEVELS  # broad -> narrow
    require_admission: bool = False  # place only gangs marked baton.io/admitted
    recreate_bare_pods: bool = True  # on a gang restart, recreate pods no controller owns
    backoff_s: float = 1.0  # first retry after a failed bind; doubles per attempt
    backoff_max_s: float = 60.0
    assume_timeout_s: float = 30.0  # forget a placement whose pods never showed up bound
    verdict_refresh_s: float = 10.0  # recompute a cheaply rejected gang's verdict this often
    reserve_after_s: float = 0.0  # the head reserves nodes once it has waited this long
    strict_fifo: bool = False  # nothing behind the first gang that does not fit is placed
    # a one-pod gang's place in the queue moves back by its expected work (GPU-s) times
    # shortest_first_weight, at most shortest_first_s (0: off, age order)
    shortest_first_s: float = 0.0
    shortest_first_weight: float = 0.25
    preemption: bool = True  # a waiting gang takes lower-priority running gangs off, whole
    preempt_min_run_s: float = 300.0  # a gang runs at least this long before it is taken off
    preempt_grace_s: int = 30  # its pods' termination grace when taken off (checkpoint)
    defrag_moves_per_hour: int = 4  # preemptible gangs moved to free whole nodes, per hour
    # EASY backfill: a gang expected to end before the head can start may use its nodes
    backfill_estimates: bool = True
    learn_estimates: bool = False  # no annotation: the team's recent runs of that size
    estimate_percentile: float = 90.0  # of those runs
    estimate_samples: int = 5  # runs needed before a learned estimate is used
    estimate_history: int = 50  # runs kept per team and size class
    backfill_loans: bool = True  # a head that could start but for EASY backfill takes it back
