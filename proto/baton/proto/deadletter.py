"""Dead letters: a message the bus gave up on, with the reason and whose fault it is.

Published to ``baton.<cluster>.deadletter.<domain>`` (the domain of the original
subject). ``error_class`` says whose fault it was, so an operator knows where to
look: ``bad-input`` (the sender's payload: not JSON, unknown type or version),
``bug`` (our handler raised on every delivery), ``dependency`` (something we need
stayed down for every delivery).
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

ErrorClass = Literal["bad-input", "bug", "dependency"]

# A dead letter must always fit in a NATS message (1 MiB by default), whatever the size
# of the message it is about: it carries at most this much of the payload (the rest is
# in the stream, at ``stream``/``seq``, until it ages out), headers and reason cut too.
PAYLOAD_COPY: Final = 16 * 1024  # bytes of the original payload kept
TEXT_COPY: Final = 2048  # characters of the reason and of each header value
HEADERS_COPY: Final = 32  # headers kept


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
    payload: str  # UTF-8, undecodable bytes as backslash escapes; at most PAYLOAD_COPY bytes
    headers: dict[str, str] = {}
    size: int = 0  # the original payload's size in bytes
    truncated: bool = False  # payload (or headers, reason) cut to fit
    consumer: str = ""
    deliveries: int = 1
    at: float


def copy_of(data: bytes, limit: int = PAYLOAD_COPY) -> tuple[str, bool]:
    """The first ``limit`` bytes of ``data`` as text (backslash escapes for bytes that are
    not UTF-8, so 4x at most), and whether any was left out."""
    kept = data[:limit]
    return kept.decode("utf-8", errors="backslashreplace"), len(data) > limit


def cut(text: str, limit: int = TEXT_COPY) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"
