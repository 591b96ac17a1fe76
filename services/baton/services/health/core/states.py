"""The per-node state machine, as tables: which moves exist, and what each state puts on
the node. The core moves a node only along ``TRANSITIONS`` (any other move is a bug
and raises); ``MARKS`` says which of Baton's taints and labels the node carries in
each state, so entering a state is a diff against what was last asked for. The docs
print both (``python -m baton.services.health.core.states``). Pure.

Baton adds and removes only its own taints (``baton.io/unhealthy``, ``/draining``,
``/preflight``) and its own label (``baton.io/remediation``), with ``MarkNode`` (one
patch that names only those keys); it never sets or clears ``spec.unschedulable``, so
a node someone cordoned stays cordoned.
"""

from __future__ import annotations

from dataclasses import dataclass

from baton.proto import keys
from baton.proto.health import NodeState
from baton.proto.k8s import Taint

TAINTS: dict[str, Taint] = {
    keys.UNHEALTHY: Taint(key=keys.UNHEALTHY, value="true", effect="NoSchedule"),
    keys.DRAINING: Taint(key=keys.DRAINING, value="true", effect="NoExecute"),
    keys.PREFLIGHT: Taint(key=keys.PREFLIGHT, value="true", effect="NoSchedule"),
}


@dataclass(frozen=True, slots=True)
class Marks:
    taints: frozenset[str]
    remedy_label: bool  # the node carries baton.io/remediation: <remedy>
    meaning: str


_NONE: frozenset[str] = frozenset()
MARKS: dict[NodeState, Marks] = {
    "healthy": Marks(_NONE, False, "in service"),
    "suspect": Marks(_NONE, False, "in service; evidence waits for its duration"),
    "withheld": Marks(_NONE, False, "in service; a rail holds the verdict (published)"),
    "quarantined": Marks(frozenset({keys.UNHEALTHY}), False,
                         "no new pods; running jobs get drain_grace_s to checkpoint"),
    "draining": Marks(frozenset({keys.UNHEALTHY, keys.DRAINING}), False,
                      "the gang service restarts every gang with a pod here, whole, elsewhere"),
    "remediating": Marks(frozenset({keys.UNHEALTHY, keys.DRAINING}), True,
                         "a fixer (or the autoscaler) reboots or replaces the node"),
    "validating": Marks(frozenset({keys.PREFLIGHT}), False,
                        "a preflight pod checks the node; nothing else lands there"),
    "opted-out": Marks(_NONE, False, "health leaves the node alone"),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Transition:
    sources: tuple[NodeState, ...]
    to: NodeState
    when: str


ANY: tuple[NodeState, ...] = tuple(MARKS)
IN_SERVICE: tuple[NodeState, ...] = ("healthy", "suspect", "withheld")

TRANSITIONS: tuple[Transition, ...] = (
    Transition(("healthy", "withheld"), "suspect",
               "evidence seen that has not held its duration yet"),
    Transition(("healthy", "suspect", "withheld"), "quarantined",
               "evidence counts and every rail has room"),
    Transition(("healthy", "suspect"), "withheld",
               "evidence counts but a rail is full, health is paused"),
    Transition(("suspect", "withheld"), "healthy", "the evidence went away before it counted"),
    Transition(("quarantined",), "draining",
               "drain_grace_s passed, or the job is already broken (drain: now), or no GPU "
               "pod runs there"),
    Transition(("draining",), "remediating", "no GPU pod left, or drain_timeout_s passed"),
    Transition(("quarantined", "draining", "remediating"), "validating",
               "healthy evidence: every signal ended (remediating: level signals ended, and "
               "the fixer took the label off or remediation_recheck_s passed)"),
    Transition(("healthy",), "validating",
               "a new node, or an idle node due for its periodic check (a test slot free)"),
    Transition(("validating",), "healthy",
               "the preflight passed (a returning node in its turn: slow start), or a "
               "periodic check found work on the node and was put off"),
    Transition(("validating",), "quarantined",
               "the preflight failed or timed out, or new evidence counts"),
    Transition(ANY, "opted-out", "the node is labelled baton.io/health-opt-out=true"),
    Transition(("opted-out",), "healthy", "the opt-out label is gone"),
)  # fmt: skip

ALLOWED: frozenset[tuple[NodeState, NodeState]] = frozenset(
    (source, t.to) for t in TRANSITIONS for source in t.sources if source != t.to
)


class BadMove(RuntimeError):
    """A move not in TRANSITIONS: the core's bug."""


def check_move(source: NodeState, to: NodeState) -> None:
    if (source, to) not in ALLOWED:
        raise BadMove(f"no transition {source} -> {to} in the health state table")


def markdown() -> str:
    lines = ["| state | taints | remediation label | meaning |", "|---|---|---|---|"]
    for state, m in MARKS.items():
        taints = ", ".join(f"`{k}` {TAINTS[k].effect}" for k in sorted(m.taints)) or "-"
        lines.append(f"| {state} | {taints} | {'yes' if m.remedy_label else '-'} | {m.meaning} |")
    lines += ["", "| from | to | when |", "|---|---|---|"]
    for t in TRANSITIONS:
        sources = "any" if t.sources == ANY else ", ".join(t.sources)
        lines.append(f"| {sources} | {t.to} | {t.when} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
