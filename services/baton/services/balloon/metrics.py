"""Prometheus metrics of the balloon service (``baton_balloon_*``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

WANT = Gauge("baton_balloon_want_nodes", "Nodes a pool's balloons should hold", ["pool"])
HELD = Gauge("baton_balloon_held_nodes", "Nodes a pool's balloons hold now", ["pool"])
DEFICIT = Gauge(
    "baton_balloon_deficit_nodes", "Balloons that found no empty node (the autoscaler's)", ["pool"]
)
ACTIONS = Counter("baton_balloon_actions_total", "Balloons created and removed", ["type"])
