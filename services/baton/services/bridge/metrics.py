"""The bridge's Prometheus metrics (default registry, served on the ops port's /metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

EVENTS_PUBLISHED = Counter(
    "baton_bridge_events_published_total",
    "Object events published to the K8S stream (duplicates the stream dropped included)",
    ["kind", "op"],
)
EVENTS_SKIPPED = Counter(
    "baton_bridge_events_skipped_total",
    "Object events not published because the K8S stream already holds that version",
    ["kind"],
)
REJECTED = Counter(
    "baton_bridge_rejected_total",
    "Objects whose name cannot be a subject token (dead-lettered, not published)",
    ["kind"],
)
WATCH_RESTARTS = Counter(
    "baton_bridge_watch_restarts_total",
    "Watches reopened: server closed it, 410 Gone, or an error (then with backoff)",
    ["kind"],
)
RELISTS = Counter(
    "baton_bridge_relists_total",
    "Full lists after the first one (410 Gone), diffed against the cache",
    ["kind"],
)
LISTED_OBJECTS = Counter(
    "baton_bridge_listed_objects_total", "Objects read by full lists", ["kind"]
)
LAG = Histogram(
    "baton_bridge_lag_seconds",
    "From the bridge receiving a change from the API server to JetStream acking its publish",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)


class Observer:
    """baton.libs.kube reflector observer -> metrics."""

    def listed(self, kind: str, *, count: int, relist: bool) -> None:
        LISTED_OBJECTS.labels(kind=kind).inc(count)
        if relist:
            RELISTS.labels(kind=kind).inc()

    def watch_restarted(self, kind: str, *, reason: str) -> None:
        del reason  # logged by the reflector; a label would only add cardinality
        WATCH_RESTARTS.labels(kind=kind).inc()
