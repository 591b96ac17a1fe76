"""``baton gang``: settings, the service's spec and its entry.

Settings come from ``BATON_GANG_<NAME>`` (or ``BATON_<NAME>`` for the shared ones:
``BATON_NATS_URL``, ``BATON_CLUSTER``, ``BATON_DRY_RUN``, ``BATON_OPS_PORT``) and an
optional file named by ``BATON_GANG_CONFIG``. See docs/gang.md.
"""

from __future__ import annotations

from baton.libs.runner import Input, Spec, Timer, run_spec
from baton.libs.runtime import OPS_PORTS
from baton.libs.runtime.settings import Base, require
from baton.proto import keys
from baton.proto.actions import ActionResult
from baton.proto.k8s import (
    DeviceClassEvent,
    NodeEvent,
    PodEvent,
    PodGroupEvent,
    ResourceClaimEvent,
    ResourceSliceEvent,
)
from baton.proto.placement import GangPolicy
from baton.services.gang import core, shell

PREFIX = "BATON_GANG_"


class Settings(Base, frozen=True, kw_only=True):
    ops_port: int = OPS_PORTS["gang"]
    cycle_interval: float = 0.5  # seconds between placement cycles (while gangs wait)
    topology_keys: tuple[str, ...] = keys.DEFAULT_LEVELS  # broad -> narrow
    require_admission: bool = False  # place only gangs the admission service admitted
    recreate_bare_pods: bool = True
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0
    assume_timeout_s: float = 30.0
    verdict_refresh_s: float = 10.0
    reserve_after_s: float = 0.0
    strict_fifo: bool = False  # nothing behind the first gang that does not fit is placed
    shortest_first_s: float = 0.0  # one-pod gangs move back for expected work, this most
    shortest_first_weight: float = 0.25  # seconds moved back per expected GPU-second
    preemption: bool = True  # a waiting gang takes lower-priority running gangs off, whole
    preempt_min_run_s: float = 300.0
    preempt_grace_s: int = 30
    defrag_moves_per_hour: int = 4
    backfill_estimates: bool = True  # EASY: backfill on the head's nodes if done before it starts
    learn_estimates: bool = False  # no baton.io/expected-duration: the team's recent runs
    estimate_percentile: float = 90.0
    estimate_samples: int = 5
    estimate_history: int = 50
    backfill_loans: bool = True  # a head may take back gangs backfilled on its nodes
    config: str = ""  # BATON_GANG_CONFIG: a settings file (read before the others)

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = {
            "CYCLE_INTERVAL": self.cycle_interval > 0,
            "TOPOLOGY_KEYS": len(set(self.topology_keys)) == len(self.topology_keys)
            and all(self.topology_keys),
            "BACKOFF_S": self.backoff_s > 0,
            "BACKOFF_MAX_S": self.backoff_max_s >= self.backoff_s,
            "ASSUME_TIMEOUT_S": self.assume_timeout_s > 0,
            "VERDICT_REFRESH_S": self.verdict_refresh_s >= 0,
            "RESERVE_AFTER_S": self.reserve_after_s >= 0,
            "SHORTEST_FIRST_S": self.shortest_first_s >= 0,
            "SHORTEST_FIRST_WEIGHT": self.shortest_first_weight >= 0,
            "PREEMPT_MIN_RUN_S": self.preempt_min_run_s >= 0,
            "PREEMPT_GRACE_S": self.preempt_grace_s >= 0,
            "DEFRAG_MOVES_PER_HOUR": self.defrag_moves_per_hour >= 0,
            "ESTIMATE_PERCENTILE": 0 < self.estimate_percentile <= 100,
            "ESTIMATE_SAMPLES": self.estimate_samples >= 1,
            "ESTIMATE_HISTORY": self.estimate_history >= self.estimate_samples,
        }
        require(PREFIX, checks)


SPEC = Spec(
    name="gang",
    description="All-or-nothing, topology-aware gang placement: publishes placement "
    "decisions and bind/evict actions.",
    settings=Settings,
    policy_type=GangPolicy,
    initial=core.initial,
    step=core.step,
    inputs=(
        Input("k8s.node.>", NodeEvent),
        Input("k8s.pod.>", PodEvent),
        Input("k8s.podgroup.>", PodGroupEvent),
        Input("k8s.upstream-podgroup.>", PodGroupEvent),
        Input("k8s.volcano-podgroup.>", PodGroupEvent),
        Input("k8s.resourceslice.>", ResourceSliceEvent),
        Input("k8s.deviceclass.>", DeviceClassEvent),
        Input("k8s.resourceclaim.>", ResourceClaimEvent),
        Input("result.bind-gang.>", ActionResult),
    ),
    routes=shell.ROUTES,
    publishes=("placement.>",),
    timer=Timer(
        every=lambda settings: settings.cycle_interval, wants=core.wants_tick, soon=core.fresh_work
    ),
    observe=shell.observe,
    gauges=shell.gauges,
)


def run(argv: list[str]) -> int:
    what = "publish decisions, no actions"  # --dry-run
    return run_spec(argv, SPEC, prefix=PREFIX, dry_run=what)
