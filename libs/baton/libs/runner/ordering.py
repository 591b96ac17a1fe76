"""Which messages a run feeds its core, in which order: one rule, live and in replay.

A run starts from a *cut* (``proto.runner.Started``):

1. the snapshot: for every state subject the service reads (``k8s.*`` inputs, and the
   telemetry reports it bootstraps), its last message with a sequence at or below the
   cut's for that stream (``k8s_seq``, ``telemetry_seq``), K8S first, each in order;
2. then every HISTORY message after ``history_seq`` that matches one of the service's
   patterns, in HISTORY order, except a K8S event the snapshot (or an earlier fed
   message) already covers: one whose K8S sequence is not above the highest fed.

HISTORY copies K8S, so a K8S event can reach HISTORY after the cut although the
snapshot already held it (or a newer version of the same object); step 2 drops those.
The runner (``feeding``) and ``baton replay`` both use ``Follow``; replay builds the
snapshot from the recording with ``snapshot``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from baton.proto import subjects

SOURCE_HEADER = "Nats-Stream-Source"


def origin(headers: dict[str, str] | None) -> tuple[str, int]:
    """(stream, sequence) a HISTORY message was copied from (``Nats-Stream-Source``:
    ``"<stream> <seq> <filter> <transform> ..."``); ``("", 0)`` when absent."""
    source = (headers or {}).get(SOURCE_HEADER, "")
    parts = source.split(" ")
    if len(parts) >= 2 and parts[1].isdigit():
        return parts[0].split(":")[0], int(parts[1])
    return "", 0


# Domains whose subjects hold a current value per subject, read as a snapshot at start:
# each domain's stream and the cut's sequence in it.
STATE_DOMAINS = (subjects.K8S, subjects.TELEMETRY)


def domain_of(subject: str) -> str:
    parts = subject.split(".", 3)
    return parts[2] if len(parts) > 2 else ""


def is_k8s(subject: str) -> bool:
    return domain_of(subject) == subjects.K8S


class Follow:
    """Step 2's filter. ``admit`` must see every candidate message in HISTORY order.
    ``cuts``: per state domain (``k8s``, ``telemetry``), the stream sequence its snapshot
    was taken at; a message of that domain at or below the highest fed is covered."""

    def __init__(self, cuts: dict[str, int]) -> None:
        self.high = dict(cuts)

    def admit(self, subject: str, origin_seq: int) -> bool:
        """``origin_seq``: the message's sequence in its own stream (0 when unknown)."""
        domain = domain_of(subject)
        if domain not in self.high or origin_seq == 0:
            return True
        if origin_seq <= self.high[domain]:
            return False
        self.high[domain] = origin_seq
        return True


class Stored(Protocol):
    @property
    def subject(self) -> str: ...
    @property
    def seq(self) -> int: ...  # its sequence in its own stream


R = TypeVar("R", bound=Stored)


def snapshot(records: Iterable[R], *, patterns: Sequence[str], cuts: dict[str, int]) -> list[R]:
    """Step 1 from a recording: the last event per matching subject up to its domain's cut,
    K8S first, then telemetry, each in its stream's order (as the runner reads them)."""
    last: dict[str, R] = {}
    for record in records:
        domain = domain_of(record.subject)
        if domain not in cuts or not 0 < record.seq <= cuts[domain]:
            continue
        if not any(subjects.matches(p, record.subject) for p in patterns):
            continue
        held = last.get(record.subject)
        if held is None or held.seq < record.seq:
            last[record.subject] = record
    order = {d: i for i, d in enumerate(STATE_DOMAINS)}
    return sorted(last.values(), key=lambda r: (order.get(domain_of(r.subject), 9), r.seq))
