"""Team policy: who owns which nodes and namespaces, GPU quotas, borrowing and lending.

The config is YAML (in a cluster, a ConfigMap mounted as a file)::

    teams:
      - name: research
        namespaces: [research]
        pools: [a100]          # nodes labelled baton.io/pool=a100 belong to research
        quota: {gpus: 64}      # default: the GPUs of the team's nodes
        borrow: {gpus: 32}     # may use up to 32 GPUs beyond its quota, lent by others
        lend: true             # its idle quota may be lent (and is reclaimed when needed)
        priority: 100          # higher: preempted later when borrowed capacity is reclaimed
        egress: {weight: 2, limit: 10G}

Validation raises ``TeamConfigError`` naming the bad key path
(``teams[2].quota.gpus: expected int >= 0``). With no config, one team ``default``
owns every node and every namespace and taints nothing, so Baton works out of the box.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from baton.proto.teams import (
    DEFAULT,
    DEFAULT_TEAM,
    Count,
    Egress,
    Gpus,
    Name,
    Team,
    TeamConfig,
    is_default,
)

__all__ = [
    "DEFAULT", "DEFAULT_TEAM", "Count", "Egress", "Gpus", "Name", "Team", "TeamConfig",
    "TeamConfigError", "is_default", "parse",
]  # fmt: skip


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
    path = where.strip("`").removeprefix("$").removeprefix(".") or "<root>"
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


_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def is_label_key(key: str) -> bool:
    """A Kubernetes label key: optional DNS prefix and '/', then a name of <= 63 characters."""
    prefix, _, name = key.rpartition("/")
    return bool(_KEY.match(key)) and len(name) <= 63 and len(prefix) <= 253
