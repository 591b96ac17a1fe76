"""The callout's I/O: NATS's authorization requests in, a TokenReview out, signed answers back.

One request: decode and check the server's ``authorization_request`` (signed by the
server), take ``connect_opts.auth_token``, ask Kubernetes a TokenReview (audience
``nats``), let ``core.decide`` choose, and answer with an ``authorization_response``
signed by the issuer account's key (``claims.encode``). Every decision is logged with
its reason and the client's name and address, never the token.

Revocation: the connections let in are remembered (server id, client id, pod, node);
the bridge's deletion of a pod in the agents' namespace, or of a node, closes theirs
(``revoking``; a ``Kicker`` asks the server, ``$SYS.REQ.SERVER.<id>.KICK``). A resync
(``Callout.resync``: at start and every ``resync_s``) reads every server's connections
(a ``Lister``, CONNZ) and the agents' pods (a ``PodLister``): it learns the connections
a restarted replica forgot and closes those whose pod went while no one listened.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import prometheus_client
import structlog
from kubernetes_asyncio.client import (
    ApiClient,
    AuthenticationV1Api,
    CoreV1Api,
    V1TokenReview,
    V1TokenReviewSpec,
)
from nats.aio.msg import Msg

from baton.libs.runner.access import Permissions, agent_token_user
from baton.libs.runtime.nkey import account_pair
from baton.proto import k8s
from baton.proto.codec import Undecodable, decode
from baton.services.callout import core
from baton.services.callout.core import claims, revoking

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
KICKS = prometheus_client.Counter(
    "baton_callout_kicks_total",
    "Agent connections the callout asked NATS to close (pod or node gone), by result",
    ["result"],
)
Reviewer = Callable[[str, str], Awaitable[core.Review]]  # (token, audience) -> answer
# (server id, client id) -> "" when the server closed it, else why not
Kicker = Callable[[str, int], Awaitable[str]]
KICK_SUBJECT = "$SYS.REQ.SERVER.{server}.KICK"
CONNZ_SUBJECT = "$SYS.REQ.SERVER.{server}.CONNZ"  # server "PING": every server answers
Lister = Callable[[], Awaitable[list[tuple[str, dict[str, Any]]]]]  # (server id, CONNZ entry)
PodLister = Callable[[], Awaitable[dict[str, str]]]  # the agents' pods now: name -> uid


def nats_kicker(nc: Any, *, timeout: float = 2.0) -> Kicker:
    """Closes clients through ``nc``, a connection of a system-account user
    (``access.CALLOUT_KICK``): nats-server answers ``{"server": ...}`` when it closed the
    client, ``{"error": ...}`` when it could not (no such client)."""

    async def kick(server_id: str, cid: int) -> str:
        subject = KICK_SUBJECT.format(server=server_id)
        try:
            reply = await nc.request(subject, json.dumps({"cid": cid}).encode(), timeout=timeout)
            answer = json.loads(reply.data)
        except Exception as exc:  # no answer (that server is gone), or not JSON
            return f"{type(exc).__name__}: {exc}"
        error = answer.get("error") if isinstance(answer, dict) else "not an object"
        if isinstance(error, dict):
            error = error.get("description") or error
        return str(error) if error else ""

    return kick


def nats_lister(nc: Any, *, gather_s: float = 1.0, page: int = 1024) -> Lister:
    """Every server's client connections of the global account, through ``nc`` (the
    ``callout-kick`` user): one CONNZ to all servers (``PING``; the answers that come
    within ``gather_s``), then each server's further pages by its id."""

    def ask(offset: int) -> bytes:
        wanted = {"auth": True, "acc": core.GLOBAL_ACCOUNT, "limit": page, "offset": offset}
        return json.dumps(wanted).encode()

    async def listing() -> list[tuple[str, dict[str, Any]]]:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        answers: list[dict[str, Any]] = []
        try:
            await nc.publish(CONNZ_SUBJECT.format(server="PING"), ask(0), reply=inbox)
            deadline = time.monotonic() + gather_s
            while (left := deadline - time.monotonic()) > 0:
                try:
                    answers.append(json.loads((await sub.next_msg(timeout=left)).data))
                except TimeoutError:
                    break
        finally:
            await sub.unsubscribe()
        if not answers:  # every server answers, if only with the callout's own connections
            raise RuntimeError(
                f"no NATS server answered {CONNZ_SUBJECT.format(server='PING')} within "
                f"{gather_s} s: the callout-kick user may lack it (a configuration made "
                "before it could; run baton nats-config --callout again)"
            )
        found: list[tuple[str, dict[str, Any]]] = []
        for answer in answers:
            if "data" not in answer:  # e.g. {"error": {"description": ...}}
                raise RuntimeError(f"CONNZ answered without connections: {answer}")
            server, data = answer["server"]["id"], answer["data"]
            listed = list(data.get("connections") or ())
            while len(listed) < data.get("total", 0) and data.get("connections"):
                reply = await nc.request(CONNZ_SUBJECT.format(server=server),
                                         ask(len(listed)), timeout=gather_s * 5)  # fmt: skip
                data = json.loads(reply.data)["data"]
                listed += data.get("connections") or ()
            found += [(server, info) for info in listed]
        return found

    return listing


