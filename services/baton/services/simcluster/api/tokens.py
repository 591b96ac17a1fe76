"""ServiceAccount tokens: TokenRequest and TokenReview, as the API server answers them.

``POST /api/v1/namespaces/<ns>/serviceaccounts/<sa>/token`` (a ``TokenRequest``:
``spec.audiences``, ``spec.expirationSeconds``, ``spec.boundObjectRef`` of kind Pod)
issues a token bound to that pod and, as Kubernetes 1.30+ does, to the node the pod
runs on. ``POST /apis/authentication.k8s.io/v1/tokenreviews`` says whether a token is
good for the audiences asked, and whose it is: ``system:serviceaccount:<ns>:<sa>``
with the pod's name and uid and its node's name and uid in ``user.extra``.

Tokens are JWT-shaped (the claims the API server's carry, among them ``exp``) with a
random signature: only simcluster's memory vouches for them (a restart forgets them,
as rotating the API server's signing key would). A token is refused once it expires, once its pod
is gone or replaced (another uid), or for an audience it was not issued for. The
ServiceAccount itself is not stored by simcluster: the pod's ``serviceAccountName``
must name it, as the real API server checks. Like the API server, an expiration under
ten minutes is refused (``min_expiration_s``; a test may lower it).
"""

from __future__ import annotations

import base64
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
from aiohttp import web

from baton.services.simcluster.api.objects import ApiError
from baton.services.simcluster.api.store import Store

TOKEN_REQUEST = re.compile(r"^/api/v1/namespaces/([^/]+)/serviceaccounts/([^/]+)/token$")
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"  # the API server's own
GROUP_VERSION = "authentication.k8s.io/v1"
EXTRA = "authentication.kubernetes.io/"
DEFAULT_EXPIRATION_S = 3600
MAX_EXPIRATION_S = 2**32  # the API server's limit (caps longer requests)


@dataclass(frozen=True, slots=True)
class Issued:
    namespace: str
    service_account: str
    audiences: tuple[str, ...]
    expires: float  # seconds since the epoch
    pod: str
    pod_uid: str
    node: str
    node_uid: str
    jti: str


@dataclass
class Tokens:
    """The tokens issued so far; ``clock``: wall time (tokens are about the real world)."""

    store: Store
    clock: Callable[[], float] = time.time
    min_expiration_s: int = 600
    issued: dict[str, Issued] = field(default_factory=dict)

    def request(self, namespace: str, service_account: str, body: dict[str, Any]) -> dict[str, Any]:
        """The TokenRequest answer, or an ``ApiError`` as the API server says it."""
        spec = body.get("spec") or {}
        audiences = tuple(spec.get("audiences") or (API_AUDIENCE,))
        seconds = spec.get("expirationSeconds") or DEFAULT_EXPIRATION_S
        if not isinstance(seconds, int) or seconds < self.min_expiration_s:
            raise _invalid(
                service_account,
                "spec.expirationSeconds",
                f"may not specify a duration less than {self.min_expiration_s} seconds",
            )
        seconds = min(seconds, MAX_EXPIRATION_S)
        ref = spec.get("boundObjectRef") or {}
        if ref.get("kind") != "Pod":  # Secrets and Nodes exist too; only pods are needed
            raise _invalid(
                service_account,
                "spec.boundObjectRef.kind",
                f"unsupported kind {ref.get('kind')!r}: simcluster binds to a Pod",
            )
        pod = self.store.get("pods", namespace, str(ref.get("name") or ""))
        meta = pod["metadata"]
        if ref.get("uid") and ref["uid"] != meta.get("uid"):
            raise ApiError(
                409,
                "Conflict",
                f"the UID in the bound object reference "
                f"({ref['uid']}) does not match the UID in record ({meta.get('uid')}). "
                "The object might have been deleted and then recreated",
            )
        runs_as = pod.get("spec", {}).get("serviceAccountName") or "default"
        if runs_as != service_account:
            raise ApiError(
                400,
                "BadRequest",
                f"cannot bind token for serviceaccount "
                f'"{service_account}" to pod running with different serviceaccount '
                f"name.",
            )
        node = pod.get("spec", {}).get("nodeName") or ""
        node_uid = ""
        if node:
            try:
                node_uid = self.store.get("nodes", None, node)["metadata"].get("uid", "")
            except ApiError:
                node_uid = ""
        now = self.clock()
        jti = secrets.token_hex(16)
        token = _token_text(namespace, service_account, audiences, now, seconds, meta, node,
                            node_uid, jti)  # fmt: skip
        self.issued[token] = Issued(
            namespace=namespace,
            service_account=service_account,
            audiences=audiences,
            expires=now + seconds,
            pod=meta["name"],
            pod_uid=meta.get("uid", ""),
            node=node,
            node_uid=node_uid,
            jti=secrets.token_hex(16),
        )
        return {
            "kind": "TokenRequest",
            "apiVersion": GROUP_VERSION,
            "metadata": {
                "name": service_account,
                "namespace": namespace,
                "creationTimestamp": _stamp(now),
            },
            "spec": {
                "audiences": list(audiences),
                "expirationSeconds": seconds,
                "boundObjectRef": {
                    "kind": "Pod",
                    "apiVersion": "v1",
                    "name": meta["name"],
                    "uid": meta.get("uid", ""),
                },
            },
            "status": {"token": token, "expirationTimestamp": _stamp(now + seconds)},
        }

    def review(self, body: dict[str, Any]) -> dict[str, Any]:
        """The TokenReview answer: ``status.authenticated`` and whose token it is."""
        spec = body.get("spec") or {}
        token = spec.get("token")
        if not isinstance(token, str) or not token:
            raise _invalid("", "spec.token", "Required value", kind="TokenReview")
        wanted = tuple(spec.get("audiences") or (API_AUDIENCE,))
        status = self._status(token, wanted)
        return {
            "kind": "TokenReview",
            "apiVersion": GROUP_VERSION,
            "metadata": {"creationTimestamp": None},
            "spec": {"token": token, "audiences": list(spec.get("audiences") or [])},
            "status": status,
        }

    def _status(self, token: str, wanted: tuple[str, ...]) -> dict[str, Any]:
        found = self.issued.get(token)
        if found is None:
            return _refused("invalid bearer token")
        if self.clock() >= found.expires:
            return _refused("invalid bearer token, service account token has expired")
        audiences = [a for a in wanted if a in found.audiences]
        if not audiences:
            return _refused(
                f"invalid bearer token, token audiences {list(found.audiences)} "
                f"is invalid for the target audiences {list(wanted)}"
            )
        try:
            pod = self.store.get("pods", found.namespace, found.pod)
        except ApiError:
            return _refused(f'invalid bearer token, pod "{found.pod}" not found')
        if pod["metadata"].get("uid", "") != found.pod_uid:
            return _refused(
                f"invalid bearer token, the UID in the bound object reference "
                f"({found.pod_uid}) does not match the UID in record"
            )
        extra = {
            f"{EXTRA}pod-name": [found.pod],
            f"{EXTRA}pod-uid": [found.pod_uid],
            f"{EXTRA}credential-id": [f"JTI={found.jti}"],
        }
        if found.node:
            extra |= {f"{EXTRA}node-name": [found.node], f"{EXTRA}node-uid": [found.node_uid]}
        return {
            "authenticated": True,
            "user": {
                "username": f"system:serviceaccount:{found.namespace}:{found.service_account}",
                "groups": [
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{found.namespace}",
                    "system:authenticated",
                ],
                "extra": extra,
            },
            "audiences": audiences,
        }


