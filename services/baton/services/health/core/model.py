"""The health core's state: the cluster view, a record per node, the rails. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from baton.libs.view import GangView, View
from baton.proto import keys
from baton.proto.health import HealthPolicy
from baton.services.health.core.nodes import NodeRecord
from baton.services.health.core.rails import Rails, SlowStart


@dataclass(slots=True)
class State:
    policy: HealthPolicy
    view: View[GangView]  # nodes, the pods on them (``libs.view``)
    rails: Rails
    slow: SlowStart
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    paused: bool = False
    pause_reason: str = ""
    asks: dict[str, str] = field(default_factory=dict)  # CreatePod action id -> node
    marks: dict[str, str] = field(default_factory=dict)  # the MarkNode in flight -> node
    freed: bool = False  # a node came back in (or left): withheld verdicts may go through
    # a test slot freed or a node became testable: preflights are asked at the next tick,
    # once for every outcome since (a pass over the validating nodes each)
    slots_changed: bool = False
    # preflight pods that passed, to delete a few at a time (``sweeping``): waiting, by
    # key, in order; asked, by action id
    sweeps: dict[str, tuple[str, str]] = field(default_factory=dict)
    sweeping: dict[str, str] = field(default_factory=dict)

    def record(self, name: str) -> NodeRecord:
        rec = self.nodes.get(name)
        if rec is None:
            rec = self.nodes[name] = NodeRecord(name=name)
        return rec


def initial(policy: HealthPolicy | None = None) -> State:
    policy = policy or HealthPolicy()
    return State(
        policy=policy,
        view=View(levels=keys.DEFAULT_LEVELS, new_gang=GangView),
        rails=Rails(policy=policy),
        slow=SlowStart(policy=policy),
        paused=policy.paused,
    )
