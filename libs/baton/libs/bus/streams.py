"""Every Baton stream of one cluster, configured in this one place.

| stream | subjects | keeps |
|---|---|---|
| K8S | ``baton.<c>.k8s.>`` | latest event per object; tombstones expire (Nats-TTL) |
| ACTIONS | ``baton.<c>.action.>`` | actions for the actuator's durable consumer, 1 day |
| EVENTS | ``baton.<c>.{placement,...}.>`` | decisions and results, 7 days |
| LIMITS | ``baton.<c>.bandwidth.limits.>`` | each node's current egress limits (latest per node) |
| RUNNER | ``baton.<c>.runner.>`` | each runner's ticks and starts (``proto.runner``), 1 day |
| TELEMETRY | ``baton.<c>.telemetry.>`` | node agents' reports, Xids and heartbeats, 1 day |
| DEADLETTER | ``baton.<c>.deadletter.>`` | poison messages with the reason, 14 days |
| HISTORY | sources K8S, ACTIONS, EVENTS, RUNNER, TELEMETRY | all, in order: what every service
  reads live (one consumer each) and what replay and audit read; 1 day / ``history_bytes`` |

HISTORY takes TELEMETRY without heartbeats: 7,500 nodes beating every 10 s would be
~65 M messages a day, more than HISTORY's 10 GiB, and would push out everything else.
A service that needs to know a node went silent reads heartbeats beside its runner and
publishes the silence as an input of its own (recorded, so it replays).

ACTIONS uses limits retention, not work-queue: nats-server 2.15 accepts a stream
that sources a work-queue stream, but an action the actuator acks before the
source has copied it is gone, so HISTORY would silently miss actions (see
``docs/bus.md``). One durable consumer (``actuator``) gives the same
once-per-action delivery; ``max_age`` bounds what is kept.
"""

from __future__ import annotations

from typing import Final

from nats.js.api import (
    DiscardPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamSource,
    SubjectTransform,
)

from baton.proto import subjects

MINUTE: Final = 60.0
HOUR: Final = 3600.0
DAY: Final = 24 * HOUR

K8S: Final = "k8s"
ACTIONS: Final = "actions"
EVENTS: Final = "events"
DEADLETTER: Final = "deadletter"
TELEMETRY: Final = "telemetry"
HISTORY: Final = "history"
RUNNER: Final = "runner"
LIMITS: Final = "limits"
LEASES: Final = "leases"  # the KV bucket of every service's lease (libs.runner.leasing)
SOURCED: Final = (K8S, ACTIONS, EVENTS, LIMITS, RUNNER)  # what HISTORY copies whole
TELEMETRY_IN_HISTORY: Final = ("gpu", "node", "xid", "egress")  # not "heartbeat"

# Decision and result domains that land in EVENTS (the third subject token).
EVENT_DOMAINS: Final = (
    subjects.PLACEMENT,
    subjects.ADMISSION,
    subjects.RESULT,
    subjects.HEALTH,
    subjects.BALLOON,
    subjects.AUTOSCALER,
)
# Bandwidth's allocation summary and capacity are decisions; its per-node limits are a
# current value per node (LIMITS, latest per subject), like K8S.
BANDWIDTH_EVENTS: Final = ("allocation", "capacity")


# HISTORY's max_bytes (the one reservation in the store: the other streams are bounded
# by age) grows with the cluster: what 10 GiB gave 7,500 nodes, per node, at least
# 256 MiB, at most 10 GiB; 10 GiB when the node count is not known.
HISTORY_MAX_BYTES: Final = 10 * 1024**3
HISTORY_MIN_BYTES: Final = 256 * 1024**2
HISTORY_PER_NODE: Final = HISTORY_MAX_BYTES // 7500  # ~1.4 MiB
HISTORY_SIZING: Final = "HISTORY: ~1.4 MiB per node (BATON_CLUSTER_NODES), 256 MiB to 10 GiB"


def history_bytes(nodes: int) -> int:
    """HISTORY's max_bytes for a cluster of ``nodes`` nodes (0: not known, the most)."""
    if nodes <= 0:
        return HISTORY_MAX_BYTES
    return max(HISTORY_MIN_BYTES, min(HISTORY_MAX_BYTES, nodes * HISTORY_PER_NODE))


