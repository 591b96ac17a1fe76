"""The callout's decision, pure: (a TokenReview's answer, the agent's permissions) ->
the claims of a NATS user, or a refusal with its reason.

A token is let in when Kubernetes says it is authenticated for the audience asked
(``nats``), it is a token of the agents' ServiceAccount
(``system:serviceaccount:<namespace>:<name>``), and it is bound to a pod on a node
(``authentication.kubernetes.io/node-name``, Kubernetes 1.30+). The user it gets may do
exactly what ``agent_permissions(cluster, node)`` says, plus read replies on its own
inbox (``access.agent_token_user``), until the token expires (or ``max_s`` from now, if
sooner or when the token's expiry is unknown).

The claims are those ADR-26 names (``nats.io/v2``): a ``user`` placed in the global
account (``aud`` ``$G``: the server's configuration has no accounts) inside an
``authorization_response`` for the server that asked (``aud``: its id) and the one-time
user key it made (``sub``). ``shell`` signs them (``claims.encode``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from baton.services.callout.core.claims import REQUEST_AUDIENCE


class Permissions(Protocol):
    """``access.Permissions``, as the core reads it (``libs.runner`` does I/O)."""

    @property
    def publish(self) -> tuple[str, ...]: ...
    @property
    def subscribe(self) -> tuple[str, ...]: ...
    @property
    def deny_publish(self) -> tuple[str, ...]: ...


# node -> (the user's name, its permissions); ValueError when the node cannot be one.
# The shell passes access.agent_token_user with the cluster bound.
Rights = Callable[[str], tuple[str, Permissions]]

NODE_NAME = "authentication.kubernetes.io/node-name"
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
GLOBAL_ACCOUNT = "$G"


@dataclass(frozen=True, slots=True)
class Policy:
    cluster: str = "c1"
    namespace: str = "baton-agent"  # the agents' ServiceAccount
    service_account: str = "baton-agent"
    audience: str = "nats"
    max_s: int = 3600  # a user never lives longer than this

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


@dataclass(frozen=True, slots=True)
class Review:
    """What a TokenReview answered (``status``); ``expires``: the token's own expiry
    (seconds since the epoch) when it could be read from it, else None."""

    authenticated: bool
    username: str = ""
    audiences: tuple[str, ...] = ()
    extra: Mapping[str, Sequence[str]] = field(default_factory=dict)
    error: str = ""
    expires: float | None = None


@dataclass(frozen=True, slots=True)
class Grant:
    node: str
    pod: str
    name: str  # the NATS user's name, as the config would call it (agent-<node>)
    permissions: Permissions  # its inbox included
    expires: int  # seconds since the epoch
    pod_uid: str = ""


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str  # logged; never the token


def decide(review: Review | None, policy: Policy, now: float, rights: Rights) -> Grant | Refusal:
    """``review`` None: the client sent no token. ``rights``: what a node's agent may
    do (``access.agent_token_user``, the cluster bound)."""
    if review is None:
        return Refusal("no auth_token in CONNECT")
    if not review.authenticated:
        return Refusal(f"token not authenticated: {review.error or 'no reason given'}")
    if policy.audience not in review.audiences:
        return Refusal(f"token not for audience {policy.audience!r} ({list(review.audiences)})")
    if review.username != policy.username:
        return Refusal(f"{review.username!r} is not the agents' ServiceAccount")
    nodes = list(review.extra.get(NODE_NAME) or ())
    if len(nodes) != 1 or not nodes[0]:
        return Refusal(f"token names no node ({NODE_NAME}: {nodes}; a pod token from 1.30+)")
    node = nodes[0]
    try:
        name, permissions = rights(node)
    except ValueError as exc:
        return Refusal(f"node {node!r} cannot be a subject token ({exc})")
    expires = now + policy.max_s
    if review.expires is not None:
        expires = min(expires, review.expires)
    if expires <= now:
        return Refusal("token expired")
    pod = next(iter(review.extra.get(POD_NAME) or ()), "")
    uid = next(iter(review.extra.get(POD_UID) or ()), "")
    return Grant(node=node, pod=pod, name=name, permissions=permissions, expires=int(expires),
                 pod_uid=uid)  # fmt: skip


USER_SEP = "/"  # in no node, pod or uid name (DNS subdomains, UUIDs)


def user_name(grant: Grant) -> str:
    """The name of the NATS user made for ``grant``, as the server reports it (CONNZ
    ``authorized_user``): the node's user name, the node, its pod and the pod's uid, so
    that a callout that restarted can tell whose connection it is (``revoking.listed``)."""
    return USER_SEP.join((grant.name, grant.node, grant.pod, grant.pod_uid))


def user_claims(grant: Grant, *, user_key: str, now: float) -> dict[str, Any]:
    """The ``user`` claims of ``grant`` for the server's one-time ``user_key``."""
    allowed = grant.permissions
    publish: dict[str, list[str]] = {"allow": list(allowed.publish)}
    if allowed.deny_publish:
        publish["deny"] = list(allowed.deny_publish)
    return {
        "iat": int(now),
        "exp": grant.expires,
        "sub": user_key,
        "aud": GLOBAL_ACCOUNT,
        "name": user_name(grant),
        "nats": {
            "pub": publish,
            "sub": {"allow": list(allowed.subscribe)},
            "subs": -1,
            "data": -1,
            "payload": -1,
            "type": "user",
            "version": 2,
        },
    }


def response_claims(
    *, user_key: str, server_id: str, now: float, user_jwt: str = "", error: str = ""
) -> dict[str, Any]:
    """The ``authorization_response``: the signed user JWT, or an error (not both)."""
    nats: dict[str, Any] = {"type": "authorization_response", "version": 2}
    if user_jwt:
        nats["jwt"] = user_jwt
    else:
        nats["error"] = error or "not authorized"
    return {"iat": int(now), "sub": user_key, "aud": server_id, "nats": nats}


@dataclass(frozen=True, slots=True)
class Request:
    """What the callout needs of the server's ``authorization_request``."""

    user_key: str  # the one-time user key the answer must be for
    server_id: str
    token: str  # connect_opts.auth_token ("" when none)
    client: str  # for logs: the client's name and address
    cid: int = 0  # client_info.id: the connection's id on that server (0: not given)


def request_of(claims: Mapping[str, Any]) -> Request:
    """The fields of a decoded ``authorization_request``; ``ValueError`` naming a missing one."""
    if claims.get("aud") != REQUEST_AUDIENCE:
        raise ValueError(
            f"authorization request for {claims.get('aud')!r}, not {REQUEST_AUDIENCE!r}"
        )
    nats = claims.get("nats") or {}
    user_key = nats.get("user_nkey") or ""
    server_id = (nats.get("server_id") or {}).get("id") or ""
    if not user_key or not server_id:
        raise ValueError("authorization request without user_nkey or server_id.id")
    opts = nats.get("connect_opts") or {}
    info = nats.get("client_info") or {}
    client = f"{opts.get('name') or info.get('name') or '?'}@{info.get('host') or '?'}"
    cid = info.get("id")
    return Request(user_key=user_key, server_id=server_id, token=opts.get("auth_token") or "",
                   client=client, cid=cid if isinstance(cid, int) else 0)  # fmt: skip
