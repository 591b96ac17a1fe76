"""Who may publish and read what on NATS, derived from each service's ``Spec``.

One NATS user per service (its replicas share it), one per node agent, one for
the operator (``admin``: the ``baton`` tools) and a read-only one for looking
(``inspect``: ``baton status``, ``tail``, ``why``, the ``nats`` CLI), each an nkey
(``libs.runtime.nkey``): the server's configuration holds only public keys, each
client its own seed.
``server_config`` renders them as a nats-server configuration (its format accepts
JSON); ``baton nats-config`` writes it and ``baton up`` runs NATS with it.

What a service's user may publish:

- the subjects of its actions (``action.<kind>.>`` for each action type its routes
  send) and the subjects its ``Spec.publishes`` names (its decisions);
- its own ticks and starts (``runner.*.<service>``), dead letters, and its own lease
  key (``$KV.<LEASES>.<service>``): a service cannot take another's lease;
- of the JetStream API only what reading its own streams takes (``stream_grants``): the
  streams its inputs (and ``Spec.reads``) come from, HISTORY when the runner feeds it,
  the info of the streams it writes, and its lease; never another stream's consumers,
  messages or acks. Only the streams' owner (``OWNER``, the actuator) creates or
  changes a stream or bucket (a RePublish would turn a decision into an action); the
  others wait for them (``libs.runner.serving.prepare_streams``). Nobody deletes or
  purges streams or messages.

It reads replies only on its own inbox prefix (``_INBOX_<its public key>``, which
``Bus.connect`` derives from its seed), so no user sees another's JetStream deliveries.

A node agent may publish only ``telemetry.*.<its node>`` and read only its node's
limits (a core subscription and one direct get). It has no other JetStream API.

With the auth callout (``server_config(callout_issuer=...)``, ``services/baton/services/callout``),
agents have no user here: each presents its pod's ServiceAccount token and the callout
answers with a user of exactly ``agent_permissions(cluster, its node)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from baton.libs.bus import streams
from baton.libs.bus.connection import inbox_prefix
from baton.libs.bus.streams import LEASES
from baton.libs.runner.spec import Spec
from baton.libs.runtime.nkey import new_user_seed, public_key
from baton.proto import subjects
from baton.proto.actions import ACTION_SUBJECTS

ACTUATOR = "actuator"
# The actuator's durable consumers on ACTIONS (services.actuator.shell.consumers).
ACTUATOR_CONSUMERS = ("actuator-placing", "actuator-marking", "actuator", "actuator-telling")
ADMIN = "admin"
INSPECT = "inspect"  # read only: the cluster's subjects and streams, nothing published
AGENT_FLEET = "agent-fleet"  # the one process that plays every simulated node's agent
DONE = "done"  # the actuator's KV bucket of actions applied (services.actuator.shell.DONE)
# The one user that creates and updates every stream and bucket: changing a stream is
# already the actuator's alone (a RePublish turns decisions into actions, which it
# applies), so owning their creation too gives a compromised actuator nothing new,
# and no other service can make a stream first, with a configuration of its choosing.
OWNER = ACTUATOR
MAX_PAYLOAD = 1024 * 1024  # nats-server's default, stated so dead letters can count on it

_NO_DELETES = (
    "$JS.API.STREAM.DELETE.>",
    "$JS.API.STREAM.PURGE.>",
    "$JS.API.STREAM.MSG.DELETE.>",
    "$JS.API.STREAM.SNAPSHOT.>",
    "$JS.API.STREAM.RESTORE.>",
)
# Changing a stream's configuration is the actuator's alone: a stream's RePublish (or a
# subject transform) turns messages a service may publish (a decision) into messages on
# a subject another stream captures (an action), past the service's own permissions.
_NO_UPDATES = ("$JS.API.STREAM.UPDATE.>",)


@dataclass(frozen=True, slots=True)
class Permissions:
    """NATS subject permissions of one user: allow lists, and what is denied within them."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    deny_publish: tuple[str, ...] = ()
    deny_subscribe: tuple[str, ...] = ()

    def to_config(self) -> dict[str, Any]:
        publish: dict[str, list[str]] = {"allow": list(self.publish)}
        if self.deny_publish:
            publish["deny"] = list(self.deny_publish)
        subscribe: dict[str, list[str]] = {"allow": list(self.subscribe)}
        if self.deny_subscribe:
            subscribe["deny"] = list(self.deny_subscribe)
        return {"publish": publish, "subscribe": subscribe}


