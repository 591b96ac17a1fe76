"""A service declared once: what its core reads, decides and publishes.

The runner runs a ``Spec`` live; ``baton replay`` reads the same ``Spec`` to feed a
recording into a fresh core. Neither knows anything else about the service.

    SPEC = Spec(
        name="gang",
        settings=Settings,                       # frozen msgspec Struct, BATON_GANG_*
        policy_type=GangPolicy,                  # what of the settings decisions depend on
        initial=core.initial,                    # policy -> fresh state
        step=core.step,                          # (state, event, now) -> (state, outputs)
        inputs=(Input("k8s.node.>", NodeEvent), Input("result.bind-gang.>", ActionResult)),
        routes=(Route(BindGang, to=action_route, action=True), Route(GangPlaced, to=...)),
        timer=Timer(every=lambda s: s.cycle_interval, wants=core.wants_tick),
    )

The core rule, held by every core: a core owns its state and may change it in place;
``step`` returns the state to keep (the same object or a new one). The runner
publishes the outputs of an input until they are stored, before it takes the next
input, and never steps an input twice, so an in-place change is never lost or
applied twice. A stop that cannot store them within its grace period says so; the
next start rebuilds the state from the bus, and the cores decide from the state they
see (level-triggered), so nothing the cluster needs is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import msgspec

from baton.libs.bus.publishing import Outgoing
from baton.libs.runtime.settings import policy_from
from baton.proto import subjects
from baton.proto.actions import action_subject
from baton.proto.runner import Tick

S = TypeVar("S")  # the core's state
Step = Callable[[Any, Any, float], tuple[Any, Sequence[Any]]]


@dataclass(frozen=True, slots=True)
class Input:
    """Messages on ``baton.<cluster>.<pattern>`` decode as ``type_`` (a tagged Struct or a
    union of them). ``k8s.*`` patterns are bootstrapped: the core first gets the current
    state of every object, then every change; ``bootstrap=True`` does the same for a
    telemetry report that states a node's current condition (not for discrete events)."""

    pattern: str
    type_: Any
    bootstrap: bool = False

    @property
    def domain(self) -> str:
        return self.pattern.split(".", 1)[0]

    @property
    def bootstrapped(self) -> bool:
        return self.domain == subjects.K8S or (self.bootstrap and self.domain == subjects.TELEMETRY)

    def filter(self, cluster: str) -> str:
        return f"{subjects.PREFIX}.{cluster}.{self.pattern}"


@dataclass(frozen=True, slots=True)
class Route:
    """Where outputs of ``type_`` go: ``to(cluster, output) -> (subject, msg id)``.

    ``action``: a request for the actuator, withheld in dry run (decisions are still
    published). ``to`` may return a whole ``Outgoing`` (another payload, a TTL), or None
    to drop the output."""

    type_: type[Any] | tuple[type[Any], ...]
    to: Callable[[str, Any], tuple[str, str | None] | Outgoing | None]
    action: bool = False


def action_route(cluster: str, action: Any) -> tuple[str, str]:
    """Where every action goes: its subject (``proto.actions.action_subject``, under its
    producer's name), and as the msg id its id and its producer's lease epoch, so one
    leader's republished action is stored once, and a new leader's copy of the same
    decision is stored beside the deposed leader's: ids come from the decision, and with
    the id alone the stream dropped the new leader's copy as a duplicate of the old one,
    which the actuator then fenced (answered ``stale``), so it was never applied."""
    return action_subject(cluster, action), f"{action.id}:{action.epoch}"


SOON_S = 0.05  # how often a runner asks its core's ``Timer.soon``


@dataclass(frozen=True, slots=True)
class Timer:
    """Ticks every ``every(settings)`` seconds while ``wants(state, now)`` holds, and
    sooner (within ``SOON_S``) once ``soon(state)`` says new work waits for a tick: a
    gang admitted a moment ago need not wait out the interval. ``soon`` is asked every
    ``SOON_S``, so it must be a flag the core keeps, not a walk over its state."""

    every: Callable[[Any], float]
    wants: Callable[[Any, float], bool] = lambda state, now: True
    soon: Callable[[Any], bool] | None = None


