"""What the health core keeps per node: its state, the evidence in force, its check.

Evidence is a set of *signals*, each a row of a rules table seen on the node. A report
(GPU, node, conditions) replaces the signals of its source: a signal no longer seen
ends. A signal counts once it has held its rule's ``after_s``; a link-like rule
(``flaps``: a NIC, Ready) that went bad ``flap_count`` times within ``flap_window_s``
counts at once, as a latched ``flapping`` signal (a flapping link is not trusted again
until a preflight passes).
Latched signals end only when the node passes a preflight. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import msgspec

from baton.proto.health import Evidence, HealthPolicy, NodeState, Note
from baton.services.health.core import rules
from baton.services.health.core.devices import Devices
from baton.services.health.core.rules import Found, Rule

INF = math.inf


@dataclass(slots=True)
class Signal:
    rule: Rule
    key: str
    detail: str
    since: float
    source: str
    counts_at: float

    def evidence(self) -> Evidence:
        return Evidence(rule=self.rule.name, detail=self.detail, since=self.since,
                        source=self.source)  # fmt: skip


@dataclass(slots=True)
class Check:
    """A preflight in progress on the node."""

    why: str  # "new node", "returning", "recheck"
    pod: str = ""  # the pod asked for ('' while waiting for a slot or for the node to empty)
    action: str = ""  # the CreatePod action id
    asked: float = 0.0  # when the pod was asked for
    tries: int = 0  # pods asked for
    seen: bool = False  # the pod appeared
    passed: float = 0.0  # passed, waiting for its turn to return (slow start)
    put_off: bool = False  # a periodic check found work on the node: try another time


@dataclass(slots=True)
class NodeRecord:
    name: str
    uid: str = ""
    seen: bool = False  # the Node object was seen (telemetry may come first)
    state: NodeState = "healthy"
    since: float = 0.0
    reason: str = ""
    signals: dict[str, Signal] = field(default_factory=dict)
    flaps: dict[str, list[float]] = field(default_factory=dict)  # rule -> times it went bad
    remedy: str = ""  # reboot | replace, from remediating on
    reboots: int = 0  # reboots asked since the node last passed a preflight
    validated: float = 0.0  # last passing preflight (0: never)
    returning: bool = False  # out for a fault (validating: slow start applies)
    released: float = -INF  # last return to service (probation)
    recheck_at: float = 0.0  # remediating: next preflight attempt
    check: Check | None = None
    asked: frozenset[str] = frozenset()  # Baton's taint keys as last asked for
    shown: frozenset[str] = frozenset()  # Baton's taint keys on the node as last seen
    label: str = ""  # the remediation label as last asked for
    remark_at: float = INF  # a MarkNode failed: ask again for all its state wants then
    label_seen: bool = False  # the node showed our remediation label
    fixed: bool = False  # ... and then someone took it off: remediated
    first_check: bool = False  # a new node: validate before any work lands
    withheld: str = ""  # the reason last published in a Withheld ('' none)
    rail: str = ""  # ... and its rail
    deadline: float = INF  # when time alone may change something
    opt_out: bool = False
    cordoned: bool = False
    devices: Devices = field(default_factory=Devices)  # DRA's slices against the agent's

    # -- evidence ---------------------------------------------------------------

    def sync(self, source: str, found: Found, now: float, policy: HealthPolicy) -> None:
        """The signals ``source`` shows now: new ones start, missing ones end."""
        for key in [k for k, s in self.signals.items() if s.source == source and k not in found]:
            del self.signals[key]
        for key, (rule, detail) in found.items():
            held = self.signals.get(key)
            if held is not None:
                held.detail = detail
                continue
            self.start(key, rule, detail, now=now, source=source, policy=policy)

    def start(
        self, key: str, rule: Rule, detail: str, *, now: float, source: str, policy: HealthPolicy
    ) -> None:
        if not rule.acts:
            return
        self.signals[key] = Signal(rule=rule, key=key, detail=detail, since=now, source=source,
                                   counts_at=now + rule.after(policy))  # fmt: skip
        if not rule.flaps:
            return
        times = [t for t in self.flaps.get(rule.name, ()) if now - t < policy.flap_window_s]
        times.append(now)
        self.flaps[rule.name] = times
        if len(times) >= policy.flap_count:
            words = f"{detail} ({len(times)} times in {policy.flap_window_s:g} s)"
            self.signals[f"flapping:{rule.name}"] = Signal(
                rule=rules.FLAPPING, key=f"flapping:{rule.name}", detail=words, since=now,
                source="flapping", counts_at=now,
            )  # fmt: skip

    def end(self, key: str) -> None:
        self.signals.pop(key, None)

    def counting(self, now: float) -> list[Signal]:
        return [s for s in self.signals.values() if s.counts_at <= now]

    def waiting(self, now: float) -> list[Signal]:
        return [s for s in self.signals.values() if s.counts_at > now]

    @property
    def clear(self) -> bool:
        """No evidence at all."""
        return not self.signals

    @property
    def level_clear(self) -> bool:
        """No evidence but latched events (which only a passing preflight ends)."""
        return all(s.rule.latched for s in self.signals.values())

    def forget_latched(self) -> None:
        for key in [k for k, s in self.signals.items() if s.rule.latched]:
            del self.signals[key]

    def evidence(self) -> tuple[Evidence, ...]:
        return tuple(s.evidence() for s in sorted(self.signals.values(), key=_order))

    def drain_now(self, now: float) -> bool:
        return any(s.rule.drain == "now" for s in self.counting(now))

    def worst_remedy(self) -> str:
        if any(s.rule.remedy == "replace" for s in self.signals.values()):
            return "replace"
        return "replace" if self.reboots >= 1 else "reboot"

    # -- the node annotation ----------------------------------------------------

    def note(self) -> Note:
        return Note(state=self.state, since=self.since, reason=self.reason,
                    evidence=self.evidence()[:8], remedy=self.remedy,
                    validated=self.validated)  # fmt: skip

    def restore(self, note: Note, now: float) -> None:
        """Resume where the node annotation says the node was (after a restart)."""
        self.state, self.since, self.reason = note.state, note.since, note.reason
        self.remedy, self.validated = note.remedy, note.validated
        if self.remedy == "reboot":
            self.reboots = 1
        if note.state in OUT or note.state == "validating":
            self.returning = True
        if note.state in OUT:
            told = note.evidence or (Evidence(rule="restored", detail=note.reason or note.state,
                                              since=note.since),)  # fmt: skip
            for i, ev in enumerate(told):
                key = f"restored:{i}"
                self.signals[key] = Signal(
                    rule=rules.RESTORED, key=key, detail=f"{ev.rule}: {ev.detail}",
                    since=ev.since, source="restored", counts_at=ev.since,
                )  # fmt: skip


OUT: frozenset[NodeState] = frozenset({"quarantined", "draining", "remediating"})


def read_note(raw: str) -> Note | None:
    try:
        return msgspec.json.decode(raw, type=Note)
    except msgspec.DecodeError:
        return None


def _order(s: Signal) -> tuple[float, str]:
    return (s.since, s.key)
