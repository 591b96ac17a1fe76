"""Egress shaping: per-pod limits the bandwidth service decides, and what node agents measure.

Subjects (``<node>`` is a node name encoded by ``proto.subjects.encode_name``):

- ``baton.<cluster>.bandwidth.limits.<node>`` (LIMITS stream, one message per node: the
  node's current limits; msg id ``NodeLimits.id``): ``NodeLimits``, the whole set of
  limits for one node, published by the bandwidth service when any of them changes.
  The node's agent applies it with tc (``services/baton/services/agent/shaping.py``).
- ``baton.<cluster>.bandwidth.allocation`` (EVENTS stream): ``Allocation``, the
  per-team summary of one allocation round (for ``baton`` views and dashboards).
- ``baton.<cluster>.bandwidth.capacity`` (EVENTS stream): ``Capacity``, a new value of
  the cluster's egress capacity (an input of the service; its start-up value is a setting).
- ``baton.<cluster>.telemetry.egress.<node>``: ``NodeEgress``, bytes each pod on the
  node sent, to internal addresses and to the internet, published by the node's agent.

Rates are bits per second (integers on the wire); byte counters are cumulative since
the agent created the pod's counters. Only traffic to addresses outside
``internal_cidrs`` (the internet) is shaped and counted as demand.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from baton.proto import subjects

DOMAIN: Final = "bandwidth"
LIMITS: Final = "limits"
ALLOCATION: Final = "allocation"
CAPACITY: Final = "capacity"
EGRESS: Final = "egress"  # a telemetry kind

TIERS: Final = ("critical", "normal", "background")  # the default tiers, in priority order

NonNegative = Annotated[int, msgspec.Meta(ge=0)]


def limits_subject(cluster: str, node: str) -> str:
    """``baton.<cluster>.bandwidth.limits.<node>``; raises InvalidName for a bad node name."""
    return subjects.node_limits(cluster, node)


def egress_subject(cluster: str, node: str) -> str:
    """``baton.<cluster>.telemetry.egress.<node>``."""
    return subjects.telemetry(cluster, EGRESS, node)


def allocation_subject(cluster: str) -> str:
    """``baton.<cluster>.bandwidth.allocation``."""
    return subjects.wildcard(cluster, DOMAIN, ALLOCATION)


def capacity_subject(cluster: str) -> str:
    """``baton.<cluster>.bandwidth.capacity``."""
    return subjects.wildcard(cluster, DOMAIN, CAPACITY)


class PodLimit(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One pod's internet egress limit: HTB rate ``egress_bps``, HTB ceil ``ceil_bps``.

    ``ips`` are the pod's addresses (the shaper classifies by source address).
    """

    namespace: str
    pod: str
    uid: str
    team: str
    tier: str
    ips: tuple[str, ...]
    egress_bps: NonNegative
    ceil_bps: NonNegative


class NodeLimits(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type",
    tag="bandwidth.limits.v1",
):  # fmt: skip
    """Every shaped pod on ``node``; a pod not listed is not shaped (its class goes).

    ``generation`` grows with every publication for the node and is at least the round's
    time in milliseconds, so a restarted service continues above its predecessor; an
    agent applies only a generation above the one it has. ``id`` is
    ``<node>:<generation>`` (the message id). Traffic to ``internal_cidrs`` is never shaped.
    """

    node: str
    at: float
    generation: int
    id: str
    limits: tuple[PodLimit, ...] = ()
    internal_cidrs: tuple[str, ...] = ()


