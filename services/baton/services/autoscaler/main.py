"""``baton autoscaler``: settings, the service's spec and its entry.

Settings come from ``BATON_AUTOSCALER_<NAME>`` (or ``BATON_<NAME>`` for the shared
ones) and an optional file named by ``BATON_AUTOSCALER_CONFIG``. See docs/autoscaler.md.
"""

from __future__ import annotations

from baton.libs.runner import Input, Spec, Timer, run_spec
from baton.libs.runtime import OPS_PORTS
from baton.libs.runtime.settings import Base, require
from baton.proto import keys
from baton.proto.actions import ActionResult
from baton.proto.admission import GangAdmitted, GangQueued, GangReleased
from baton.proto.autoscaler import AutoscalerPolicy
from baton.proto.balloon import Headroom
from baton.proto.health import Remediate
from baton.proto.k8s import MachineDeploymentEvent, NodeEvent, PodEvent
from baton.proto.placement import GangPlaced, GangUnschedulable
from baton.services.autoscaler import core, shell

PREFIX = "BATON_AUTOSCALER_"


class Settings(Base, frozen=True, kw_only=True):
    """Every ``AutoscalerPolicy`` field (same name, same default) and the service's own."""

    ops_port: int = OPS_PORTS["autoscaler"]
    topology_keys: tuple[str, ...] = keys.DEFAULT_LEVELS
    max_joining: int = 64
    join_interval_s: float = 60.0
    provisioning_timeout_s: float = 900.0
    backoff_s: float = 300.0
    unneeded_s: float = 600.0
    deletion_timeout_s: float = 900.0
    mark_machines: bool = True
    tick_s: float = 1.0  # how often time is looked at while something waits for it
    config: str = ""  # BATON_AUTOSCALER_CONFIG: a settings file (read before the others)

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = {
            "TOPOLOGY_KEYS": len(set(self.topology_keys)) == len(self.topology_keys)
            and all(self.topology_keys),
            "MAX_JOINING": self.max_joining >= 1,
            "JOIN_INTERVAL_S": self.join_interval_s >= 0,
            "PROVISIONING_TIMEOUT_S": self.provisioning_timeout_s > 0,
            "BACKOFF_S": self.backoff_s >= 0,
            "UNNEEDED_S": self.unneeded_s >= 0,
            "DELETION_TIMEOUT_S": self.deletion_timeout_s > 0,
            "TICK_S": self.tick_s > 0,
        }
        require(PREFIX, checks)


SPEC = Spec(
    name="autoscaler",
    description="Gang-aware autoscaling of Cluster API MachineDeployments: a pool grows by a "
    "whole gang's need or not at all; idle nodes go one machine at a time.",
    settings=Settings,
    policy_type=AutoscalerPolicy,
    initial=core.initial,
    step=core.step,
    inputs=(
        Input("k8s.node.>", NodeEvent),
        Input("k8s.pod.>", PodEvent),
        Input("k8s.machinedeployment.>", MachineDeploymentEvent),
        Input("placement.unschedulable.>", GangUnschedulable),
        Input("placement.placed.>", GangPlaced),
        Input("admission.queued.>", GangQueued),
        Input("admission.admitted.>", GangAdmitted),
        Input("admission.released.>", GangReleased),
        Input("balloon.headroom.>", Headroom),
        Input("health.remediate.>", Remediate),
        Input("result.mark-node.>", ActionResult),
        Input("result.scale.>", ActionResult),
    ),
    routes=shell.ROUTES,
    publishes=("autoscaler.>",),
    timer=Timer(every=lambda settings: settings.tick_s, wants=core.wants_tick),
    observe=shell.observe,
    gauges=shell.gauges,
)


def run(argv: list[str]) -> int:
    what = "publish decisions, no scale actions"  # --dry-run
    return run_spec(argv, SPEC, prefix=PREFIX, dry_run=what)
