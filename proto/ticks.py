"""Recorded timer inputs, so a core's decisions can be replayed exactly.

The gang core runs a placement cycle on a ``Tick`` the shell makes from a timer;
ticks are not on the bus by themselves. The gang shell publishes each tick that
produced an output or changed the core's state to ``baton.<cluster>.placement.tick``
(EVENTS stream, msg id ``tick:<at>``). The tag is the core's ``gang.tick.v1``, so
the payload decodes as the core's ``Tick`` too.

``k8s_seq`` and ``result_seq`` place the tick among the inputs: the K8S stream
sequence of the last object event, and the EVENTS stream sequence of the last
``result.bind-gang`` result, the shell had applied before this tick (0: none).
Streams are copied into HISTORY independently, so stream order alone does not say
which inputs a tick saw. See ``docs/replay.md``.
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
