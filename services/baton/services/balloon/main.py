"""``baton balloon``: settings, the service's spec and its entry.

Settings come from ``BATON_BALLOON_<NAME>`` (or ``BATON_<NAME>`` for the shared ones)
and an optional file named by ``BATON_BALLOON_CONFIG``. See docs/balloon.md.
"""

from __future__ import annotations

from baton.libs.runner import Input, Spec, Timer, run_spec
from baton.libs.runtime import OPS_PORTS
from baton.libs.runtime.settings import Base, require
from baton.proto.actions import ActionResult
from baton.proto.balloon import BalloonPolicy
from baton.proto.k8s import CapacityBufferEvent, MachineDeploymentEvent, NodeEvent, PodEvent
from baton.proto.placement import GangPlaced
from baton.services.balloon import core, shell

PREFIX = "BATON_BALLOON_"
MODES = ("off", "static", "demand")


class Settings(Base, frozen=True, kw_only=True):
    """Every ``BalloonPolicy`` field (same name, same default) and the service's own."""

    ops_port: int = OPS_PORTS["balloon"]
    mode: str = "static"
    static_nodes: int = 1
    pools: tuple[str, ...] = ()
    teams: tuple[str, ...] = ()
    window_s: float = 3600.0
    quantile: float = 0.9
    max_idle_nodes: int = 16
    namespace: str = "baton-system"
    priority_class: str = "baton-balloon"
    image: str = "registry.k8s.io/pause:3.9"
    tick_s: float = 5.0  # how often each pool's headroom is looked at
    config: str = ""  # BATON_BALLOON_CONFIG: a settings file (read before the others)

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = {
            "MODE": self.mode in MODES,
            "STATIC_NODES": self.static_nodes >= 0,
            "WINDOW_S": self.window_s > 0,
            "QUANTILE": 0 < self.quantile <= 1,
            "MAX_IDLE_NODES": self.max_idle_nodes >= 0,
            "NAMESPACE": bool(self.namespace),
            "TICK_S": self.tick_s > 0,
        }
        require(PREFIX, checks)


SPEC = Spec(
    name="balloon",
    description="Warm GPU capacity: placeholder pods (priority -10, safe to evict) hold "
    "whole nodes per pool, static or sized by recent gangs; deficits go to the autoscaler.",
    settings=Settings,
    policy_type=BalloonPolicy,
    initial=core.initial,
    step=core.step,
    inputs=(
        Input("k8s.node.>", NodeEvent),
        Input("k8s.pod.>", PodEvent),
        Input("k8s.machinedeployment.>", MachineDeploymentEvent),
        Input("k8s.capacitybuffer.>", CapacityBufferEvent),
        Input("placement.placed.>", GangPlaced),
        Input("result.create-pod.>", ActionResult),
    ),
    routes=shell.ROUTES,
    publishes=("balloon.>",),
    timer=Timer(every=lambda settings: settings.tick_s, wants=core.wants_tick),
    observe=shell.observe,
    gauges=shell.gauges,
)


def run(argv: list[str]) -> int:
    what = "publish headroom, create and remove no pods"  # --dry-run
    return run_spec(argv, SPEC, prefix=PREFIX, dry_run=what)
