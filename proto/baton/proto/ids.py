"""One id scheme for every action and decision: ``<what>-<24 hex digits>``.

An id is stable for the decision that made it: the same inputs give the same id,
so a decision made again after a restart is deduplicated by JetStream
(``Nats-Msg-Id``) and by the actuator (which applies each action id once). The
digest is SHA-256 over the parts joined with an unprintable separator, so parts
may hold any characters (``/``, ``.``) without two decisions sharing an id.

    make("bind", gang_uid, "3", *member_uids)   -> "bind-5c0e0b...":
"""

from __future__ import annotations

import hashlib

SEPARATOR = "\x1f"


def digest(*parts: str) -> str:
    return hashlib.sha256(SEPARATOR.join(parts).encode()).hexdigest()[:24]


def make(what: str, *parts: object) -> str:
    """``what`` says what kind of decision it is (``bind``, ``evict``, ``taint``...)."""
    return f"{what}-{digest(*(str(p) for p in parts))}"
