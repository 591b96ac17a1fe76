from __future__ import annotations

from fractions import Fraction

import pytest

from baton.libs.kube.quantities import (
    InvalidQuantity,
    canonical,
    canonical_resources,
    parse_quantity,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Fraction(1)),
        ("0", Fraction(0)),
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("2e3", Fraction(2000)),
        ("2E-3", Fraction(2, 1000)),
        ("1e+2", Fraction(100)),
        ("64Gi", Fraction(64 * 2**30)),
        ("1Ki", Fraction(1024)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("1Ei", Fraction(2**60)),
        ("100M", Fraction(10**8)),
        ("1k", Fraction(1000)),
        ("250u", Fraction(1, 4000)),
        ("10n", Fraction(1, 10**8)),
        ("-1", Fraction(-1)),
        ("+2", Fraction(2)),
    ],
)
def test_parse_quantity(text: str, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1KB", "1ki", "1..5", "m", "1 Gi", "1e", "1e99"])
def test_invalid_quantities_are_refused(text: str) -> None:
    with pytest.raises(InvalidQuantity):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("resource", "text", "value"),
    [
        ("cpu", "500m", 500),
        ("cpu", "2", 2000),
        ("cpu", "0.1", 100),
        ("cpu", "1.0005", 1001),  # rounds up, like Quantity.MilliValue
        ("cpu", "250u", 1),
        ("memory", "64Gi", 64 * 2**30),
        ("memory", "1.5Gi", 3 * 2**29),
        ("memory", "129M", 129_000_000),
        ("memory", "100m", 1),  # 0.1 byte rounds up
        ("nvidia.com/gpu", "8", 8),
        ("pods", "110", 110),
        ("ephemeral-storage", "2e3", 2000),
    ],
)
def test_canonical_units(resource: str, text: str, value: int) -> None:
    assert canonical(resource, text) == value


def test_canonical_resources_converts_every_entry() -> None:
    got = canonical_resources({"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"})
    assert got == {"cpu": 96_000, "memory": 2**40, "nvidia.com/gpu": 8}
