"""Prometheus metrics of the reporter (``baton_reporter_*``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

TOLD = Counter(
    "baton_reporter_actions_total", "Status, condition and Event writes asked of the actuator",
    ["type"],
)  # fmt: skip
EVENTS = Counter("baton_reporter_events_total", "Events asked for, by reason", ["reason"])
GANGS = Gauge("baton_reporter_gangs", "Gangs the reporter follows")
OWING = Gauge("baton_reporter_gangs_owing", "Gangs whose pods wait for their report interval")
