"""Prometheus metrics of the health service (``baton_health_*``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

NODES = Gauge("baton_health_nodes", "Nodes by health state", ["state"])
# The dashboards' and alerts' (deploy/dashboards/planned.yaml): ``reason`` is the rule of
# the evidence that counted first (xid-79, gpu-lost, Ready, heartbeat, ...).
QUARANTINED = Gauge(
    "baton_health_quarantined_nodes",
    "Nodes out of service for a fault (quarantined, draining, remediating), by reason",
    ["reason"],
)
QUARANTINES = Counter(
    "baton_health_quarantines_total", "Nodes taken out of service, by reason", ["reason"]
)
RELEASES = Counter("baton_health_releases_total", "Nodes returned to service after a fault")
FAULT_TO_TAINT = Histogram(
    "baton_health_fault_to_taint_seconds",
    "From the first reading of the evidence to the quarantine stored for the actuator",
    buckets=(0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0),
)
CHANGES = Counter("baton_health_state_changes_total", "Node state changes", ["state"])
WITHHELD = Gauge(
    "baton_health_withheld_nodes",
    "Verdicts a safety rail holds back now (alert on > 0: someone should look)",
    ["rail"],
)
WITHHELD_TOTAL = Counter(
    "baton_health_withheld_total", "Withheld verdicts published, by rail", ["rail", "would"]
)
REMEDIATIONS = Counter("baton_health_remediations_total", "Remediations asked", ["remedy"])
ACTIONS = Counter("baton_health_actions_total", "Actions sent to the actuator", ["type"])
PAUSED = Gauge("baton_health_paused", "1 while the pause switch is on")
OUT = Gauge(
    "baton_health_domain_out_ratio",
    "The fullest domain of each level: nodes out / nodes the cap allows out (1: at the cap)",
    ["level"],
)
OVERDUE = Gauge(
    "baton_health_overdue_nodes",
    "Nodes past the coverage goal (not validated within recheck_days)",
)
SILENT = Gauge("baton_health_silent_nodes", "Nodes whose agent heartbeat is stale (shell)")
HEARTBEATS = Counter("baton_health_heartbeats_total", "Heartbeats read beside the runner")
