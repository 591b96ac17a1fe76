"""Every Baton stream of one cluster, configured in this one place.

| stream | subjects | keeps |
|---|---|---|
| K8S | ``baton.<c>.k8s.>`` | latest event per object; tombstones expire (Nats-TTL) |
| ACTIONS | ``baton.<c>.action.>`` | actions for the actuator's durable consumer, 1 day |
| EVENTS | ``baton.<c>.{placement,...}.>`` | decisions and results, 7 days |
| DEADLETTER | ``baton.<c>.deadletter.>`` | poison messages with the reason, 14 days |
| HISTORY | sources K8S, ACTIONS, EVENTS | all, in order, for replay and audit, 1 day / 10 GiB |

ACTIONS uses limits retention, not work-queue: nats-server 2.15 accepts a stream
that sources a work-queue stream, but an action the actuator acks before the
source has copied it is gone, so HISTORY would silently miss actions (see
``docs/bus.md``). One durable consumer (``actuator``) gives the same
once-per-action delivery; ``max_age`` bounds what is kept.
"""

from __future__ import annotations

from typing import Final

from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig, StreamSource

from proto import subjects

MINUTE: Final = 60.0
HOUR: Final = 3600.0
DAY: Final = 24 * HOUR

K8S: Final = "k8s"
ACTIONS: Final = "actions"
EVENTS: Final = "events"
DEADLETTER: Final = "deadletter"
HISTORY: Final = "history"

# Decision and result domains that land in EVENTS (the third subject token).
EVENT_DOMAINS: Final = (
    subjects.PLACEMENT,
    subjects.ADMISSION,
    subjects.RESULT,
    "health",
    "balloon",
    "bandwidth",
    "autoscaler",
)


def stream_configs(
    cluster: str,
    *,
    history_max_age: float = DAY,
    history_max_bytes: int = 10 * 1024**3,
) -> list[StreamConfig]:
    """The configs ``Bus.ensure_streams`` declares, sources last."""

    def name(what: str) -> str:
        return subjects.stream_name(cluster, what)

    prefix = f"{subjects.PREFIX}.{subjects.check_cluster(cluster)}"
    return [
        StreamConfig(
            name=name(K8S),
            description="Latest slim Kubernetes object per subject (bridge)",
            subjects=[f"{prefix}.{subjects.K8S}.>"],
            retention=RetentionPolicy.LIMITS,
            max_msgs_per_subject=1,
            allow_msg_ttl=True,
            storage=StorageType.FILE,
            duplicate_window=5 * MINUTE,
        ),
        StreamConfig(
            name=name(ACTIONS),
            description="Actions for the actuator (one durable consumer)",
            subjects=[f"{prefix}.{subjects.ACTION}.>"],
            retention=RetentionPolicy.LIMITS,
            max_age=DAY,
            storage=StorageType.FILE,
            duplicate_window=10 * MINUTE,
        ),
        StreamConfig(
            name=name(EVENTS),
            description="Decisions and results",
            subjects=[f"{prefix}.{domain}.>" for domain in EVENT_DOMAINS],
            retention=RetentionPolicy.LIMITS,
            max_age=7 * DAY,
            storage=StorageType.FILE,
            duplicate_window=5 * MINUTE,
        ),
        StreamConfig(
            name=name(DEADLETTER),
            description="Poison messages with the reason",
            subjects=[f"{prefix}.{subjects.DEADLETTER}.>"],
            retention=RetentionPolicy.LIMITS,
            max_age=14 * DAY,
            storage=StorageType.FILE,
            duplicate_window=5 * MINUTE,
        ),
        StreamConfig(
            name=name(HISTORY),
            description="K8S, ACTIONS and EVENTS in arrival order, for replay and audit",
            sources=[StreamSource(name=name(what)) for what in (K8S, ACTIONS, EVENTS)],
            retention=RetentionPolicy.LIMITS,
            max_age=history_max_age,
            max_bytes=history_max_bytes,
            discard=DiscardPolicy.OLD,
            storage=StorageType.FILE,
        ),
    ]
