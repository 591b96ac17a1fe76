"""What the runner itself puts on the bus, so a core's inputs are all on the bus.

A core decides from its inputs alone. Most inputs are already on the bus (object
events, results, other services' decisions); the two that are not, the passing of
time and the policy a service runs with, the runner publishes and then reads back
through the same consumer as everything else. So the core sees one ordered sequence
(HISTORY's order) live, and ``baton replay`` feeds it the very same sequence.

- ``Started`` on ``baton.<c>.runner.started.<service>``: once per start, before any
  input is handled. It pins where the run began (the K8S stream sequence the
  bootstrap snapshot was taken at, and the HISTORY sequence live inputs follow) and
  the policy (the service's decision-relevant settings) as JSON.
- ``Tick`` on ``baton.<c>.runner.tick.<service>``: a timer tick, published only while
  the core wants ticks (``Timer.wants``), never faster than the service's interval.
"""

from __future__ import annotations

from typing import Any

import msgspec


class Tick(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="runner.tick.v1"):
    """Time passed: run a cycle. ``at`` is the time the cycle decides at."""

    at: float
    service: str = ""


class Started(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="runner.started.v1"):
    """A service's run began: its core state is the K8S state as of ``k8s_seq``, fed in
    stream order, then every input stored in HISTORY after ``history_seq``."""

    service: str
    at: float
    k8s_seq: int  # the bootstrap snapshot holds each object's last event up to this K8S seq
    history_seq: int  # live inputs are HISTORY messages after this one
    telemetry_seq: int = 0  # ... and each node's last report up to this TELEMETRY seq
    policy: dict[str, Any] = {}  # the service's policy struct, as JSON
    instance: str = ""  # host/pid of the process, for people reading the stream