@dataclass(frozen=True, slots=True)
class User:
    """A NATS user: its name (for files and logs: the server knows only its key), its
    nkey seed (``SU...``, the client's secret) and its permissions, to which its own
    inbox is added."""

    name: str
    seed: str
    permissions: Permissions

    @property
    def public_key(self) -> str:
        return public_key(self.seed)

    @property
    def inbox(self) -> str:
        return inbox_prefix(self.public_key) + ".>"

    def to_config(self) -> dict[str, Any]:
        config = self.permissions.to_config()
        if ">" not in self.permissions.subscribe:  # admin reads everything already
            config["subscribe"]["allow"].append(self.inbox)
        return {"nkey": self.public_key, "permissions": config}


def action_subjects(spec: Spec[Any], cluster: str) -> list[str]:
    """``baton.<c>.action.<kind>.<its name>.>`` for every action type ``spec`` routes: the
    producer token is the service's own, so the actuator may believe it."""
    found: list[str] = []
    for type_ in spec.action_types():
        kind, _ = ACTION_SUBJECTS[type_]
        base = subjects.wildcard(cluster, subjects.ACTION, kind, spec.name, ">")
        found += [base] if base not in found else []
    return found


def _actions_stream_denied(cluster: str) -> tuple[str, ...]:
    """The actions stream's consumers, acks and configuration: the actuator's alone."""
    actions = subjects.stream_name(cluster, "actions")
    return (
        f"$JS.ACK.{actions}.>",
        f"$JS.API.CONSUMER.*.{actions}",
        f"$JS.API.CONSUMER.*.{actions}.>",
        f"$JS.API.CONSUMER.DURABLE.CREATE.{actions}.>",
        f"$JS.API.CONSUMER.MSG.NEXT.{actions}.>",
        f"$JS.API.STREAM.UPDATE.{actions}",
    )


def kv_stream(cluster: str, bucket: str) -> str:
    """The stream behind one of the cluster's KV buckets: ``KV_BATON_C1_LEASES``."""
    return f"KV_{subjects.stream_name(cluster, bucket)}"


def streams_of(cluster: str, patterns: Iterable[str]) -> list[str]:
    """The cluster's streams that capture some subject under ``patterns`` (full subjects;
    HISTORY, which captures none of its own, is never among them)."""
    wanted = list(patterns)
    return [
        c.name
        for c in streams.stream_configs(cluster)
        if c.name and any(subjects.overlap(s, p) for s in c.subjects or () for p in wanted)
    ]


def all_streams(cluster: str) -> list[str]:
    """Every stream and bucket the owner creates, in the order it creates them."""
    kv = [kv_stream(cluster, LEASES)]  # first: every runner waits for its lease
    return kv + [c.name for c in streams.stream_configs(cluster) if c.name]


def read_streams(spec: Spec[Any], cluster: str) -> list[str]:
    """The streams ``spec``'s service reads: HISTORY (the runner's one ordered feed) when
    it has inputs, the streams its inputs and ``Spec.reads`` come from (the snapshot at
    start, a watch beside the runner), and the actuator's buckets (every lease's epoch
    for its fences, its applied actions)."""
    found = [subjects.stream_name(cluster, streams.HISTORY)] if spec.patterns(cluster) else []
    reads = [subjects.wildcard(cluster, r) for r in spec.reads]
    found += streams_of(cluster, [*spec.patterns(cluster), *reads])
    if spec.name == ACTUATOR:
        found += [kv_stream(cluster, LEASES), kv_stream(cluster, DONE)]
    return list(dict.fromkeys(found))