@dataclass(frozen=True, slots=True)
class Spec(Generic[S]):
    name: str
    settings: type[msgspec.Struct]
    initial: Callable[[Any], S]  # policy -> a fresh state
    step: Step
    inputs: tuple[Input, ...] = ()
    routes: tuple[Route, ...] = ()
    timer: Timer | None = None
    # What of the settings decisions depend on, and its type (to read a recorded one
    # back). Without ``policy``, each field of ``policy_type`` takes the setting of the
    # same name (``policy_from``); a policy built otherwise (parsed quantities, a team
    # file) gives ``policy``.
    policy: Callable[[Any], msgspec.Struct | None] | None = None
    policy_type: type[msgspec.Struct] | None = None
    description: str = ""
    # Logs and metrics of a batch's outputs, once they are stored (never decisions).
    observe: Callable[[Any, Sequence[Any]], None] | None = None
    gauges: Callable[[Any], None] | None = None  # refresh gauges from the state
    # True: the core decides by the wall clock (the actuator's rate limits), not by the
    # time its inputs carry; such a service is not replayed.
    clock: bool = False
    # Subjects (``<domain>.<kind>...`` under ``baton.<cluster>``) the service publishes
    # besides its actions (their subjects follow from its action routes), ticks, starts
    # and dead letters: what its NATS user may publish (``libs.runner.access``).
    publishes: tuple[str, ...] = ()
    # Subjects it reads beside its inputs (its own feed's, a watch beside the runner):
    # with its inputs, which streams its NATS user may read (``libs.runner.access``).
    reads: tuple[str, ...] = ()
    _by_type: dict[type[Any], Route] = field(default_factory=dict, compare=False, repr=False)

    def policy_of(self, settings: Any) -> msgspec.Struct | None:
        """The policy ``settings`` give (None: the service has none)."""
        if self.policy is not None:
            return self.policy(settings)
        if self.policy_type is not None:
            return policy_from(settings, self.policy_type)
        return None

    def __post_init__(self) -> None:
        patterns = [i.pattern for i in self.inputs]
        for i, a in enumerate(patterns):
            for b in patterns[i + 1 :]:
                if subjects.matches(a, b) or subjects.matches(b, a):
                    raise ValueError(f"{self.name}: input patterns {a!r} and {b!r} overlap")
        for route in self.routes:
            types = route.type_ if isinstance(route.type_, tuple) else (route.type_,)
            for t in types:
                self._by_type[t] = route

    def route(self, output: Any) -> Route | None:
        return self._by_type.get(type(output))

    @property
    def input_types(self) -> Any:
        """One tagged union of every input type, ticks included when there is a timer."""
        types = [i.type_ for i in self.inputs] + ([Tick] if self.timer else [])
        union = types[0]
        for t in types[1:]:
            union = union | t
        return union

    def patterns(self, cluster: str) -> list[str]:
        """Every filter subject the service's one consumer reads, its ticks included."""
        found = [i.filter(cluster) for i in self.inputs]
        if self.timer is not None:
            found.append(subjects.runner(cluster, "tick", self.name))
        return found

    def bootstrap_patterns(self, cluster: str, domain: str | None = None) -> list[str]:
        """Subjects read as a snapshot at start (of one state domain, when given)."""
        return [
            i.filter(cluster)
            for i in self.inputs
            if i.bootstrapped and (domain is None or i.domain == domain)
        ]

    def decision_types(self) -> tuple[type[Any], ...]:
        return tuple(t for t, r in self._by_type.items() if not r.action)

    def action_types(self) -> tuple[type[Any], ...]:
        return tuple(t for t, r in self._by_type.items() if r.action)
