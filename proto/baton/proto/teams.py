"""Team policy as data: who owns which nodes and namespaces, GPU quotas, borrowing,
lending and egress shares; and its validation (``parse``: admission and bandwidth read
the same team file, and refuse the same files with the same ``TeamConfigError``).
Carried on the bus by ``proto.admission.TeamsLoaded`` and in admission's recorded
policy, so the contract lives here."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

DEFAULT_TEAM = "default"

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_QUANTITY = r"^([0-9]+(\.[0-9]+)?(k|M|G|T|Ki|Mi|Gi|Ti)?)?$"  # empty: no limit

Name = Annotated[str, msgspec.Meta(pattern=_DNS_LABEL, max_length=63)]
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DeviceClassName = Annotated[str, msgspec.Meta(pattern=_DNS_SUBDOMAIN, max_length=253)]
Count = Annotated[int, msgspec.Meta(ge=0)]


class Gpus(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    gpus: Count


class Egress(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A team's share of the cluster's internet egress (the bandwidth service).

    ``weight``: its weighted max-min share within its ``tier`` (tiers are the bandwidth
    service's, served in order: by default ``critical``, ``normal``, ``background``);
    ``minimum``: guaranteed while the team has demand; ``limit``: the
    ``kubernetes.io/egress-bandwidth`` the webhook stamps on each new pod (a per-pod cap).
    """

    weight: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    limit: Annotated[str, msgspec.Meta(pattern=_QUANTITY)] = ""  # kubernetes.io/egress-bandwidth
    tier: Annotated[str, msgspec.Meta(pattern=_DNS_LABEL, max_length=63)] = "normal"
    minimum: Annotated[str, msgspec.Meta(pattern=_QUANTITY)] = ""  # e.g. 1G (bits per second)


