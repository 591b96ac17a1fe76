"""The bandwidth policy: validation that names the bad key, team lookup, rate parsing.

A policy (``proto.bandwidth.BandwidthPolicy``) as YAML, e.g.::

    capacity_bps: 100000000000        # the cluster's internet egress, 100 Gbit/s
    tiers:                            # served in this order, after every tier's minimum
      - {name: critical}
      - {name: normal, minimum: 0.2}  # keeps 20% of capacity while it has demand
      - {name: background, minimum: 0.05}
    teams:
      - {name: research, tier: normal, weight: 3, namespaces: [research]}
      - {name: data, tier: background, weight: 1, minimum_bps: 1000000000}
    internal_cidrs: [10.0.0.0/8]      # pod, service and node ranges: never shaped
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

import msgspec

from baton.proto import keys
from baton.proto.bandwidth import BandwidthPolicy, TeamEgress
from baton.proto.codec import field_error
from baton.proto.teams import TeamConfig

TEAM_LABEL = keys.TEAM
EGRESS_ANNOTATION = keys.EGRESS_BANDWIDTH

_RATE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(k|M|G|T|Ki|Mi|Gi|Ti)?$")
_SUFFIX = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


class PolicyError(ValueError):
    """The bandwidth policy is invalid (the operator's fault); the message names the key."""


def parse_rate(text: str) -> int:
    """A Kubernetes bandwidth quantity (``10M``, ``1.5G``, ``100Mi``) in bits per second."""
    match = _RATE.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a bandwidth quantity such as 10M or 1G")
    number, suffix = match.groups()
    return int(float(number) * _SUFFIX[suffix])


def load(data: Any) -> BandwidthPolicy:
    """Decoded YAML/JSON -> a checked policy; raises PolicyError naming the key."""
    try:
        policy = msgspec.convert(data or {}, BandwidthPolicy)
    except msgspec.ValidationError as exc:
        raise PolicyError(field_error(exc)) from exc
    check(policy)
    return policy


def check(policy: BandwidthPolicy) -> None:
    """Semantic rules msgspec cannot express; the first broken one raises PolicyError."""
    tiers = [t.name for t in policy.tiers]
    if not tiers:
        raise PolicyError("tiers: at least one tier is needed")
    for i, name in enumerate(tiers):
        if name in tiers[:i]:
            raise PolicyError(f"tiers[{i}].name: {name!r} is already a tier")
    if sum(t.minimum for t in policy.tiers) > 1.0 + 1e-9:
        raise PolicyError("tiers: the minimums add up to more than 1 (all of the capacity)")
    owners: dict[str, str] = {}
    names: set[str] = set()
    for i, team in enumerate(policy.teams):
        if team.name in names:
            raise PolicyError(f"teams[{i}].name: {team.name!r} is already a team")
        names.add(team.name)
        if team.tier not in tiers:
            raise PolicyError(f"teams[{i}].tier: {team.tier!r} is not one of {tiers}")
        for j, ns in enumerate(team.namespaces):
            if ns in owners:
                raise PolicyError(
                    f"teams[{i}].namespaces[{j}]: {ns!r} already belongs to team {owners[ns]!r}"
                )
            owners[ns] = team.name
    if policy.default_team.tier not in tiers:
        raise PolicyError(f"default_team.tier: {policy.default_team.tier!r} is not one of {tiers}")
    minimums = sum(t.minimum_bps for t in policy.teams)
    if minimums > policy.capacity_bps:
        raise PolicyError(
            f"teams: the minimum_bps add up to {minimums}, more than capacity_bps "
            f"{policy.capacity_bps}"
        )
    for i, cidr in enumerate(policy.internal_cidrs):
        try:
            ipaddress.ip_network(cidr)
        except ValueError as exc:
            raise PolicyError(f"internal_cidrs[{i}]: {exc}") from exc


def with_teams(policy: BandwidthPolicy, config: TeamConfig) -> BandwidthPolicy:
    """The policy with the team config's egress shares (``proto.teams.Egress``).

    A team named like the default team also sets the default (pods of no listed team).
    A tier the policy does not have (a config changed at run time; ``check_teams``
    refuses it at start-up) falls back to the default team's tier.
    """
    tiers = {t.name for t in policy.tiers}
    default = policy.default_team
    teams = []
    for team in config.teams:
        egress = team.egress
        share = TeamEgress(
            name=team.name,
            tier=egress.tier if egress.tier in tiers else default.tier,
            weight=egress.weight,
            minimum_bps=parse_rate(egress.minimum) if egress.minimum else 0,
            namespaces=team.namespaces,
        )
        teams.append(share)
    named = next((t for t in teams if t.name == default.name), None)
    if named is not None:
        default = msgspec.structs.replace(named, namespaces=())
    return msgspec.structs.replace(policy, teams=tuple(teams), default_team=default)


def check_teams(policy: BandwidthPolicy, config: TeamConfig) -> None:
    """The team config's egress section against the policy's tiers; raises PolicyError."""
    tiers = [t.name for t in policy.tiers]
    for i, team in enumerate(config.teams):
        if team.egress.tier not in tiers:
            raise PolicyError(f"teams[{i}].egress.tier: {team.egress.tier!r} is not one of {tiers}")
    minimums = sum(parse_rate(t.egress.minimum) for t in config.teams if t.egress.minimum)
    if minimums > policy.capacity_bps:
        raise PolicyError(
            f"teams[*].egress.minimum: they add up to {minimums} bit/s, more than the "
            f"capacity {policy.capacity_bps}"
        )


class Teams:
    """Which team a pod belongs to: its ``baton.io/team`` label, else its namespace's owner."""

    def __init__(self, policy: BandwidthPolicy) -> None:
        self.by_name = {t.name: t for t in policy.teams}
        self.by_namespace = {ns: t for t in policy.teams for ns in t.namespaces}
        self.default = policy.default_team

    def of(self, *, namespace: str, labels: dict[str, str]) -> TeamEgress:
        name = labels.get(TEAM_LABEL, "")
        if name:
            known = self.by_name.get(name)
            return known if known is not None else msgspec.structs.replace(self.default, name=name)
        return self.by_namespace.get(namespace, self.default)
