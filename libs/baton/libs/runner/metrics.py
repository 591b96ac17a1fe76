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