class Queueing(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How each team's queue is served (Kueue's ``queueingStrategy``).

    ``BestEffortFIFO``: a gang that cannot be admitted now (its team's quota, capacity)
    does not block smaller ones behind it; but once a gang has waited
    ``starvation_s`` it holds a reservation: those behind it are admitted only where
    they leave room for it. ``StrictFIFO``: nothing behind the head is admitted.
    ``members_timeout_s``: a gang with fewer member pods than it needs after that long
    (or after its PodGroup's ``scheduleTimeoutSeconds``) is set aside, as is one larger
    than its team could ever hold; neither blocks nor reserves.
    ``place_within_s``: a gang admitted but with no member bound that long gives its
    GPUs back and queues again; it is admitted again in its turn, not before
    ``place_backoff_s`` x 2^(n-1) after its n-th such release (at most an hour), as
    Kueue's ``waitForPodsReady`` timeout and requeuing backoff.
    """

    strategy: Literal["BestEffortFIFO", "StrictFIFO"] = "BestEffortFIFO"
    starvation_s: Annotated[float, msgspec.Meta(ge=0)] = 1800.0
    members_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 600.0
    place_within_s: Annotated[float, msgspec.Meta(gt=0)] = 300.0
    place_backoff_s: Annotated[float, msgspec.Meta(gt=0)] = 60.0
    # a gang over its team's quota preempts lower-priority gangs of its team (whole,
    # least GPU-time lost first) that have run at least preempt_min_run_s
    preempt_within_team: bool = True
    preempt_min_run_s: Annotated[float, msgspec.Meta(ge=0)] = 300.0


class Team(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: Name
    namespaces: tuple[Name, ...] = ()
    pools: tuple[Annotated[str, msgspec.Meta(min_length=1, max_length=63)], ...] = ()
    nodes: Count = 0  # nodes in no team's pool, assigned to this team (sticky, by name)
    quota: Gpus | None = None  # None: the GPUs of the team's own nodes
    borrow: Gpus = Gpus(gpus=0)
    lend: bool = True
    priority: int = 0
    taint: bool = True  # label AND taint owned nodes (False: label only)
    egress: Egress = Egress()
    weight: Annotated[float, msgspec.Meta(gt=0)] = 1.0  # fair share: teams served by share
    # Caps on the devices of DeviceClasses other than whole GPUs (MIG devices:
    # ``mig.nvidia.com``; RDMA NICs) that the team's admitted gangs' claims ask, counted
    # as Kubernetes' ResourceQuota counts ``<class>.deviceclass.resource.k8s.io/devices``.
    # Whole GPUs count in ``quota.gpus``. No borrowing: a gang over a cap waits.
    devices: dict[DeviceClassName, Count] = {}


class TeamConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    teams: tuple[Team, ...] = ()
    queueing: Queueing = Queueing()

    @property
    def by_name(self) -> dict[str, Team]:
        return {t.name: t for t in self.teams}


# No config: one team, every namespace (namespaces=() means "any" only for this team).
DEFAULT = TeamConfig(
    teams=(Team(name=DEFAULT_TEAM, taint=False, lend=False),),
)


def is_default(config: TeamConfig) -> bool:
    """The one-team default (whatever its queueing)."""
    return config is DEFAULT or config.teams == DEFAULT.teams


class TeamConfigError(ValueError):
    """The team config is invalid (the operator's fault); the message names the key path."""


def parse(data: Any) -> TeamConfig:
    """Validate decoded YAML/JSON; None or an empty document means the default config."""
    if data is None or data == {} or data == {"teams": []}:
        return DEFAULT
    try:
        config = msgspec.convert(data, TeamConfig)
    except msgspec.ValidationError as exc:
        raise TeamConfigError(_explain(str(exc))) from None
    if not config.teams:  # only queueing settings: the default team, queued that way
        return msgspec.structs.replace(DEFAULT, queueing=config.queueing)
    _check_semantics(config)
    return config


def _explain(message: str) -> str:
    """msgspec's ``Expected `int` >= 0 - at `$.teams[2].quota.gpus``` -> ours."""
    what, sep, where = message.rpartition(" - at ")
    if not sep:
        return message
    key = where.startswith("`key` in ")  # a mapping's key, not its value, is wrong
    where = where.removeprefix("`key` in ")
    path = where.strip("`").removeprefix("$").removeprefix(".") or "<root>"
    path += " (a key)" if key else ""
    what = what.replace("`", "")
    if what.startswith("Expected "):
        what = "expected " + what.removeprefix("Expected ")
    if what.startswith("Object contains unknown field "):
        field = what.removeprefix("Object contains unknown field ")
        return f"{path}.{field}: unknown key"
    if what.startswith("Object missing required field "):
        field = what.removeprefix("Object missing required field ")
        return f"{path}.{field}: required key missing"
    return f"{path}: {what}"


def _check_semantics(config: TeamConfig) -> None:
    seen_names: dict[str, int] = {}
    namespace_owner: dict[str, int] = {}
    pool_owner: dict[str, int] = {}
    for i, team in enumerate(config.teams):
        if team.name in seen_names:
            first = seen_names[team.name]
            raise TeamConfigError(
                f"teams[{i}].name: {team.name!r} is already the name of teams[{first}]"
            )
        seen_names[team.name] = i
        for j, ns in enumerate(team.namespaces):
            if ns in namespace_owner:
                other = config.teams[namespace_owner[ns]].name
                raise TeamConfigError(
                    f"teams[{i}].namespaces[{j}]: namespace {ns!r} "
                    f"is already owned by team {other!r}"
                )
            namespace_owner[ns] = i
        for j, pool in enumerate(team.pools):
            if pool in pool_owner:
                other = config.teams[pool_owner[pool]].name
                raise TeamConfigError(
                    f"teams[{i}].pools[{j}]: pool {pool!r} is already owned by team {other!r}"
                )
            pool_owner[pool] = i
        if not team.namespaces:
            raise TeamConfigError(f"teams[{i}].namespaces: team {team.name!r} needs a namespace")
