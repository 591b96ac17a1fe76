"""Prometheus metrics of the gang service (``baton_gang_*``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

CYCLE_SECONDS = Histogram(
    "baton_gang_cycle_seconds",
    "Time of one placement cycle (decide, assume, build the actions)",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
DECISIONS = Counter(
    "baton_gang_decisions_total", "Placement decisions published", ["kind"]
)  # placed / unschedulable / restarted
ACTIONS = Counter("baton_gang_actions_total", "Actions sent to the actuator", ["type"])
PENDING_GANGS = Gauge("baton_gang_pending_gangs", "Gangs with pending members and nothing bound")
NODES = Gauge("baton_gang_nodes", "Nodes the gang service knows", ["usable"])
