"""Dead-lettering: give up on a message, loudly and with the reason, never crash-loop.

The bus terms the message (JetStream stops redelivering it) and publishes a
``proto.deadletter.DeadLetter`` to ``baton.<cluster>.deadletter.<domain>``. The
publish is deduplicated on ``dl:<stream>:<seq>`` so a redelivered poison message
is dead-lettered once.
"""

from __future__ import annotations

import time

import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from prometheus_client import Counter

from baton.libs.bus.publishing import publish
from baton.proto import subjects
from baton.proto.deadletter import HEADERS_COPY, TEXT_COPY, DeadLetter, ErrorClass, copy_of, cut

log = structlog.get_logger("baton.bus")

DEAD_LETTERS = Counter(
    "baton_bus_dead_letters_total",
    "Messages given up on and published to the dead-letter subject",
    ["domain", "error_class"],
)


def dead_letter_subject(subject: str, *, cluster: str) -> str:
    """``baton.<c>.deadletter.<domain>`` for the domain of ``subject``."""
    parts = subject.split(".")
    if len(parts) >= 3 and parts[0] == subjects.PREFIX:
        cluster, domain = parts[1], parts[2]
    else:
        domain = "unknown"
    return subjects.wildcard(cluster, subjects.DEADLETTER, domain)


def letter_for(raw: Msg, *, reason: str, error_class: ErrorClass) -> DeadLetter:
    """The letter for ``raw``: always small enough to publish, however big ``raw`` was
    (a truncated copy; the whole message stays at ``stream``/``seq``)."""
    meta = raw.metadata
    all_headers = list((raw.headers or {}).items())
    headers = {cut(str(k), 256): cut(str(v)) for k, v in all_headers[:HEADERS_COPY]}
    payload, truncated = copy_of(raw.data or b"")
    truncated = truncated or len(all_headers) > HEADERS_COPY or len(reason) > TEXT_COPY
    return DeadLetter(
        subject=raw.subject,
        stream=meta.stream,
        seq=meta.sequence.stream,
        reason=cut(reason),
        error_class=error_class,
        payload=payload,
        headers=headers,
        size=len(raw.data or b""),
        truncated=truncated,
        consumer=meta.consumer,
        deliveries=meta.num_delivered,
        at=time.time(),
    )


async def dead_letter(
    js: JetStreamContext, raw: Msg, *, cluster: str, reason: str, error_class: ErrorClass
) -> None:
    """Publish the dead letter, then term the message (in that order: never lose it)."""
    await publish_dead_letter(js, raw, cluster=cluster, reason=reason, error_class=error_class)
    await raw.term()


async def publish_dead_letter(
    js: JetStreamContext, raw: Msg, *, cluster: str, reason: str, error_class: ErrorClass
) -> None:
    """Publish the dead letter only: for a consumer that does not ack (nothing to term)."""
    letter = letter_for(raw, reason=reason, error_class=error_class)
    target = dead_letter_subject(raw.subject, cluster=cluster)
    await publish(js, target, letter, msg_id=f"dl:{letter.stream}:{letter.seq}")
    DEAD_LETTERS.labels(domain=target.rsplit(".", 1)[-1], error_class=error_class).inc()
    log.warning(
        "dead-lettered",
        subject=raw.subject,
        seq=letter.seq,
        reason=reason,
        error_class=error_class,
        deliveries=letter.deliveries,
        to=target,
    )
