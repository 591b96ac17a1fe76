"""Stable action ids: the same decision always gets the same id (the actuator applies it once)."""

from __future__ import annotations

import hashlib


def digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:24]
