"""Which agents' connections to close, pure: the connections a callout replica let in,
and the pods and nodes the bridge says are gone.

A token the callout let in names its pod (and that pod's uid) and its node. When that
pod is deleted, or its node removed, the connection must not outlive it: the shell asks
the server the connection is on to close it (``$SYS.REQ.SERVER.<id>.KICK``), and a
reconnect with the same token is refused by the TokenReview (the pod it is bound to is
gone). A pod that goes while its token is being reviewed is remembered for
``GONE_KEPT_S``: a grant for it is then refused. A connection is known by its server's
id and its client id there; a restarted server has a new id, so a stale entry can never
close another client.

A callout that restarts has forgotten what it let in, and one disconnected from NATS
misses deletions. So each replica also reads every server's connections (CONNZ: the user
name the callout gave each agent, ``core.user_name``, says its node, pod and pod uid), and
closes those whose pod is no longer in the agents' namespace (``stale``): at start and
every ``resync_s``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from baton.proto import k8s
from baton.services.callout.core import USER_SEP, Grant, Request

GONE_KEPT_S = 120.0  # longer than any TokenReview (the API client's timeout)


@dataclass(frozen=True, slots=True)
class Connection:
    server_id: str
    cid: int  # the client's id on that server
    node: str
    pod: str  # its name, in the agents' namespace
    pod_uid: str  # "" when the token did not say
    expires: int  # the user's expiry (seconds since the epoch): NATS closes it then


@dataclass(frozen=True, slots=True)
class Gone:
    """A pod (``pod`` set, ``uid`` when known) or a node (``pod`` empty) that is gone."""

    node: str = ""
    pod: str = ""
    uid: str = ""

    def takes(self, conn: Connection | Grant) -> bool:
        if not self.pod:
            return conn.node == self.node
        if conn.pod != self.pod:
            return False
        return not (self.uid and conn.pod_uid and self.uid != conn.pod_uid)


def connection(grant: Grant, request: Request) -> Connection | None:
    """What to remember of a connection let in; None when the server gave no client id."""
    if request.cid <= 0:
        return None
    return Connection(server_id=request.server_id, cid=request.cid, node=grant.node,
                      pod=grant.pod, pod_uid=grant.pod_uid, expires=grant.expires)  # fmt: skip


def gone_of(event: k8s.K8sEvent, namespace: str) -> Gone | None:
    """The bridge's deletion of a pod in the agents' ``namespace``, or of a node; None
    for anything else (an update, another namespace's pod)."""
    if event.op != "delete":
        return None
    if isinstance(event, k8s.PodEvent) and event.pod.namespace == namespace:
        return Gone(pod=event.pod.name, uid=event.pod.uid)
    if isinstance(event, k8s.NodeEvent):
        return Gone(node=event.node.name)
    return None


def revoked(
    known: tuple[Connection, ...], gone: Gone | None, now: float
) -> tuple[tuple[Connection, ...], tuple[Connection, ...]]:
    """(the connections still to remember, those to close now). Connections past their
    expiry are forgotten: the server has closed them already."""
    live = tuple(c for c in known if c.expires > now)
    if gone is None:
        return live, ()
    return tuple(c for c in live if not gone.takes(c)), tuple(c for c in live if gone.takes(c))


def recent(
    gone: tuple[tuple[Gone, float], ...], new: Gone | None, now: float
) -> tuple[tuple[Gone, float], ...]:
    """The pods and nodes gone in the last ``GONE_KEPT_S`` (with when), ``new`` added."""
    kept = tuple((g, at) for g, at in gone if now - at < GONE_KEPT_S)
    return kept if new is None else (*kept, (new, now))


def still_there(grant: Grant | Connection, gone: tuple[tuple[Gone, float], ...]) -> bool:
    """Whether ``grant``'s pod and node are not among those just gone (its review may
    have started before they went; a connection listed may have been let in before)."""
    return not any(g.takes(grant) for g, _ in gone)


def listed(server_id: str, info: Mapping[str, Any], *, expires: int) -> Connection | None:
    """A connection the server lists (one CONNZ entry) that the callout let in, None for
    any other (a service's nkey user, a client of another account). ``expires``: when
    to forget it at the latest (the server does not say the user's expiry)."""
    name, cid = info.get("authorized_user"), info.get("cid")
    if not isinstance(name, str) or not isinstance(cid, int) or name.count(USER_SEP) != 3:
        return None
    user, node, pod, uid = name.split(USER_SEP)
    if not user.startswith("agent-") or not node or not pod:
        return None
    return Connection(server_id=server_id, cid=cid, node=node, pod=pod, pod_uid=uid,
                      expires=expires)  # fmt: skip


def stale(
    found: tuple[Connection, ...], pods: Mapping[str, str]
) -> tuple[tuple[Connection, ...], tuple[Connection, ...]]:
    """(those to remember, those to close): a connection whose pod is not among the
    agents' ``pods`` (name -> uid) now, or is another pod of that name, is closed."""

    def there(c: Connection) -> bool:
        uid = pods.get(c.pod)
        return uid is not None and not (uid and c.pod_uid and uid != c.pod_uid)

    return tuple(c for c in found if there(c)), tuple(c for c in found if not there(c))


def merged(known: tuple[Connection, ...], found: tuple[Connection, ...]) -> tuple[Connection, ...]:
    """``known`` and the connections ``found`` it did not have (by server and client id)."""
    have = {(c.server_id, c.cid) for c in known}
    return (*known, *(c for c in found if (c.server_id, c.cid) not in have))
