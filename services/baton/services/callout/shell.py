"""The callout's I/O: NATS's authorization requests in, a TokenReview out, signed answers back.

One request: decode and check the server's ``authorization_request`` (signed by the
server), take ``connect_opts.auth_token``, ask Kubernetes a TokenReview (audience
``nats``), let ``core.decide`` choose, and answer with an ``authorization_response``
signed by the issuer account's key (``claims.encode``). Every decision is logged with
its reason and the client's name and address, never the token.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable

import prometheus_client
import structlog
from kubernetes_asyncio.client import (
    ApiClient,
    AuthenticationV1Api,
    V1TokenReview,
    V1TokenReviewSpec,
)
from nats.aio.msg import Msg

from baton.libs.runner.access import Permissions, agent_token_user
from baton.libs.runtime.nkey import account_pair
from baton.services.callout import claims, core

log = structlog.get_logger("baton.callout")
DECISIONS = prometheus_client.Counter(
    "baton_callout_decisions_total",
    "Agent connects the auth callout answered, by result (allowed, refused, unreadable)",
    ["result"],
)
REVIEW_SECONDS = prometheus_client.Histogram(
    "baton_callout_review_seconds",
    "Time of one TokenReview call to the Kubernetes API",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
Reviewer = Callable[[str, str], Awaitable[core.Review]]  # (token, audience) -> answer


def token_expiry(token: str) -> float | None:
    """``exp`` of a ServiceAccount token when it is a JWT (Kubernetes' are; read only
    after a TokenReview vouched for the token), else None."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(claims.unb64(parts[1]))
    except (claims.InvalidJwt, json.JSONDecodeError, UnicodeDecodeError):
        return None
    exp = payload.get("exp") if isinstance(payload, dict) else None
    return float(exp) if isinstance(exp, int | float) else None


def kube_reviewer(client: ApiClient) -> Reviewer:
    api = AuthenticationV1Api(client)

    async def review(token: str, audience: str) -> core.Review:
        body = V1TokenReview(spec=V1TokenReviewSpec(token=token, audiences=[audience]))
        with REVIEW_SECONDS.time():
            answer = await api.create_token_review(body)
        status = answer.status
        user = status.user if status is not None else None
        return core.Review(
            authenticated=bool(status and status.authenticated),
            username=(user.username or "") if user else "",
            audiences=tuple((status.audiences or ()) if status else ()),
            extra=dict((user.extra or {}) if user else {}),
            error=(status.error or "") if status else "",
            expires=token_expiry(token),
        )

    return review


class Callout:
    """Answers the server's authorization requests for agents."""

    def __init__(
        self,
        *,
        issuer_seed: str,
        policy: core.Policy,
        review: Reviewer,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.pair = account_pair(issuer_seed)
        self.issuer = self.pair.public_key.decode()
        self.policy = policy
        self.review = review
        self.clock = clock

    def rights(self, node: str) -> tuple[str, Permissions]:
        return agent_token_user(self.policy.cluster, node)

    async def answer(self, data: bytes) -> bytes | None:
        """The signed response to one request; None when the request cannot be read
        (then there is no one to answer: the server times the client out)."""
        try:
            request = core.request_of(
                claims.decode(data.decode(), kind="authorization_request", issuer_prefix="N")
            )
        except (ValueError, UnicodeDecodeError) as exc:
            DECISIONS.labels("unreadable").inc()
            log.warning("callout: unreadable authorization request", error=str(exc))
            return None
        decision: core.Grant | core.Refusal
        if not request.token:
            decision = core.decide(None, self.policy, self.clock(), self.rights)
        else:
            try:
                found = await self.review(request.token, self.policy.audience)
            except Exception as exc:  # the API down, RBAC missing: refuse, say why
                decision = core.Refusal(f"TokenReview failed: {_described(exc)}")
            else:
                decision = core.decide(found, self.policy, self.clock(), self.rights)
        return self._respond(request, decision).encode()

    def _respond(self, request: core.Request, decision: core.Grant | core.Refusal) -> str:
        now = self.clock()
        if isinstance(decision, core.Refusal):
            DECISIONS.labels("refused").inc()
            log.warning("callout: refused", client=request.client, reason=decision.reason)
            response = core.response_claims(user_key=request.user_key,
                                            server_id=request.server_id, now=now,
                                            error="not authorized")  # fmt: skip
            return claims.encode(response, self.pair)
        DECISIONS.labels("allowed").inc()
        log.info("callout: allowed", client=request.client, node=decision.node, pod=decision.pod,
                 expires=decision.expires)  # fmt: skip
        user = claims.encode(core.user_claims(decision, user_key=request.user_key, now=now),
                             self.pair)  # fmt: skip
        response = core.response_claims(user_key=request.user_key, server_id=request.server_id,
                                        now=now, user_jwt=user)  # fmt: skip
        return claims.encode(response, self.pair)

    async def handle(self, msg: Msg) -> None:
        reply = await self.answer(msg.data)
        if reply is not None and msg.reply:
            await msg.respond(reply)


def _described(exc: Exception) -> str:
    """An API error by its status and reason alone: its body could quote the request."""
    status = getattr(exc, "status", None)
    if status is not None:
        return f"{type(exc).__name__} {status} {getattr(exc, 'reason', '')}".strip()
    return f"{type(exc).__name__}: {exc}"
