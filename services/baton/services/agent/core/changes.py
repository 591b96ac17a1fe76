"""What counts as a change: a report is published again when some field differs from the
last published report by at least that field's deadband.

| field | changed when |
|---|---|
| ``temperature_c`` | it moved by the temperature deadband (3 °C by default) |
| ``used_ratio`` (a disk) | it moved by the disk deadband (0.01, one percentage point) |
| ``at`` | never (when, not what) |
| any other field | it differs at all: counters, flags, presence, a GPU or NIC added or gone |

Deadbands compare with the *published* value, so a slow drift is published once it
adds up to the deadband.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

IGNORED: Final = frozenset({"at"})


def deadbands(*, temperature_c: float, disk_ratio: float) -> dict[str, float]:
    """The deadband table, field name -> smallest change that counts."""
    return {"temperature_c": temperature_c, "used_ratio": disk_ratio}


def differs(old: Any, new: Any, bands: Mapping[str, float], field: str = "") -> bool:
    """True when ``new`` is a change from ``old`` under ``bands`` (see the table)."""
    band = bands.get(field)
    if band is not None and _number(old) and _number(new):
        return bool(abs(new - old) >= band)
    if isinstance(old, msgspec.Struct) and type(old) is type(new):
        return any(
            differs(getattr(old, name), getattr(new, name), bands, name)
            for name in old.__struct_fields__
            if name not in IGNORED
        )
    if isinstance(old, tuple) and isinstance(new, tuple):
        return len(old) != len(new) or any(
            differs(a, b, bands, field) for a, b in zip(old, new, strict=True)
        )
    return bool(old != new)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
