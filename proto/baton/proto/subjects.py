"""Subjects: ``baton.<cluster>.<domain>.<kind>.<key...>`` and the name-token rule.

Kubernetes object names are DNS-1123 subdomains (``[a-z0-9.-]``, at most 253
characters); namespaces are DNS-1123 labels. A NATS subject token may not contain
``.``, so one reversible rule carries a name into a token:

    ``.`` becomes ``_`` (an underscore can never occur in a valid name).

Anything that is not a valid Kubernetes name is refused with ``InvalidName``
rather than mangled, so two objects can never share a subject.
"""

from __future__ import annotations

import re
from typing import Final

PREFIX: Final = "baton"

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_TOKEN = re.compile(r"^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$")
_CLUSTER = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_NAME = 253


class InvalidName(ValueError):
    """A name that cannot be carried in a subject token (bad input, not our bug)."""


def encode_name(name: str) -> str:
    """Kubernetes name -> subject token. Raises InvalidName naming the problem."""
    if not name:
        raise InvalidName("empty name cannot be a subject token")
    if len(name) > MAX_NAME:
        raise InvalidName(
            f"name {name[:40]!r}... has {len(name)} characters, the limit is {MAX_NAME}"
        )
    if not _DNS_SUBDOMAIN.match(name):
        raise InvalidName(
            f"name {name!r} is not a DNS-1123 subdomain "
            "(lowercase letters, digits, '-' and '.', starting and ending alphanumeric)"
        )
    return name.replace(".", "_")


def decode_name(token: str) -> str:
    """Subject token -> Kubernetes name; the inverse of encode_name."""
    if not _TOKEN.match(token):
        raise InvalidName(f"subject token {token!r} does not encode a Kubernetes name")
    return token.replace("_", ".")


def check_cluster(cluster: str) -> str:
    if not _CLUSTER.match(cluster):
        raise InvalidName(
            f"cluster name {cluster!r} must be a DNS-1123 label (lowercase letters, digits, '-')"
        )
    return cluster


def subject(cluster: str, domain: str, kind: str, *names: str) -> str:
    """``baton.<cluster>.<domain>.<kind>.<encoded names...>``."""
    tokens = [PREFIX, check_cluster(cluster), domain, kind, *(encode_name(n) for n in names)]
    return ".".join(tokens)


def wildcard(cluster: str, domain: str = ">", *rest: str) -> str:
    """A subscription filter such as ``baton.c1.k8s.>`` or ``baton.c1.k8s.pod.>``."""
    return ".".join([PREFIX, check_cluster(cluster), domain, *rest])


def parse(subj: str) -> tuple[str, str, str, tuple[str, ...]]:
    """Split a Baton subject into (cluster, domain, kind, decoded names)."""
    parts = subj.split(".")
    if len(parts) < 4 or parts[0] != PREFIX:
        raise InvalidName(f"{subj!r} is not a Baton subject (baton.<cluster>.<domain>.<kind>...)")
    return parts[1], parts[2], parts[3], tuple(decode_name(p) for p in parts[4:])


# Domains (the third token).
K8S: Final = "k8s"  # bridge: slim Kubernetes objects, latest state per object
ACTION: Final = "action"  # actions for the actuator (one durable consumer)
RESULT: Final = "result"  # what the actuator did with each action
PLACEMENT: Final = "placement"  # gang decisions
ADMISSION: Final = "admission"  # webhook and quota decisions
HEALTH: Final = "health"  # node health verdicts
BALLOON: Final = "balloon"  # warm-capacity decisions
AUTOSCALER: Final = "autoscaler"  # scale decisions
BANDWIDTH: Final = "bandwidth"  # egress shares and per-node limits
TELEMETRY: Final = "telemetry"  # node agents: baton.<c>.telemetry.<kind>.<node>
RUNNER: Final = "runner"  # ticks and starts every runner publishes (proto.runner)
DEADLETTER: Final = "deadletter"  # poison messages with the reason


def telemetry(cluster: str, kind: str, node: str) -> str:
    """A node agent publishes only on its own node's subjects: ``telemetry.<kind>.<node>``
    (NATS permission ``baton.<c>.telemetry.*.<node>``)."""
    return subject(cluster, TELEMETRY, kind, node)


def node_limits(cluster: str, node: str) -> str:
    """What a node agent reads: its node's egress limits (``bandwidth.limits.<node>``)."""
    return subject(cluster, BANDWIDTH, "limits", node)


def runner(cluster: str, kind: str, service: str) -> str:
    """``runner.tick.<service>`` and ``runner.started.<service>``."""
    return ".".join([PREFIX, check_cluster(cluster), RUNNER, kind, service])


def matches(pattern: str, subj: str) -> bool:
    """NATS wildcard matching: ``*`` one token, ``>`` one or more trailing tokens."""
    want, have = pattern.split("."), subj.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(want) == len(have)


def overlap(a: str, b: str) -> str | None:
    """The subjects both filters match, as one filter (``baton.c1.>`` and
    ``baton.*.action.>``: ``baton.c1.action.>``), or None when no subject matches both."""
    left, right = a.split("."), b.split(".")
    out: list[str] = []
    for i, (x, y) in enumerate(zip(left, right, strict=False)):
        if x == ">":
            return ".".join(out + right[i:])
        if y == ">":
            return ".".join(out + left[i:])
        if x != y and "*" not in (x, y):
            return None
        out.append(y if x == "*" else x)
    return ".".join(out) if len(left) == len(right) else None


def stream_name(cluster: str, what: str) -> str:
    """JetStream stream names may not contain dots: ``BATON_C1_K8S``."""
    return f"BATON_{check_cluster(cluster).upper().replace('-', '_')}_{what.upper()}"