def _token_text(
    namespace: str,
    service_account: str,
    audiences: tuple[str, ...],
    now: float,
    seconds: int,
    pod: dict[str, Any],
    node: str,
    node_uid: str,
    jti: str,
) -> str:
    """A token shaped as the API server's (a JWT whose claims say whose it is and when
    it expires); its signature is random: only this simcluster's memory vouches for it."""
    claims: dict[str, Any] = {
        "aud": list(audiences),
        "exp": int(now + seconds),
        "iat": int(now),
        "nbf": int(now),
        "iss": API_AUDIENCE,
        "jti": jti,
        "sub": f"system:serviceaccount:{namespace}:{service_account}",
        "kubernetes.io": {
            "namespace": namespace,
            "pod": {"name": pod["name"], "uid": pod.get("uid", "")},
            "serviceaccount": {"name": service_account},
        },
    }
    if node:
        claims["kubernetes.io"]["node"] = {"name": node, "uid": node_uid}
    header = {"alg": "RS256", "kid": "simcluster"}
    parts = [_b64(msgspec.json.encode(header)), _b64(msgspec.json.encode(claims))]
    return ".".join([*parts, _b64(secrets.token_bytes(64))])


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _refused(error: str) -> dict[str, Any]:
    return {"user": {}, "error": error}


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _invalid(name: str, path: str, message: str, *, kind: str = "TokenRequest") -> ApiError:
    return ApiError(
        422,
        "Invalid",
        f'{kind}.{GROUP_VERSION.split("/")[0]} "{name}" is invalid: {path}: {message}',
        details={
            "name": name,
            "group": GROUP_VERSION.split("/")[0],
            "kind": kind,
            "causes": [{"reason": "FieldValueInvalid", "message": message, "field": path}],
        },
    )


def handles(path: str) -> bool:
    return path == TOKEN_REVIEWS or TOKEN_REQUEST.match(path) is not None


async def route(tokens: Tokens, request: web.Request, path: str) -> dict[str, Any]:
    """The answer to a token path (``handles``); 405 for a verb other than POST."""
    if request.method != "POST":
        raise ApiError(
            405,
            "MethodNotAllowed",
            f"the server does not allow this method on the requested resource ({request.method})",
        )
    decoded = msgspec.json.decode(await request.read() or b"{}")
    if not isinstance(decoded, dict):
        raise ApiError(400, "BadRequest", "the request body must be a JSON object")
    found = TOKEN_REQUEST.match(path)
    if found is not None:
        return tokens.request(found.group(1), found.group(2), decoded)
    return tokens.review(decoded)