def written_streams(spec: Spec[Any], cluster: str) -> list[str]:
    """The streams that store what ``spec``'s service publishes (ticks and dead letters
    too): it may read their info, and waits for them at start."""
    return streams_of(cluster, _published(spec, cluster))


def needed_streams(spec: Spec[Any], cluster: str) -> list[str]:
    """What a service that does not own the streams waits for at start: its lease's
    bucket, the streams it reads and those it writes."""
    found = [kv_stream(cluster, LEASES), *read_streams(spec, cluster)]
    found += written_streams(spec, cluster)
    if spec.name == ACTUATOR:
        found.remove(kv_stream(cluster, DONE))  # its own, made when it starts
    return list(dict.fromkeys(found))


def stream_grants(stream: str) -> list[str]:
    """What reading ``stream`` takes: its info, its consumers (made, asked about, pulled
    from and deleted), a message of it (the last on a subject), acks, flow control."""
    api = "$JS.API"
    return [
        f"{api}.STREAM.INFO.{stream}",
        f"{api}.STREAM.MSG.GET.{stream}",
        f"{api}.DIRECT.GET.{stream}.>",
        f"{api}.CONSUMER.CREATE.{stream}",  # an ephemeral consumer without a name
        f"{api}.CONSUMER.CREATE.{stream}.>",  # <name>, or <name>.<its one filter>
        f"{api}.CONSUMER.INFO.{stream}.>",
        f"{api}.CONSUMER.DELETE.{stream}.>",
        f"{api}.CONSUMER.MSG.NEXT.{stream}.>",
        f"$JS.ACK.{stream}.>",
        f"$JS.FC.{stream}.>",
    ]


_EVERYONE = ("$JS.API.INFO", "$JS.API.STREAM.NAMES")  # the account's limits, stream names


def _published(spec: Spec[Any], cluster: str) -> list[str]:
    return [
        *action_subjects(spec, cluster),
        *(subjects.wildcard(cluster, p) for p in spec.publishes),
        subjects.runner(cluster, "*", spec.name),
        subjects.wildcard(cluster, subjects.DEADLETTER, ">"),
    ]


def service_permissions(spec: Spec[Any], cluster: str) -> Permissions:
    """What the service ``spec`` describes may publish and read in ``cluster``."""
    name = spec.name
    leases = kv_stream(cluster, LEASES)
    bucket = subjects.stream_name(cluster, LEASES)
    publish = [
        *_published(spec, cluster),
        f"$KV.{bucket}.{name}",
        *_EVERYONE,
        f"$JS.API.STREAM.INFO.{leases}",  # its lease: read and written, its own key only
        f"$JS.API.STREAM.MSG.GET.{leases}",
        f"$JS.API.DIRECT.GET.{leases}.$KV.{bucket}.{name}",
    ]
    for stream in read_streams(spec, cluster):
        publish += stream_grants(stream)
    publish += [f"$JS.API.STREAM.INFO.{s}" for s in written_streams(spec, cluster)]
    deny = list(_NO_DELETES)
    if name == ACTUATOR:
        publish.append(f"$KV.{subjects.stream_name(cluster, DONE)}.>")
    else:
        deny += [*_actions_stream_denied(cluster), *_NO_UPDATES]
    if name == OWNER:
        for stream in [*all_streams(cluster), kv_stream(cluster, DONE)]:
            publish += [f"$JS.API.STREAM.{verb}.{stream}" for verb in ("CREATE", "UPDATE", "INFO")]
    subscribe = [i.filter(cluster) for i in spec.inputs]  # and its inbox (User.to_config)
    return Permissions(tuple(dict.fromkeys(publish)), tuple(subscribe), tuple(deny))


def agent_user_name(node: str) -> str:
    return f"agent-{subjects.encode_name(node)}"


def agent_inbox(node: str) -> str:
    """The reply prefix of a node's agent that connects with a token (no nkey of its
    own): the callout lets it read ``<this>.>`` and no other inbox."""
    return inbox_prefix(agent_user_name(node))


