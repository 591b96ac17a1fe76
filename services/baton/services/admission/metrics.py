"""Admission's Prometheus metrics (prefix ``baton_admission_``)."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge, Histogram

UNKNOWN_KIND: Final = "unknown"  # allowed untouched, or not an AdmissionReview at all
NO_TEAM: Final = "none"  # a decision about no one team (a node that lost its team)

REVIEWS = Counter(
    "baton_admission_reviews_total",
    "AdmissionReview requests answered",
    ["webhook", "kind", "outcome"],  # outcome: allowed | patched | rejected | not-ready | bad
)  # kind: Pod | PodGroup | unknown
REVIEW_SECONDS = Histogram(
    "baton_admission_review_seconds",
    "Time to answer one AdmissionReview (decode, decide, encode)",
    ["webhook"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1),
)
DECISIONS = Counter(
    "baton_admission_decisions_total",
    "Core outputs, by type as on the bus and team",
    ["type", "team"],
)
QUEUED = Gauge("baton_admission_queued_gangs", "Gangs waiting in each team's queue", ["team"])
USED = Gauge("baton_admission_used_gpus", "GPUs held by each team's admitted gangs", ["team"])
QUOTA = Gauge("baton_admission_quota_gpus", "Each team's GPU quota", ["team"])
CONFIG_ERRORS = Counter(
    "baton_admission_config_errors_total", "Team config reloads refused as invalid"
)
