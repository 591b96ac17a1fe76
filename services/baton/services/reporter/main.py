"""``baton reporter``: settings, the service's spec and its entry.

Settings come from ``BATON_REPORTER_<NAME>`` (or ``BATON_<NAME>`` for the shared ones:
``BATON_NATS_URL``, ``BATON_CLUSTER``, ``BATON_DRY_RUN``, ``BATON_OPS_PORT``) and an
optional file named by ``BATON_REPORTER_CONFIG``. See docs/reporter.md.
"""

from __future__ import annotations

from baton.libs.runner import Input, Spec, Timer, run_spec
from baton.libs.runtime import OPS_PORTS
from baton.libs.runtime.settings import Base, require
from baton.proto.admission import GangAdmitted, GangPreempted, GangQueued
from baton.proto.k8s import NodeEvent, PodEvent, PodGroupEvent
from baton.proto.placement import AnyPlacement
from baton.services.reporter import core, shell

PREFIX = "BATON_REPORTER_"


class Settings(Base, frozen=True, kw_only=True):
    ops_port: int = OPS_PORTS["reporter"]
    pod_every: float = 30.0  # a waiting gang's pods are told at most this often
    group_every: float = 30.0  # a PodGroup's status that only recounts: at most this often
    settle: float = 1.0  # a gang first told once seen this long, then at most this often
    tick_every: float = 1.0  # how often a deferred report is looked at
    config: str = ""  # BATON_REPORTER_CONFIG: a settings file (read before the others)

    def __post_init__(self) -> None:
        super().__post_init__()
        checks = {"POD_EVERY": self.pod_every >= 0, "GROUP_EVERY": self.group_every >= 0,
                  "SETTLE": self.settle >= 0,
                  "TICK_EVERY": self.tick_every > 0}  # fmt: skip
        require(PREFIX, checks)


SPEC = Spec(
    name="reporter",
    description="Tell Kubernetes users what Baton decided: PodGroup status, pods' "
    "PodScheduled condition and Events, as actions for the actuator.",
    settings=Settings,
    policy_type=core.ReportPolicy,
    initial=core.initial,
    step=core.step,
    inputs=(
        Input("k8s.pod.>", PodEvent),
        Input("k8s.podgroup.>", PodGroupEvent),
        Input("k8s.upstream-podgroup.>", PodGroupEvent),
        Input("k8s.volcano-podgroup.>", PodGroupEvent),
        Input("k8s.node.>", NodeEvent),
        Input("placement.>", AnyPlacement),
        Input("admission.admitted.>", GangAdmitted),
        Input("admission.queued.>", GangQueued),
        Input("admission.preempted.>", GangPreempted),
    ),
    routes=shell.ROUTES,
    timer=Timer(every=lambda settings: settings.tick_every, wants=core.wants_tick),
    observe=shell.observe,
    gauges=shell.gauges,
)


def run(argv: list[str]) -> int:
    what = "decide, publish no actions"  # --dry-run
    return run_spec(argv, SPEC, prefix=PREFIX, dry_run=what)