def agent_permissions(cluster: str, node: str) -> Permissions:
    """A node's agent: its own telemetry out, its own egress limits in; nothing else."""
    token = subjects.encode_name(node)
    limits = subjects.node_limits(cluster, node)
    stream = subjects.stream_name(cluster, "limits")
    return Permissions(
        publish=(
            subjects.wildcard(cluster, subjects.TELEMETRY, "*", token),
            f"$JS.API.DIRECT.GET.{stream}.{limits}",
        ),
        subscribe=(limits,),
    )


def agent_token_user(cluster: str, node: str) -> tuple[str, Permissions]:
    """The user the auth callout makes for ``node``'s agent (it has no nkey, so its
    inbox is named after the node): its name and ``agent_permissions`` plus that inbox.
    ``InvalidName`` (a ``ValueError``) when ``node`` cannot be a subject token."""
    rights = agent_permissions(cluster, node)
    subscribe = (*rights.subscribe, f"{agent_inbox(node)}.>")
    return agent_user_name(node), Permissions(rights.publish, subscribe, rights.deny_publish)


def fleet_permissions(cluster: str) -> Permissions:
    """The simulated fleet's one agent process: every node's telemetry and limits (it
    follows the limits with an ordered consumer: the API of the limits stream alone)."""
    telemetry = subjects.stream_name(cluster, streams.TELEMETRY)
    return Permissions(
        publish=(
            subjects.wildcard(cluster, subjects.TELEMETRY, ">"),
            *_EVERYONE,
            f"$JS.API.STREAM.INFO.{telemetry}",
            *stream_grants(subjects.stream_name(cluster, streams.LIMITS)),
        ),
        subscribe=(subjects.wildcard(cluster, subjects.BANDWIDTH, "limits", ">"),),
        deny_publish=(*_NO_DELETES, *_NO_UPDATES, *_actions_stream_denied(cluster)),
    )


CALLOUT = "callout"  # the auth callout's own user (services/baton/services/callout)
# It reads the server's authorization requests and answers on the server's inboxes.
AUTH_REQUESTS = "$SYS.REQ.USER.AUTH"
CALLOUT_PERMISSIONS = Permissions(publish=("$SYS._INBOX.>",), subscribe=(AUTH_REQUESTS,))
# The callout's second user, in the system account (``SYSTEM_ACCOUNT``): it may only ask a
# server to close one client (``$SYS.REQ.SERVER.<id>.KICK``), the agent of a pod gone.
CALLOUT_KICK = "callout-kick"
SYSTEM_ACCOUNT = "SYS"
KICK_REQUESTS = "$SYS.REQ.SERVER.*.KICK"
# every server's connections ($SYS.REQ.SERVER.PING.CONNZ, then one server's next page):
# how a restarted callout learns the agents' connections it let in before
CONNZ_REQUESTS = "$SYS.REQ.SERVER.*.CONNZ"
CALLOUT_KICK_PERMISSIONS = Permissions(publish=(KICK_REQUESTS, CONNZ_REQUESTS), subscribe=())


def callout_permissions(cluster: str) -> Permissions:
    """The callout's user: the server's authorization requests, its answers, and the
    deletions of pods and nodes (whose agents it then disconnects) as the bridge says them."""
    k8s = (
        subjects.wildcard(cluster, subjects.K8S, "pod", ">"),
        subjects.wildcard(cluster, subjects.K8S, "node", ">"),
    )
    return Permissions(publish=CALLOUT_PERMISSIONS.publish, subscribe=(AUTH_REQUESTS, *k8s))


# The operator's tools: everything but the authorization requests, which carry agents'
# tokens in the clear (``nats sub '>'`` or ``baton tail`` would print them).
ADMIN_PERMISSIONS = Permissions(
    publish=(">",), subscribe=(">",), deny_publish=(AUTH_REQUESTS,), deny_subscribe=(AUTH_REQUESTS,)
)


