"""Baton's metric naming rules, and the metrics Baton's code declares.

Rules for what a service exposes on ``/metrics``:
- every family Baton defines is named ``baton_<service or library>_...`` (the
  process and Python collectors of prometheus_client keep their standard names;
  simcluster keeps the API server's ``apiserver_*`` names, and kube-controller-manager's
  ``workqueue_*`` for its workload controllers, on purpose);
- no label value is empty (simcluster's ``apiserver_*`` keep kube-apiserver's empty
  ``subresource``/``scope`` values, which Prometheus reads as absent);
- a ``type`` label holds an event type as on the bus (``k8s.pod.v1``);
- every service exposes ``baton_build_info{service, version, python} 1``.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
STANDARD = ("process_", "python_")  # prometheus_client's default collectors
BUS_TYPE = re.compile(r"^[a-z0-9-]+(\.[a-z0-9-]+)*\.v[0-9]+$")  # result.v1, k8s.pod.v1


@dataclass(frozen=True)
class Declared:
    name: str  # the family name (no _total, _bucket, ...)
    type: str  # counter | gauge | histogram | summary | info
    labels: tuple[str, ...]


def metric_modules() -> list[str]:
    """Every module of libs/ and services/ that declares Prometheus metrics (named from
    the packages as imported, so the names hold wherever they are installed)."""
    from baton import libs, services

    found = []
    for package in (libs, services):
        base = Path(package.__path__[0])
        for path in sorted(base.rglob("*.py")):
            if "prometheus_client" in path.read_text():
                parts = path.relative_to(base).with_suffix("").parts
                found.append(".".join([package.__name__, *parts]).removesuffix(".__init__"))
    return found


def declared() -> dict[str, Declared]:
    """Families Baton's code registers (default registry, and simcluster's own)."""
    for module in metric_modules():
        importlib.import_module(module)
    from baton.services.simcluster.api.metrics import ApiMetrics

    found = _from(REGISTRY)
    found.update(_from(ApiMetrics(lambda: {}).registry))
    return {name: d for name, d in found.items() if not name.startswith(STANDARD)}


def _from(registry: CollectorRegistry) -> dict[str, Declared]:
    found = {}
    for family in registry.collect():
        collector_labels: tuple[str, ...] = ()
        for sample in family.samples:
            collector_labels = tuple(k for k in sample.labels if k != "le")
            break
        found[family.name] = Declared(family.name, family.type, collector_labels)
    for collector in list(getattr(registry, "_collector_to_names", {})):
        names = getattr(collector, "_labelnames", None)
        name = getattr(collector, "_name", None)
        if names is not None and name in found:
            found[name] = Declared(name, found[name].type, tuple(names))
    return found


def sample_names(family: Declared) -> set[str]:
    """The names a family's samples carry, as queries use them."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("_sum", "_count", "_created"),
    }.get(family.type, ("",))
    return {family.name + s for s in suffixes} | {family.name}


def problems(exposition: str, *, service: str) -> list[str]:
    """What in one ``/metrics`` page breaks the rules above ([] when none)."""
    found = []
    build = False
    for family in text_string_to_metric_families(exposition):
        name = family.name
        baton = name.startswith("baton_")
        allowed = (
            baton
            or name.startswith(STANDARD)
            or (service == "simcluster" and name.startswith(("apiserver_", "workqueue_")))
        )
        if not allowed:
            found.append(f"{service}: {name}: not baton_*")
        for sample in family.samples:
            for label, value in sample.labels.items():
                if value == "" and baton:
                    found.append(f"{service}: {sample.name}: label {label} is empty")
                if label == "type" and baton and not BUS_TYPE.match(value):
                    found.append(f"{service}: {sample.name}: type={value!r} is not a bus type")
            if name == "baton_build_info" and sample.labels.get("service") == service:
                build = sample.value == 1
    if not build:
        found.append(f"{service}: no baton_build_info{{service={service!r}}} 1")
    return found
