"""The whole-system bench reads every batch's lag from the runners' histogram."""

from __future__ import annotations

import math

import pytest

from tests.bench.bench_whole import behind

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("buckets", "expected"),
    [
        ({0.05: 3, 0.1: 5, 5.0: 9, 10.0: 10, math.inf: 10}, (1, 10, "5-10")),  # one over 5 s
        ({0.05: 3, 0.1: 5, 5.0: 5, 10.0: 5, math.inf: 5}, (0, 5, "0.05-0.1")),
        ({0.05: 4, 5.0: 4, math.inf: 4}, (0, 4, "0-0.05")),
        ({}, (0, 0, "-")),  # the service published no histogram (yet)
    ],
)
def test_batches_over_five_seconds_and_the_worst_bucket(
    buckets: dict[float, float], expected: tuple[float, float, str]
) -> None:
    assert behind(buckets) == expected