def inspect_permissions(cluster: str) -> Permissions:
    """Looking without touching: every subject of the cluster (core subscriptions), and
    every stream and bucket read through ephemeral consumers (ordered, pulled, no acks)
    and gets. Nothing of Baton's subjects, no KV put, no ack (an ack could settle an
    action for the actuator), and none of the actuator's own consumer but its info; never
    the auth callout's subject (agents' tokens)."""
    actions = subjects.stream_name(cluster, streams.ACTIONS)
    reads = [*all_streams(cluster), kv_stream(cluster, DONE)]
    publish = [*_EVERYONE]
    for stream in reads:
        publish += [g for g in stream_grants(stream) if not g.startswith("$JS.ACK.")]
    deny = [*_NO_DELETES, *_NO_UPDATES]
    for durable in ACTUATOR_CONSUMERS:
        deny += [
            f"$JS.API.CONSUMER.CREATE.{actions}.{durable}",
            f"$JS.API.CONSUMER.CREATE.{actions}.{durable}.>",
            f"$JS.API.CONSUMER.DELETE.{actions}.{durable}",
            f"$JS.API.CONSUMER.MSG.NEXT.{actions}.{durable}",
        ]
    deny.append(AUTH_REQUESTS)
    return Permissions(
        publish=tuple(publish),
        subscribe=(subjects.wildcard(cluster, ">"),),
        deny_publish=tuple(deny),
        deny_subscribe=(AUTH_REQUESTS,),
    )


def users(
    specs: Iterable[Spec[Any]],
    cluster: str,
    *,
    nodes: Sequence[str] = (),
    fleet: bool = False,
    seeds: Mapping[str, str] | None = None,
    callout: bool = False,
) -> list[User]:
    """The users of one cluster: admin, inspect, one per service, one per node (and the fleet's);
    ``callout``: the auth callout's user too (agents then need no user of their own).
    ``seeds`` keeps known users' nkeys; the others get new random ones."""
    known = dict(seeds or {})
    wanted: list[tuple[str, Permissions]] = [
        (ADMIN, ADMIN_PERMISSIONS),
        (INSPECT, inspect_permissions(cluster)),
    ]
    wanted += [(spec.name, service_permissions(spec, cluster)) for spec in specs]
    wanted += [(agent_user_name(node), agent_permissions(cluster, node)) for node in nodes]
    if fleet:
        wanted.append((AGENT_FLEET, fleet_permissions(cluster)))
    if callout:
        wanted.append((CALLOUT, callout_permissions(cluster)))
        wanted.append((CALLOUT_KICK, CALLOUT_KICK_PERMISSIONS))
    return [User(name, known.get(name) or new_user_seed(), perms) for name, perms in wanted]


def server_config(
    found: Sequence[User],
    *,
    host: str = "0.0.0.0",
    port: int = 4222,
    store_dir: str | None = "/data/jetstream",
    tls: Mapping[str, str] | None = None,
    callout_issuer: str = "",
) -> dict[str, Any]:
    """A nats-server configuration (JSON is valid nats-server syntax). ``store_dir``: None
    when the command line gives it (nats-server refuses it twice). ``tls``: e.g.
    ``{"cert_file": ..., "key_file": ..., "ca_file": ...}`` for the client port.
    ``callout_issuer``: the account public key (``A...``) that signs the auth callout's
    answers: every client not in ``found`` (each of those keeps its permissions and
    bypasses the callout) is then let in, or not, by the callout (``auth_callout``)."""
    config: dict[str, Any] = {
        "host": host,
        "port": port,
        "max_payload": MAX_PAYLOAD,
        "jetstream": {"store_dir": store_dir} if store_dir else {},
        "authorization": {"users": [u.to_config() for u in found if u.name != CALLOUT_KICK]},
    }
    if callout_issuer:
        if not any(u.name == CALLOUT for u in found):
            raise ValueError("auth callout: no callout user (users(..., callout=True))")
        config["authorization"]["auth_callout"] = {
            "issuer": callout_issuer,
            "auth_users": [u.public_key for u in found],
        }
    kick = [u.to_config() for u in found if u.name == CALLOUT_KICK]
    if kick:  # the system account: nats-server answers its KICK requests there alone
        config["accounts"] = {SYSTEM_ACCOUNT: {"users": kick}}
        config["system_account"] = SYSTEM_ACCOUNT
    if tls:
        config["tls"] = dict(tls)
    return config
