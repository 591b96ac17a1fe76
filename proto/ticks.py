"""Inputs that are not otherwise on the bus, recorded so a core's decisions can be
replayed exactly: the gang shell's timer ticks, and the policy it runs with.

The gang core runs a placement cycle on a ``Tick`` the shell makes from a timer;
ticks are not on the bus by themselves. The gang shell publishes each tick that
produced an output or changed the core's state to ``baton.<cluster>.placement.tick``
(EVENTS stream, msg id ``tick:<at>``). The tag is the core's ``gang.tick.v1``, so
the payload decodes as the core's ``Tick`` too.

``k8s_seq`` and ``result_seq`` place the tick among the inputs: the K8S stream
sequence of the last object event, and the EVENTS stream sequence of the last
``result.bind-gang`` result, the shell had applied before this tick (0: none).
Streams are copied into HISTORY independently, so stream order alone does not say
which inputs a tick saw.

The gang shell publishes its ``GangPolicy`` once at start to
``baton.<cluster>.placement.policy`` (``gang.policy.v1``): the same events decided
under another policy give other decisions, so replay takes the recorded one unless
told otherwise. See ``docs/replay.md``.
"""

from __future__ import annotations

import msgspec


class RecordedTick(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type",
    tag="gang.tick.v1",
):  # fmt: skip
    at: float
    k8s_seq: int = 0
    result_seq: int = 0


DEFAULT_LEVELS = ("topology.kubernetes.io/zone", "baton.io/block", "baton.io/rack")


class GangPolicy(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The gang core's knobs (``services.gang.core.Policy``); settings ``BATON_GANG_*``."""

    topology_keys: tuple[str, ...] = DEFAULT_LEVELS  # broad -> narrow
    require_admission: bool = False  # place only gangs marked baton.io/admitted
    recreate_bare_pods: bool = True  # on a gang restart, recreate pods no controller owns
    backoff_s: float = 1.0  # first retry after a failed bind; doubles per attempt
    backoff_max_s: float = 60.0
    assume_timeout_s: float = 30.0  # forget a placement whose pods never showed up bound
    verdict_refresh_s: float = 10.0  # recompute a cheaply rejected gang's verdict this often
    reserve_after_s: float = 0.0  # the head reserves nodes once it has waited this long


class RecordedPolicy(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type",
    tag="gang.policy.v1",
):  # fmt: skip
    at: float
    policy: GangPolicy