def kube_pod_lister(client: ApiClient, namespace: str) -> PodLister:
    """The agents' pods (name -> uid) as the API server has them now."""
    api = CoreV1Api(client)

    async def pods() -> dict[str, str]:
        found = await api.list_namespaced_pod(namespace)
        return {p.metadata.name: p.metadata.uid or "" for p in found.items}

    return pods


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
        kick: Kicker | None = None,
        listing: Lister | None = None,
        pods: PodLister | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.pair = account_pair(issuer_seed)
        self.issuer = self.pair.public_key.decode()
        self.policy = policy
        self.review = review
        self.kick = kick  # None: connections are not remembered, nor closed
        self.listing, self.pods = listing, pods  # None: no resync
        self.clock = clock
        self.connections: tuple[revoking.Connection, ...] = ()
        self.gone: tuple[tuple[revoking.Gone, float], ...] = ()  # just deleted: refused

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
        if isinstance(decision, core.Grant) and not revoking.still_there(decision, self.gone):
            decision = core.Refusal(f"pod {decision.pod!r} or node {decision.node!r} just went")
        if isinstance(decision, core.Grant) and self.kick is not None:
            self._remember(revoking.connection(decision, request))
        return self._respond(request, decision).encode()

    def _remember(self, conn: revoking.Connection | None) -> None:
        if conn is not None:
            self.connections += (conn,)

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

    async def revoke(self, data: bytes) -> list[revoking.Connection]:
        """Close the connections of the pod or node a bridge event says is gone; the
        connections closed (or that could not be: logged)."""
        try:
            event: k8s.K8sEvent = decode(data, k8s.K8sEvent)
        except Undecodable as exc:  # the consumers' dead letters say it; here: ignored
            log.warning("callout: unreadable object event", error=str(exc))
            return []
        gone = revoking.gone_of(event, self.policy.namespace)
        self.gone = revoking.recent(self.gone, gone, self.clock())
        self.connections, closing = revoking.revoked(self.connections, gone, self.clock())
        await self._close(closing)
        return list(closing)

    async def resync(self) -> list[revoking.Connection]:
        """Learn every agent connection the servers list (those a restarted replica
        forgot, and other replicas') and close those whose pod is gone (deleted while
        this replica was away or not listening); the connections closed. The servers
        are read before the pods: a pod deleted in between is closed now, one deleted
        after is heard from the bridge or at the next resync."""
        if self.kick is None or self.listing is None or self.pods is None:
            return []
        until = int(self.clock() + self.policy.max_s)  # the server does not say a user's expiry
        listed = [
            revoking.listed(server, info, expires=until) for server, info in await self.listing()
        ]
        found = tuple(c for c in listed if c is not None)
        keep, closing = revoking.stale(found, await self.pods())
        closing += tuple(c for c in keep if not revoking.still_there(c, self.gone))
        shut = {(c.server_id, c.cid) for c in closing}
        self.connections = tuple(c for c in revoking.merged(self.connections, keep)
                                 if (c.server_id, c.cid) not in shut)  # fmt: skip
        await self._close(closing)
        log.info("callout: resynced agent connections", listed=len(found),
                 remembered=len(self.connections), closed=len(closing))  # fmt: skip
        return list(closing)

    async def _close(self, closing: tuple[revoking.Connection, ...]) -> None:
        for conn in closing:
            assert self.kick is not None  # nothing is remembered without one
            why = await self.kick(conn.server_id, conn.cid)
            absent = "no such client" in why.lower()  # closed already (another replica)
            KICKS.labels("absent" if absent else "failed" if why else "closed").inc()
            where = {"node": conn.node, "pod": conn.pod, "server": conn.server_id, "cid": conn.cid}
            if why and not absent:
                log.warning("callout: could not disconnect agent", error=why, **where)
            else:
                log.info("callout: agent disconnected, its pod or node gone", **where)

    async def handle_k8s(self, msg: Msg) -> None:
        await self.revoke(msg.data)


def _described(exc: Exception) -> str:
    """An API error by its status and reason alone: its body could quote the request."""
    status = getattr(exc, "status", None)
    if status is not None:
        return f"{type(exc).__name__} {status} {getattr(exc, 'reason', '')}".strip()
    return f"{type(exc).__name__}: {exc}"