class PodEgress(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Bytes one pod sent: counters since its counters were created, rates over the interval."""

    namespace: str
    pod: str
    uid: str
    internet_bytes: NonNegative = 0
    internal_bytes: NonNegative = 0
    internet_bps: NonNegative = 0
    internal_bps: NonNegative = 0
    limit_bps: NonNegative = 0  # the ceil the agent had applied (0: not shaped)
    dropped: NonNegative = 0  # packets the shaper dropped


class NodeEgress(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type",
    tag="bandwidth.egress.v1",
):  # fmt: skip
    """One agent's measurement; ``generation`` is the ``NodeLimits`` it had applied."""

    node: str
    at: float
    interval_s: float
    pods: tuple[PodEgress, ...] = ()
    generation: int = 0


class TeamShare(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One team in an allocation round: what it wanted, got and used (bits per second)."""

    team: str
    tier: str
    weight: float
    minimum_bps: int = 0
    demand_bps: int = 0  # sum of its pods' wants (floors included); -1: unbounded
    assigned_bps: int = 0
    used_bps: int = 0  # measured internet egress
    pods: int = 0


class Allocation(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type",
    tag="bandwidth.allocation.v1",
):  # fmt: skip
    at: float
    capacity_bps: int
    teams: tuple[TeamShare, ...] = ()
    changed_nodes: int = 0  # NodeLimits published in this round


class Tier(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Tiers are served in order (strict priority) after every tier's guaranteed minimum.

    ``minimum`` is the share of capacity (0..1) the tier keeps while it has demand.
    """

    name: str
    minimum: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.0


class TeamEgress(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A team's egress policy. Pods are the team's by label ``baton.io/team``, else by namespace."""

    name: str
    tier: str = "normal"
    weight: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    minimum_bps: NonNegative = 0  # guaranteed while the team has demand
    namespaces: tuple[str, ...] = ()


DEFAULT_TIERS: Final = (
    Tier(name="critical"),
    Tier(name="normal", minimum=0.2),
    Tier(name="background", minimum=0.05),
)


class BandwidthPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The bandwidth core's knobs (settings ``BATON_BANDWIDTH_*`` and a team file)."""

    capacity_bps: NonNegative = 10_000_000_000  # the cluster's internet egress
    tiers: tuple[Tier, ...] = DEFAULT_TIERS
    teams: tuple[TeamEgress, ...] = ()
    default_team: TeamEgress = TeamEgress(name="default")
    internal_cidrs: tuple[str, ...] = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
    floor_bps: NonNegative = 10_000_000  # a pod with no measured demand still gets this
    headroom: Annotated[float, msgspec.Meta(ge=0)] = 0.25  # want = used * (1 + headroom)
    saturated: Annotated[float, msgspec.Meta(gt=0, le=1)] = 0.9  # used >= this * limit
    stale_s: Annotated[float, msgspec.Meta(gt=0)] = 180.0  # older measurements are ignored
    hysteresis: Annotated[float, msgspec.Meta(ge=0)] = 0.05  # republish beyond 5% ...
    hysteresis_bps: NonNegative = 1_000_000  # ... and beyond 1 Mbit/s
    # Addresses of EndpointSlice endpoints (pods, nodes) outside internal_cidrs are
    # internal too: at most this many /32s (each costs tc filters on every node).
    endpoint_addresses: NonNegative = 64
    # Keep kubernetes.io/egress-bandwidth on each pod at its limit (for clusters that shape
    # with Cilium's bandwidth manager instead of the agent): at most annotate_per_round
    # Annotate actions a round, and a pod at most once every annotate_every_s.
    annotate: bool = False
    annotate_per_round: NonNegative = 100
    annotate_every_s: Annotated[float, msgspec.Meta(ge=0)] = 60.0
    # Node limits published a second, on average: a round that republished N nodes waits
    # N / limits_per_s before the next, so a churning 7,500-node cluster is not sent every
    # node's limits twice a second (0: no pacing).
    limits_per_s: Annotated[float, msgspec.Meta(ge=0)] = 1000.0
    # Node limits one round publishes at most: the rest wait for the next rounds, oldest
    # first (a round's decreases before its increases), so no batch of the service waits
    # on thousands of acks while its inputs queue (0: every changed node at once).
    limits_per_round: NonNegative = 500


class Capacity(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type",
    tag="bandwidth.capacity.v1",
):  # fmt: skip
    """The cluster's internet egress capacity changed (overrides the policy's)."""

    at: float
    capacity_bps: NonNegative
