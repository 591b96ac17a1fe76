"""Prometheus metrics of the node agent (``baton_agent_*``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

PUBLISHED = Counter(
    "baton_agent_telemetry_published_total", "Telemetry messages stored in JetStream", ["kind"]
)  # gpu / node / xid / heartbeat
DROPPED = Counter(
    "baton_agent_telemetry_dropped_total",
    "Telemetry dropped unpublished because NATS stayed down and the backlog was full",
)
PENDING = Gauge("baton_agent_telemetry_pending", "Telemetry waiting for NATS")
NODES = Gauge("baton_agent_nodes", "Nodes this agent process reports for (1, or many with --fleet)")
BACKEND_ERRORS = Counter(
    "baton_agent_backend_errors_total",
    "Backend polls that raised (our bug or the host's)",
    ["backend"],
)

# Egress shaping (services/baton/services/agent/egress.py)
APPLIED_GENERATION = Gauge(
    "baton_agent_egress_limits_generation", "Generation of the NodeLimits applied with tc"
)
APPLY_SECONDS = Histogram(
    "baton_agent_egress_apply_seconds",
    "Time to apply a NodeLimits (read the kernel, plan, netlink changes)",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
SHAPING_ERRORS = Counter("baton_agent_egress_apply_errors_total", "NodeLimits that failed to apply")
POD_EGRESS = Gauge(
    "baton_agent_pod_egress_bytes",
    "Bytes a pod sent since its tc classes were made, to the internet or to internal addresses",
    ["namespace", "pod", "to"],
)