def stream_configs(
    cluster: str,
    *,
    history_max_age: float = DAY,
    history_max_bytes: int | None = None,
    nodes: int = 0,
    replicas: int = 1,
) -> list[StreamConfig]:
    """The configs ``Bus.ensure_streams`` declares, sources last. ``replicas``: copies of
    each stream in a NATS cluster (3 in ``deploy/``, so a NATS pod's loss loses nothing).
    HISTORY holds ``history_max_bytes``, else ``history_bytes(nodes)``."""
    if history_max_bytes is None:
        history_max_bytes = history_bytes(nodes)

    def name(what: str) -> str:
        return subjects.stream_name(cluster, what)

    prefix = f"{subjects.PREFIX}.{subjects.check_cluster(cluster)}"
    kept = [f"{prefix}.{subjects.TELEMETRY}.{kind}.>" for kind in TELEMETRY_IN_HISTORY]
    telemetry_kept = [SubjectTransform(src=s, dest=s) for s in kept]  # filters, unchanged
    return [
        StreamConfig(
            name=name(K8S),
            description="Latest slim Kubernetes object per subject (bridge)",
            subjects=[f"{prefix}.{subjects.K8S}.>"],
            retention=RetentionPolicy.LIMITS,
            max_msgs_per_subject=1,
            allow_msg_ttl=True,
            storage=StorageType.FILE,
            num_replicas=replicas,
            duplicate_window=5 * MINUTE,
        ),
        StreamConfig(
            name=name(ACTIONS),
            description="Actions for the actuator (one durable consumer)",
            subjects=[f"{prefix}.{subjects.ACTION}.>"],
            retention=RetentionPolicy.LIMITS,
            max_age=DAY,
            storage=StorageType.FILE,
            num_replicas=replicas,
            duplicate_window=10 * MINUTE,
        ),
        StreamConfig(
            name=name(EVENTS),
            description="Decisions and results",
            subjects=[f"{prefix}.{domain}.>" for domain in EVENT_DOMAINS]
            + [f"{prefix}.{subjects.BANDWIDTH}.{kind}" for kind in BANDWIDTH_EVENTS],
            retention=RetentionPolicy.LIMITS,
            max_age=7 * DAY,
            storage=StorageType.FILE,
            num_replicas=replicas,
            duplicate_window=5 * MINUTE,
        ),
        StreamConfig(
            name=name(LIMITS),
            description="Each node's current egress limits (bandwidth); agents direct-get theirs",
            subjects=[f"{prefix}.{subjects.BANDWIDTH}.limits.>"],
            retention=RetentionPolicy.LIMITS,
            max_msgs_per_subject=1,
            storage=StorageType.FILE,
            num_replicas=replicas,
            duplicate_window=5 * MINUTE,
            allow_direct=True,  # node agents read their node's latest limits by direct get
        ),
        StreamConfig(
            name=name(RUNNER),
            description="Runner ticks and starts: inputs that are not otherwise on the bus",
            subjects=[f"{prefix}.{subjects.RUNNER}.>"],
            retention=RetentionPolicy.LIMITS,
            max_age=DAY,
            storage=StorageType.FILE,
            num_replicas=replicas,
            duplicate_window=5 * MINUTE,
        ),
        StreamConfig(
            name=name(DEADLETTER),
            description="Poison messages with the reason",
            subjects=[f"{prefix}.{subjects.DEADLETTER}.>"],
            retention=RetentionPolicy.LIMITS,
            max_age=14 * DAY,
            storage=StorageType.FILE,
            num_replicas=replicas,
            duplicate_window=5 * MINUTE,
        ),
        StreamConfig(
            name=name(TELEMETRY),
            description="Node agents' telemetry: GPU and node reports, Xids, heartbeats",
            subjects=[f"{prefix}.{subjects.TELEMETRY}.>"],
            retention=RetentionPolicy.LIMITS,
            max_age=DAY,
            storage=StorageType.FILE,
            num_replicas=replicas,
            duplicate_window=5 * MINUTE,
        ),
        StreamConfig(
            name=name(HISTORY),
            description="Everything services read, in one order: live inputs, replay, audit",
            sources=[
                *(StreamSource(name=name(what)) for what in SOURCED),
                StreamSource(name=name(TELEMETRY), subject_transforms=telemetry_kept),
            ],
            retention=RetentionPolicy.LIMITS,
            max_age=history_max_age,
            max_bytes=history_max_bytes,
            discard=DiscardPolicy.OLD,
            storage=StorageType.FILE,
            num_replicas=replicas,
        ),
    ]


def leases_config(cluster: str, *, replicas: int = 1) -> KeyValueConfig:
    """The lease bucket (``libs.runner.leasing``), which ``Bus.ensure_streams`` creates
    first: one value per key, on file (a restarted NATS must not hand out an epoch
    twice)."""
    name = subjects.stream_name(cluster, LEASES)
    return KeyValueConfig(bucket=name, history=1, storage=StorageType.FILE, replicas=replicas)
