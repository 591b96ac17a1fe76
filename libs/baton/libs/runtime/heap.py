"""Garbage collection for a long-lived service process.

A Baton service holds the cluster it watches (thousands of nodes, 100k pods) for its
whole life and allocates in bursts: a relist, a placement cycle, a burst of events.
CPython's default thresholds (700, 10, 10) collect the young generation hundreds of
times in such a burst, and the oldest one about once a burst, walking everything the
service holds. In a gang placement cycle with 10,000 gangs queued that was ~40% of the
cycle (docs/benchmarks.md, "Decision time"). Reference counting still frees almost
everything at once; only garbage in reference cycles waits longer for a collection.
"""

from __future__ import annotations

import gc

THRESHOLDS = (50_000, 20, 100)  # young generation every 50k net allocations


def tune_gc() -> None:
    """Collect less often: called once at the start of every service process."""
    gc.set_threshold(*THRESHOLDS)
