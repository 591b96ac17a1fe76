"""Admission's team file, read the one way every service that needs it reads it
(admission for quotas and taints, bandwidth for each team's egress share)."""

from __future__ import annotations

from pathlib import Path

import yaml

from baton.proto.teams import DEFAULT, TeamConfig, TeamConfigError, parse


def load_teams(path: str) -> TeamConfig:
    """Read and validate the team config (``proto.teams.parse``); '' means the default
    (one team owns all). Raises ``TeamConfigError`` naming the file and the key."""
    if not path:
        return DEFAULT
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise TeamConfigError(f"{path}: {exc}") from None
    try:
        return parse(data)
    except TeamConfigError as exc:
        raise TeamConfigError(f"{path}: {exc}") from None
