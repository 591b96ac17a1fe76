"""Warm-capacity decisions: how many nodes each pool's balloons hold and want.

Subject (EVENTS stream): ``baton.<cluster>.balloon.headroom.<ns>.<pool>[.<team>]``,
published when a pool's (or a team's, in a pool) numbers change. The autoscaler grows a
pool by ``deficit`` (balloons that found no empty node), as it would for a gang of that
many nodes.
"""

from __future__ import annotations

import msgspec

from baton.proto import subjects

HEADROOM = "headroom"


class Headroom(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type",
               tag="balloon.headroom.v1"):  # fmt: skip
    """``want`` nodes held warm in ``pool`` (``<namespace>/<name>`` of its
    MachineDeployment); ``held`` have a balloon; ``deficit`` found no empty node;
    ``why``: static, or the demand quantile and the cost cap that set ``want``."""

    at: float
    pool: str
    want: int
    held: int
    deficit: int
    why: str = ""
    team: str = ""  # headroom held for one team, on its nodes of the pool ('' any)


class BalloonPolicy(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The balloon core's knobs (settings ``BATON_BALLOON_*``)."""

    mode: str = "static"  # "static", "demand" or "off"
    static_nodes: int = 1  # nodes held per GPU pool (static)
    pools: tuple[str, ...] = ()  # pools (MachineDeployment names) to hold; () every GPU pool
    teams: tuple[str, ...] = ()  # hold headroom per team, on each team's nodes; () per pool
    window_s: float = 3600.0  # demand: gangs that arrived this recently count
    quantile: float = 0.9  # demand: this quantile of their sizes in nodes
    max_idle_nodes: int = 16  # the idle-cost cap: nodes held per pool at most
    namespace: str = "baton-system"
    priority_class: str = "baton-balloon"  # value -10, created with the deployment
    image: str = "registry.k8s.io/pause:3.9"


def subject(cluster: str, pool: str, team: str = "") -> str:
    namespace, _, name = pool.partition("/")
    extra = (team,) if team else ()
    return subjects.subject(cluster, subjects.BALLOON, HEADROOM, namespace, name, *extra)
