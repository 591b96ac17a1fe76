"""Prometheus metrics of the bandwidth service (``baton_bandwidth_*``; the names the
dashboards use: deploy/dashboards/baton-bandwidth.json)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

LIMITS = Counter("baton_bandwidth_limits_published_total", "NodeLimits published (one per node)")
ANNOTATIONS = Counter(
    "baton_bandwidth_annotations_total", "Annotate actions keeping egress-bandwidth at the limit"
)
QUEUED = Gauge(
    "baton_bandwidth_limits_queued", "Nodes whose new limits wait for a round (limits_per_round)"
)
CAPACITY = Gauge(
    "baton_bandwidth_capacity_bits_per_second", "The cluster's internet egress capacity"
)
ALLOCATED = Gauge(
    "baton_bandwidth_allocated_bits_per_second", "Sum of a team's pod limits", ["team"]
)
DEMAND = Gauge(
    "baton_bandwidth_demand_bits_per_second", "A team's summed wants (-1: unbounded)", ["team"]
)
USED = Gauge("baton_bandwidth_used_bits_per_second", "A team's measured internet egress", ["team"])
PODS = Gauge("baton_bandwidth_shaped_pods", "Running pods with an address, shaped", ["team"])
