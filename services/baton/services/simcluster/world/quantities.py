"""Pods' and nodes' resource quantities as integers in canonical units.

One parser for all of Baton: ``libs.kube.quantities`` (``cpu`` in millicores, every
other resource in its base unit, fractions rounded up), the same units as
``proto.k8s.Resources``. This module adds what the simulated kubelet needs on top:
a whole pod's requests.
"""

from __future__ import annotations

from collections.abc import Mapping

from baton.libs.kube.quantities import InvalidQuantity, canonical


def parse(name: str, value: str | int | float) -> int:
    """``parse("cpu", "500m") == 500``; ``parse("memory", "1Gi") == 2**30``."""
    try:
        return canonical(name, str(value))
    except InvalidQuantity as exc:
        raise InvalidQuantity(f"{name}: {exc}") from exc


def parse_all(raw: Mapping[str, str | int | float] | None) -> dict[str, int]:
    return {name: parse(name, value) for name, value in (raw or {}).items()}


def pod_requests(pod: Mapping[str, object]) -> dict[str, int]:
    """What a pod asks of its node: the sum over containers, the max with init containers.

    An extended resource with only a limit requests that limit, as in Kubernetes.
    """
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return {}
    total: dict[str, int] = {}
    for container in spec.get("containers") or ():
        for name, amount in _container_requests(container).items():
            total[name] = total.get(name, 0) + amount
    for container in spec.get("initContainers") or ():
        for name, amount in _container_requests(container).items():
            total[name] = max(total.get(name, 0), amount)
    return total


def _container_requests(container: dict[str, object]) -> dict[str, int]:
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return {}
    requests = parse_all(resources.get("requests"))
    for name, amount in parse_all(resources.get("limits")).items():
        requests.setdefault(name, amount)
    return requests
