"""Kubernetes resource quantities (``"500m"``, ``"64Gi"``, ``"1.5"``, ``"2e3"``) as ints.

Canonical units, as in ``proto.k8s``: ``cpu`` in millicores, everything else in its
base unit (bytes for memory and storage, a count for GPUs, pods, RDMA devices).
Fractions round up, as the API server's ``Quantity.MilliValue``/``Value`` do, so a
request never shrinks in translation.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Final

MILLI_RESOURCES: Final = frozenset({"cpu"})

_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<decimal>[numkMGTPE]?)|[eE](?P<exp>[+-]?[0-9]+))$"
)


class InvalidQuantity(ValueError):
    """A string that is not a Kubernetes quantity (bad input from the API)."""


@functools.lru_cache(maxsize=4096)
def parse_quantity(text: str) -> Fraction:
    """Exact value of a quantity string in its base unit (cores, bytes, count)."""
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise InvalidQuantity(f"{text!r} is not a Kubernetes quantity")
    value = Fraction(match["number"])
    if match["binary"]:
        value *= _BINARY[match["binary"]]
    elif match["exp"] is not None:
        exponent = int(match["exp"])
        if abs(exponent) > 30:
            raise InvalidQuantity(f"{text!r}: exponent out of range")
        value *= Fraction(10) ** exponent
    else:
        value *= _DECIMAL[match["decimal"] or ""]
    return -value if match["sign"] == "-" else value


@functools.lru_cache(maxsize=8192)
def canonical(resource: str, text: str) -> int:
    """One resource's quantity in canonical units: millicores for cpu, else base units."""
    value = parse_quantity(text)
    if resource in MILLI_RESOURCES:
        value *= 1000
    return math.ceil(value)


def canonical_resources(quantities: Mapping[str, str]) -> dict[str, int]:
    """``{"cpu": "500m", "memory": "1Gi"}`` -> ``{"cpu": 500, "memory": 1073741824}``."""
    return {name: canonical(name, text) for name, text in quantities.items()}
