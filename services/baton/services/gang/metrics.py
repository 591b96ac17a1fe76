"""Prometheus metrics of the gang service (``baton_gang_*``)."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge, Histogram

CYCLE_SECONDS = Histogram(
    "baton_gang_cycle_seconds",
    "Time of one placement cycle (decide, assume, build the actions)",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
DECISIONS = Counter(
    "baton_gang_decisions_total", "Placement decisions published", ["kind"]
)  # placed / unschedulable / restarted (a node failed) / preempted (taken off for room)
ACTIONS = Counter(
    "baton_gang_actions_total", "Actions sent to the actuator, by type as on the bus", ["type"]
)
PENDING_GANGS = Gauge("baton_gang_pending_gangs", "Gangs with pending members and nothing bound")
NODES = Gauge("baton_gang_nodes", "Nodes the gang service knows", ["usable"])
RACK_GPUS = Gauge(
    "baton_gang_rack_gpus",
    "GPUs of usable nodes per rack (the narrowest topology level), allocated or free",
    ["rack", "state"],
)
WAIT_SECONDS = Histogram(
    "baton_gang_wait_seconds",
    "From a gang's creation (its newest member's) to its placement, by team and size class",
    ["team", "size"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400),
)

NO_RACK: Final = "none"  # nodes without the rack label
NO_TEAM: Final = "none"  # the team label of a gang whose pods carry no baton.io/team
SIZE_CLASSES: Final = ((1, "1"), (8, "2-8"), (32, "9-32"), (128, "33-128"), (1024, "129-1024"))
LARGEST: Final = "1025+"


def size_class(members: int) -> str:
    """The ``size`` label: a gang's member count, in a few classes (bounded cardinality)."""
    for most, label in SIZE_CLASSES:
        if members <= most:
            return label
    return LARGEST
