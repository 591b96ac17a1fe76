"""Whether the actuator may apply an action: its subject, its body and its producer's
lease must agree. Pure: the subject, the body and the lease epochs known come in.

The subject is ``baton.<c>.action.<kind>.<producer>.<key...>``. NATS lets each service
publish only ``action.<kind>.<its own name>.>`` for the kinds it routes
(``libs.runner.access``), so with auth on the subject's producer is the authenticated
sender; nothing in the body is believed unless the subject says the same:

1. the subject is an action subject of this cluster, with a producer token;
2. the body's kind is the subject's kind (a ``create-pod`` body on a ``bind-gang``
   subject is refused);
3. the producer may ask for that kind (``proto.actions.ASKS``);
4. the body's ``by`` is the producer, and the subject is the one the body's own
   object gives (``proto.actions.action_subject``);
5. its ``epoch`` is the producer's current lease epoch: zero, a producer with no
   lease, or an epoch ahead of the lease's are refused; an older one is ``stale`` (a
   deposed leader's action: answered, not a forgery).

``refused`` actions are failed and dead-lettered with the reason; ``stale`` ones are
answered and acked, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from baton.proto import subjects
from baton.proto.actions import ASKS, AnyAction, action_subject, kind_of

Verdict = Literal["ok", "stale", "refused"]


def judge(
    *, cluster: str, subject: str, action: AnyAction, epochs: Mapping[str, int]
) -> tuple[Verdict, str]:
    """``("ok", "")``, or a verdict and why (a sentence naming what disagrees)."""
    tokens = subject.split(".")
    if len(tokens) < 6 or tokens[:3] != [subjects.PREFIX, cluster, subjects.ACTION]:
        return (
            "refused",
            f"refused: {subject!r} is not baton.{cluster}.action.<kind>.<producer>.<key>",
        )
    kind, producer, body = tokens[3], tokens[4], kind_of(action)
    if body != kind:
        return "refused", f"refused: the body is {body}, the subject says {kind} ({subject})"
    allowed = ASKS.get(producer)
    if allowed is None:
        return "refused", f"refused: {producer!r} is no producer of actions ({subject})"
    if kind not in allowed:
        return "refused", (
            f"refused: {producer} may not ask for {kind} (only {', '.join(sorted(allowed))})"
        )
    if action.by != producer:
        return "refused", f"refused: the body says by={action.by!r}, the subject {producer!r}"
    expected = action_subject(cluster, action)
    if expected != subject:
        return "refused", f"refused: the body names {expected}, it came on {subject}"
    return _fenced(producer, action.epoch, epochs.get(producer, 0))


def _fenced(producer: str, epoch: int, current: int) -> tuple[Verdict, str]:
    if epoch <= 0:
        return "refused", f"refused: {producer}'s action carries no lease epoch"
    if current == 0:
        return "refused", f"refused: {producer} holds no lease (epoch {epoch} claimed)"
    if epoch < current:
        return "stale", f"stale: epoch {epoch} of {producer!r} is older than its leader's {current}"
    if epoch > current:
        return "refused", f"refused: epoch {epoch} of {producer} is ahead of its lease's {current}"
    return "ok", ""
