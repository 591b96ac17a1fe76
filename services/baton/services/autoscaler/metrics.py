"""Prometheus metrics of the autoscaler (``baton_autoscaler_*``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

DECISIONS = Counter("baton_autoscaler_decisions_total", "Decisions by kind", ["kind"])
NODES_ASKED = Counter(
    "baton_autoscaler_nodes_asked_total", "Nodes asked for by whole-gang scale-ups", ["pool"]
)
REVERTED = Counter(
    "baton_autoscaler_reverted_nodes_total",
    "Nodes taken back from scale-ups that did not become Ready in time",
    ["pool"],
)
PARTIAL = Gauge(
    "baton_autoscaler_partial_scale_ups",
    "Scale-ups asked for less than a gang's whole need (always 0: alert otherwise)",
)
REPLICAS = Gauge("baton_autoscaler_pool_replicas", "Machines a pool is asked for", ["pool"])
READY = Gauge("baton_autoscaler_pool_ready_nodes", "Ready nodes of a pool", ["pool"])
JOINING = Gauge("baton_autoscaler_joining_nodes", "Nodes asked for and not Ready yet")
WAITING = Gauge("baton_autoscaler_waiting_gangs", "Gangs that wait for nodes")
