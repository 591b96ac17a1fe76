"""The actuator's Prometheus metrics (``baton_actuator_*``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

ACTIONS = Counter(
    "baton_actuator_actions_total",
    "Actions handled, by action type and outcome.",
    ["type", "outcome"],
)
API_SECONDS = Histogram(
    "baton_actuator_api_seconds",
    "Latency of each Kubernetes API call the actuator makes, by verb.",
    ["verb"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
QUEUE_DEPTH = Gauge(
    "baton_actuator_queue_depth",
    "Actions admitted and waiting for a slot or for rate-limit tokens, by priority class.",
    ["priority"],
)
IN_FLIGHT = Gauge("baton_actuator_in_flight", "Actions being applied now.")
RATE_LIMITED = Counter(
    "baton_actuator_rate_limited_seconds_total",
    "Seconds the head of the queue waited for rate-limit tokens.",
)
RETRIES = Counter(
    "baton_actuator_retries_total",
    "Deliveries nak'ed for a retry (retryable API errors) or because the queue was full.",
    ["reason"],
)
