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

Validation (``proto.teams.parse``, read from a file by ``libs.runtime.teams``) raises
``TeamConfigError`` naming the bad key path
(``teams[2].quota.gpus: expected int >= 0``). With no config, one team ``default``
owns every node and every namespace and taints nothing, so Baton works out of the box.
"""

from __future__ import annotations

import re

from baton.proto.teams import (
    DEFAULT,
    DEFAULT_TEAM,
    Count,
    Egress,
    Gpus,
    Name,
    Team,
    TeamConfig,
    TeamConfigError,
    is_default,
    parse,
)

__all__ = [
    "DEFAULT", "DEFAULT_TEAM", "Count", "Egress", "Gpus", "Name", "Team", "TeamConfig",
    "TeamConfigError", "is_default", "parse",
]  # fmt: skip


_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def is_label_key(key: str) -> bool:
    """A Kubernetes label key: optional DNS prefix and '/', then a name of <= 63 characters."""
    prefix, _, name = key.rpartition("/")
    return bool(_KEY.match(key)) and len(name) <= 63 and len(prefix) <= 253
