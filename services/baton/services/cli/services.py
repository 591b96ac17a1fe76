"""What ``baton replay`` feeds a service's core, read from the service's own ``Spec``.

Nothing here names a service: every command of ``baton`` whose module has a ``SPEC``
with bus inputs and event time is replayable. For each run of the service in the
recording (each ``runner.started`` record of it), the feed is exactly what the live
runner fed (``libs.runner.ordering``): the K8S snapshot as of the start's
``k8s_seq``, then every matching HISTORY message after its ``history_seq``, until
the next start. The decisions and actions to compare are the recorded outputs of
that service's routes in the same span.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from baton.libs.bus import Outgoing, stream_configs
from baton.libs.runner import Spec
from baton.libs.runner.ordering import Follow, snapshot
from baton.libs.runtime import load_settings
from baton.proto import subjects
from baton.proto.runner import Started
from baton.services.cli.recording import Record


@dataclass(slots=True)
class Segment:
    """One run of the service: what it was fed and what it published."""

    start: Record | None  # the Started record (None: the recording has none)
    feed: list[Record] = field(default_factory=list)
    recorded: list[Record] = field(default_factory=list)  # its decisions and actions
    as_fed: bool = True  # False: no HISTORY positions, so inputs in the file's order


@dataclass(frozen=True, slots=True)
class Service:
    spec: Spec[Any]
    cluster: str = "c1"

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def outputs(self) -> tuple[type[Any], ...]:
        return self.spec.decision_types() + self.spec.action_types()

    @property
    def types(self) -> Any:
        union = self.spec.input_types | Started
        for t in self.outputs:
            union = union | t
        return union

    @property
    def tags(self) -> frozenset[str]:
        found = {str(t.__struct_config__.tag) for t in self.outputs}
        found |= {str(t.__struct_config__.tag) for t in _members(self.spec.input_types)}
        return frozenset(found | {str(Started.__struct_config__.tag)})

    @property
    def settings_prefix(self) -> str:
        return f"BATON_{self.name.upper()}_"

    def is_decision(self, event: Any) -> bool:
        return isinstance(event, self.spec.decision_types()) and self._mine(event)

    def is_action(self, event: Any) -> bool:
        return isinstance(event, self.spec.action_types()) and self._mine(event)

    def _mine(self, event: Any) -> bool:
        by = getattr(event, "by", None)
        return by is None or by == self.name

    def policy(self, start: Record | None) -> Any:
        """The policy the run was started with, as the core takes it."""
        if start is None or self.spec.policy_type is None:
            return self.policy_from(None)
        return msgspec.convert(start.event.policy, self.spec.policy_type)

    def policy_from(self, settings: str | None) -> Any:
        """The policy the service's settings (a file, the environment) give."""
        loaded = load_settings(self.spec.settings, self.settings_prefix, file=settings or None)
        return self.spec.policy_of(loaded)

    def stream_of(self, output: Any) -> str:
        """The stream an output of this service is stored in (its route's subject)."""
        route = self.spec.route(output)
        target = route.to(self.cluster, output) if route is not None else None
        if target is None:
            return ""
        subject = target.subject if isinstance(target, Outgoing) else target[0]
        for config in stream_configs(self.cluster):
            if any(subjects.matches(p, subject) for p in config.subjects or ()):
                return str(config.name)
        return ""

    def overridden(self) -> list[str]:
        return sorted(k for k in os.environ if k.startswith(self.settings_prefix))

    def segments(self, records: Sequence[Record]) -> list[Segment]:
        ordered = sorted(records, key=lambda r: r.position)
        starts = [
            r for r in ordered if isinstance(r.event, Started) and r.event.service == self.name
        ]
        patterns = self.spec.patterns(self.cluster)
        if not starts or not all(r.hseq for r in ordered):
            # no start record, or no HISTORY positions (``baton tail`` lines): every
            # input in the file's order, under the first start's policy if there is one
            feed = [r for r in ordered if self._input(r, patterns)]
            mine = [r for r in ordered if self.is_decision(r.event) or self.is_action(r.event)]
            first = starts[0] if starts else None
            return [Segment(start=first, feed=feed, recorded=mine, as_fed=False)]
        boots = self.spec.bootstrap_patterns(self.cluster)
        found = []
        for i, start in enumerate(starts):
            until = starts[i + 1].position if i + 1 < len(starts) else None
            span = [r for r in ordered if r.position > start.position
                    and (until is None or r.position < until)]  # fmt: skip
            found.append(
                Segment(
                    start=start,
                    feed=self._feed(ordered, start.event, boots, patterns, until),
                    recorded=[
                        r for r in span if self.is_decision(r.event) or self.is_action(r.event)
                    ],
                )
            )
        return found

    def _feed(
        self,
        ordered: Sequence[Record],
        start: Started,
        boots: list[str],
        patterns: list[str],
        until: int | None,
    ) -> list[Record]:
        cuts = {subjects.K8S: start.k8s_seq, subjects.TELEMETRY: start.telemetry_seq}
        feed = snapshot(ordered, patterns=boots, cuts=cuts) if boots else []
        follow = Follow(cuts)
        for record in ordered:
            if record.position <= start.history_seq or not self._input(record, patterns):
                continue
            if until is not None and record.position >= until:
                break
            if follow.admit(record.subject, record.seq if record.stream else 0):
                feed.append(record)
        return feed

    def _input(self, record: Record, patterns: list[str]) -> bool:
        if isinstance(record.event, Started):
            return False
        if record.subject:
            return any(subjects.matches(p, record.subject) for p in patterns)
        return isinstance(record.event, _members(self.spec.input_types))


def _members(union: Any) -> tuple[type[Any], ...]:
    args = getattr(union, "__args__", None)
    return tuple(args) if args else (union,)


def replayable(cluster: str = "c1") -> dict[str, Service]:
    """Every service with a spec whose decisions follow from its bus inputs."""
    from baton.services.cli.main import COMMANDS

    found: dict[str, Service] = {}
    for name, (target, _) in COMMANDS.items():
        module = target.partition(":")[0]
        if not (module.startswith("baton.services.") and module.endswith(".main")):
            continue
        spec = getattr(importlib.import_module(module), "SPEC", None)
        if isinstance(spec, Spec) and spec.inputs and not spec.clock:
            found[name] = Service(spec=spec, cluster=cluster)
    return found


Step = Callable[[Any, Any, float], tuple[Any, Sequence[Any]]]
