"""``baton.io/expected-duration``: how long one run of a gang is expected to take.

A number of seconds (``"5400"``, ``"90.5"``) or a Go-style duration (``"1h30m"``,
``"45m"``, ``"2h0m0s"``, ``"1.5h"``; units ``h``, ``m``, ``s``, ``ms``, ``us``, ``ns``). It
must be more than zero. The admission webhook refuses a pod or group whose value does not
parse, with the message of ``parse``; the gang service treats such a value as no
estimate (docs/gang.md, "EASY backfill").
"""

from __future__ import annotations

import math
import re

from baton.proto.keys import EXPECTED_DURATION

_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|us|µs|ns|h|m|s)")


def parse(value: str) -> float:
    """Seconds, or ValueError naming the annotation and what is wrong."""
    text = value.strip()
    seconds = _seconds(text)
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(
            f"annotation {EXPECTED_DURATION}: {value!r} is not a duration above zero "
            '(seconds, e.g. "5400", or Go-style, e.g. "1h30m")'
        )
    return seconds


def seconds_or_none(value: str | None) -> float | None:
    """``parse``, with None for an absent or invalid value."""
    if value is None:
        return None
    try:
        return parse(value)
    except ValueError:
        return None


def _seconds(text: str) -> float | None:
    try:
        return float(text) if text and text[0] in "0123456789." else None
    except ValueError:
        pass
    total, at = 0.0, 0
    while at < len(text):
        match = _PART.match(text, at)
        if match is None:
            return None
        total += float(match.group(1)) * _UNITS[match.group(2)]
        at = match.end()
    return total if text else None
