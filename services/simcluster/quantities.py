"""Kubernetes resource quantities as integers in canonical units.

``cpu`` in millicores, ``memory`` (and every other byte-like resource) in bytes,
counts (``nvidia.com/gpu``, ``rdma/ib``, ``pods``) as plain integers - the same units
as ``proto.k8s.Resources``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

_SUFFIX = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
}


def parse(name: str, value: str | int | float) -> int:
    """``parse("cpu", "500m") == 500``; ``parse("memory", "1Gi") == 2**30``."""
    text = str(value).strip()
    milli = text.endswith("m")
    if milli:
        text = text[:-1]
    digits = text.rstrip("kMGTPi")
    suffix = text[len(digits) :]
    if suffix not in _SUFFIX or not digits:
        raise ValueError(f"{name}: not a quantity: {value!r}")
    number = float(digits) * _SUFFIX[suffix]
    if milli:
        number /= 1000
    if name == "cpu":
        number *= 1000
    return math.ceil(number)


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
