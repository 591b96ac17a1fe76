"""simcluster's own Prometheus metrics, named as a real API server names them.

These deliberately keep the upstream ``apiserver_`` names (not ``baton_``) so the
queries users already run against kube-apiserver work against the simulator, and a
test can count what Baton costs the API server (and ``baton_build_info``, as every
Baton process has). One registry per server instance, so several simulators can run in
one process.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from baton.libs.runtime.ops import version


class ApiMetrics:
    def __init__(self, counts: Callable[[], dict[str, int]]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "apiserver_request_total",
            "Requests by verb, resource, subresource and code.",
            ["verb", "resource", "subresource", "code"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "apiserver_request_duration_seconds",
            "Request latency, watches excluded.",
            ["verb", "resource"],
            registry=self.registry,
            buckets=(0.005, 0.025, 0.1, 0.25, 1.0, 5.0),
        )
        self.longrunning = Gauge(
            "apiserver_longrunning_requests",
            "Open long-running requests (watches).",
            ["verb", "resource"],
            registry=self.registry,
        )
        self.watch_events = Counter(
            "apiserver_watch_events_total",
            "Watch events sent, summed over watchers.",
            ["resource"],
            registry=self.registry,
        )
        self.registry.register(_StoredObjects(counts))
        build = Gauge(
            "baton_build_info",
            "Always 1: the Baton version and Python of a service's process",
            ["service", "version", "python"],
            registry=self.registry,
        )
        build.labels(service="simcluster", version=version(), python=platform.python_version()).set(
            1
        )


class WorkloadMetrics(Collector):
    """Whether the simulated users and controllers keep up with the trace, read at each
    scrape: how late the replay started its last job (wall seconds: a harness behind
    its trace offers less work than the trace says), jobs submitted, and each workload
    controller's queue (``workqueue_depth``, as kube-controller-manager names it)."""

    def __init__(
        self,
        *,
        behind: Callable[[], float],
        submitted: Callable[[], int],
        depths: Callable[[], dict[str, int]],
    ) -> None:
        self._behind, self._submitted, self._depths = behind, submitted, depths

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield GaugeMetricFamily(
            "baton_simcluster_workload_behind_seconds",
            "How late the replay started its last job after the trace's time for it.",
            value=self._behind(),
        )
        yield CounterMetricFamily(
            "baton_simcluster_workload_jobs_submitted",
            "Jobs the replay has created (each of its objects accepted).",
            value=self._submitted(),
        )
        depth = GaugeMetricFamily(
            "workqueue_depth", "Objects waiting for a workload controller.", labels=["name"]
        )
        for name, n in sorted(self._depths().items()):
            depth.add_metric([name], n)
        yield depth


class _StoredObjects(Collector):
    def __init__(self, counts: Callable[[], dict[str, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "apiserver_storage_objects", "Stored objects by resource.", labels=["resource"]
        )
        for res, n in sorted(self._counts().items()):
            family.add_metric([res], n)
        yield family
