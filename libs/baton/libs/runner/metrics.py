"""What every runner counts, labelled by service (``baton_runner_*``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

HANDLED = Counter(
    "baton_runner_inputs_total",
    "Inputs a core handled, by event type and outcome (ok, bug: the core raised)",
    ["service", "type", "outcome"],
)
OUTPUTS = Counter(
    "baton_runner_outputs_total",
    "Outputs a core made, by type and kind (decision or action)",
    ["service", "type", "kind"],
)
BATCH_SECONDS = Histogram(
    "baton_runner_batch_seconds",
    "Time to decide, store the outputs of and settle one batch of inputs",
    ["service"],
)
CAUGHT_UP = Gauge(
    "baton_runner_caught_up", "1 once the core has read everything its feed held", ["service"]
)
LEADER = Gauge("baton_runner_leader", "1 while this replica holds its service's lease", ["service"])
LAG = Gauge(
    "baton_runner_lag_seconds",
    "Seconds between the newest input handled reaching the bus and its outputs stored (once"
    " caught up; a service behind its input shows it here)",
    ["service"],
)
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
BEHIND = Histogram(
    "baton_runner_batch_lag_seconds",
    "The lag of each batch, as baton_runner_lag_seconds shows the last one: the peaks a"
    " scrape of the gauge misses (a batch more than 5 s behind counts above le=5)",
    ["service"],
    buckets=LAG_BUCKETS,
)
