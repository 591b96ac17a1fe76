"""``baton bandwidth``: settings, the service's spec and its entry.

Settings come from ``BATON_BANDWIDTH_<NAME>`` (or ``BATON_<NAME>`` for the shared ones:
``BATON_NATS_URL``, ``BATON_CLUSTER``, ``BATON_DRY_RUN``, ``BATON_OPS_PORT``) and an
optional file named by ``BATON_BANDWIDTH_CONFIG`` or ``--settings``. Team weights,
tiers and minimums come from admission's team file (``BATON_BANDWIDTH_TEAMS_FILE``, the
same ConfigMap) at start, then from admission's ``TeamsLoaded`` when it changes. See
docs/bandwidth.md.
"""

from __future__ import annotations

from baton.libs.runner import Input, Spec, Timer, run_spec
from baton.libs.runtime import OPS_PORTS, SettingsError, load_settings
from baton.libs.runtime.settings import Base, policy_from
from baton.libs.runtime.teams import load_teams
from baton.proto.admission import TeamsLoaded
from baton.proto.bandwidth import DEFAULT_TIERS, BandwidthPolicy, Capacity, NodeEgress, Tier
from baton.proto.k8s import EndpointSliceEvent, PodEvent
from baton.proto.teams import TeamConfigError
from baton.services.bandwidth import core, shell
from baton.services.bandwidth.core.policy import (
    PolicyError,
    check,
    check_teams,
    parse_rate,
    with_teams,
)

PREFIX = "BATON_BANDWIDTH_"


class Settings(Base, frozen=True, kw_only=True):
    ops_port: int = OPS_PORTS["bandwidth"]
    interval_s: float = 0.5  # seconds between allocation rounds (while something moved)
    capacity: str = "10G"  # the cluster's internet egress, bits per second (10G, 400M)
    tiers: tuple[Tier, ...] = DEFAULT_TIERS  # JSON in the environment; served in this order
    internal_cidrs: tuple[str, ...] = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
    teams_file: str = ""  # admission's team config (YAML): each team's egress section
    floor: str = "10M"  # what a pod with nothing measured gets
    headroom: float = 0.25
    saturated: float = 0.9
    stale_s: float = 180.0  # 3 of the agents' egress keep-alives (60 s): a quiet pod is not stale
    hysteresis: float = 0.05
    hysteresis_min: str = "1M"
    endpoint_addresses: int = 64
    annotate: bool = False  # keep kubernetes.io/egress-bandwidth at each pod's limit
    annotate_per_round: int = 100
    annotate_every_s: float = 60.0
    limits_per_s: float = 1000.0  # node limits published a second, on average (0: unpaced)
    limits_per_round: int = 500  # node limits one round publishes at most (0: all at once)
    config: str = ""  # BATON_BANDWIDTH_CONFIG: a settings file (read before the others)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.interval_s <= 0:
            raise ValueError(f"{PREFIX}INTERVAL_S must be positive")
        for key in ("capacity", "floor", "hysteresis_min"):
            try:
                parse_rate(getattr(self, key))
            except ValueError as exc:
                raise ValueError(f"{PREFIX}{key.upper()}: {exc}") from None

    def policy(self) -> BandwidthPolicy:
        """The policy the core decides by: these settings and the team file's egress."""
        policy = policy_from(
            self, BandwidthPolicy, error=PolicyError, capacity_bps=parse_rate(self.capacity),
            floor_bps=parse_rate(self.floor), hysteresis_bps=parse_rate(self.hysteresis_min),
        )  # fmt: skip
        check(policy)
        teams = load_teams(self.teams_file)
        try:
            check_teams(policy, teams)
        except PolicyError as exc:
            raise PolicyError(f"{self.teams_file}: {exc}") from None
        return with_teams(policy, teams)


SPEC = Spec(
    name="bandwidth",
    description="Egress fair shares: per-pod internet egress limits from team weights, tiers "
    "and minimums and measured demand, published per node for the agents to apply.",
    settings=Settings,
    policy=lambda settings: settings.policy(),
    policy_type=BandwidthPolicy,
    initial=core.initial,
    step=core.step,
    inputs=(
        Input("k8s.pod.>", PodEvent),
        Input("k8s.endpointslice.>", EndpointSliceEvent),
        Input("telemetry.egress.>", NodeEgress),
        Input("admission.teams", TeamsLoaded),
        Input("bandwidth.capacity", Capacity),
    ),
    routes=shell.ROUTES,
    publishes=("bandwidth.limits.>", "bandwidth.allocation"),
    timer=Timer(every=lambda settings: settings.interval_s, wants=core.wants_tick),
    observe=shell.observe,
    gauges=shell.gauges,
)


def load(file: str | None) -> Settings:
    """Settings, with the policy and the team file checked: a bad one names its key."""
    settings = load_settings(Settings, PREFIX, file=file)
    try:
        settings.policy()
    except (PolicyError, TeamConfigError) as exc:
        raise SettingsError(_key(str(exc), settings)) from None
    return settings


def _key(message: str, settings: Settings) -> str:
    """``tiers[0].name: ...`` -> ``BATON_BANDWIDTH_TIERS: tiers[0].name: ...``."""
    if settings.teams_file and message.startswith(settings.teams_file):
        return f"{PREFIX}TEAMS_FILE={message}"
    field = message.split(":", 1)[0].split("[", 1)[0].split(".", 1)[0]
    names = {"capacity_bps": "CAPACITY", "floor_bps": "FLOOR", "hysteresis_bps": "HYSTERESIS_MIN"}
    return f"{PREFIX}{names.get(field, field.upper())}: {message}"


def run(argv: list[str]) -> int:
    what = "publish limits, no Annotate actions"  # --dry-run
    return run_spec(argv, SPEC, prefix=PREFIX, load=load, dry_run=what)
