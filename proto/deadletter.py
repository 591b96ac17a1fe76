"""Dead letters: a message the bus gave up on, with the reason and whose fault it is.

Published to ``baton.<cluster>.deadletter.<domain>`` (the domain of the original
subject). ``error_class`` says whose fault it was, so an operator knows where to
look: ``bad-input`` (the sender's payload: not JSON, unknown type or version),
``bug`` (our handler raised on every delivery), ``dependency`` (something we need
stayed down for every delivery).
"""

from __future__ import annotations

from typing import Literal

import msgspec

ErrorClass = Literal["bad-input", "bug", "dependency"]


class DeadLetter(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    tag_field="type",
    tag="deadletter.v1",
):
    subject: str  # where the message was published
    stream: str
    seq: int  # its stream sequence
    reason: str
    error_class: ErrorClass
    payload: str  # UTF-8, undecodable bytes as backslash escapes
    headers: dict[str, str] = {}
    consumer: str = ""
    deliveries: int = 1
    at: float
