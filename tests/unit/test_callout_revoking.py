"""The callout closes an agent's connection when its pod or node goes: which connections
(``revoking``, pure), the shell remembering what it let in and asking the kicker, the
system-account user that may only kick, and the setting that names a bad seed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from baton.libs.runner import access
from baton.libs.runtime import SettingsError
from baton.libs.runtime.nkey import new_account_seed, new_user_seed
from baton.proto import k8s
from baton.proto.codec import encode
from baton.services.callout import core, shell
from baton.services.callout import main as callout
from baton.services.callout.core import revoking
from baton.services.cli.natsconfig import render, specs
from tests.unit.test_callout import NOW, POLICY, review, rights, server_request

pytestmark = pytest.mark.unit
C = "c1"
NS = POLICY.namespace


def conn(cid: int, *, pod: str = "agent-x", node: str = "gpu-0", uid: str = "u1",
         expires: float = NOW + 600) -> revoking.Connection:  # fmt: skip
    return revoking.Connection(server_id="NS1", cid=cid, node=node, pod=pod, pod_uid=uid,
                               expires=int(expires))  # fmt: skip


def pod_deleted(name: str, *, namespace: str = NS, uid: str = "u1", op: Any = "delete") -> Any:
    pod = k8s.Pod(namespace=namespace, name=name, uid=uid, node_name="gpu-0")
    return k8s.PodEvent(op=op, at=NOW, pod=pod)


def node_deleted(name: str) -> Any:
    return k8s.NodeEvent(op="delete", at=NOW, node=k8s.Node(name=name, uid="n"))


@pytest.mark.parametrize(
    ("event", "closed"),
    [
        (pod_deleted("agent-x"), [1, 2]),  # both of its connections (a reconnect made two)
        (pod_deleted("agent-x", uid="u-new"), []),  # another pod of that name: not ours
        (pod_deleted("agent-x", uid=""), [1, 2]),  # no uid said: by name
        (pod_deleted("agent-y", uid="u3"), [3]),
        (pod_deleted("agent-x", namespace="team-a"), []),  # not the agents' namespace
        (pod_deleted("agent-x", op="upsert"), []),  # still there
        (node_deleted("gpu-1"), [3]),
        (node_deleted("gpu-9"), []),
    ],
)
def test_a_pod_or_node_gone_closes_exactly_its_agents_connections(
    event: Any, closed: list[int]
) -> None:
    known = (conn(1), conn(2), conn(3, pod="agent-y", node="gpu-1", uid="u3"))
    kept, closing = revoking.revoked(known, revoking.gone_of(event, NS), NOW)
    assert [c.cid for c in closing] == closed
    assert sorted(c.cid for c in kept + closing) == [1, 2, 3]


def test_expired_connections_are_forgotten_not_closed() -> None:
    known = (conn(1, expires=NOW - 1), conn(2))
    kept, closing = revoking.revoked(known, revoking.gone_of(pod_deleted("agent-x"), NS), NOW)
    assert ([c.cid for c in kept], [c.cid for c in closing]) == ([], [2])
    kept, closing = revoking.revoked(known, None, NOW)
    assert ([c.cid for c in kept], closing) == ([2], ())


def test_a_request_without_a_client_id_is_not_remembered() -> None:
    grant = core.decide(review(), POLICY, NOW, lambda n: access.agent_token_user(C, n))
    assert isinstance(grant, core.Grant)
    request = core.Request(user_key="U", server_id="NS1", token="t", client="a@h")
    assert revoking.connection(grant, request) is None
    remembered = revoking.connection(grant, core.Request("U", "NS1", "t", "a@h", cid=7))
    assert remembered is not None and (remembered.cid, remembered.pod) == (7, "baton-agent-x1")


async def test_the_callout_kicks_what_it_let_in_once_its_pod_is_deleted() -> None:
    kicked: list[tuple[str, int]] = []

    async def reviewed(token: str, audience: str) -> core.Review:
        extra = {core.NODE_NAME: ["gpu-0"], core.POD_NAME: ["agent-x"], core.POD_UID: ["u1"]}
        return review(extra=extra)

    async def kick(server_id: str, cid: int) -> str:
        kicked.append((server_id, cid))
        return ""

    callout_ = shell.Callout(issuer_seed=new_account_seed(), policy=POLICY, review=reviewed,
                             kick=kick, clock=lambda: NOW)  # fmt: skip
    assert await callout_.answer(server_request("t", cid=42)) is not None
    assert await callout_.revoke(encode(pod_deleted("agent-other"))) == []
    assert await callout_.revoke(b"not json") == []  # unreadable: nothing closed, no crash
    closed = await callout_.revoke(encode(pod_deleted("agent-x")))
    assert [c.cid for c in closed] == [42] and kicked == [("NSERVERID", 42)]
    assert await callout_.revoke(encode(pod_deleted("agent-x"))) == []  # once
    assert callout_.connections == ()


def test_the_kick_user_lives_in_the_system_account_and_may_only_kick_or_list() -> None:
    found = access.users(specs(), C, callout=True)
    kick = next(u for u in found if u.name == access.CALLOUT_KICK)
    config = access.server_config(found, callout_issuer="A" + "B" * 55)
    assert config["system_account"] == access.SYSTEM_ACCOUNT
    (user,) = config["accounts"][access.SYSTEM_ACCOUNT]["users"]
    assert user["nkey"] == kick.public_key
    assert user["permissions"]["publish"]["allow"] == [
        "$SYS.REQ.SERVER.*.KICK",
        "$SYS.REQ.SERVER.*.CONNZ",  # every server's connections: what a restart forgot
    ]
    assert user["permissions"]["subscribe"]["allow"] == [kick.inbox]  # its replies alone
    in_global = [u["nkey"] for u in config["authorization"]["users"]]
    assert kick.public_key not in in_global  # not a user of Baton's own account
    assert kick.public_key in config["authorization"]["auth_callout"]["auth_users"]
    mine = next(u for u in found if u.name == access.CALLOUT).permissions
    assert "baton.c1.k8s.pod.>" in mine.subscribe and "baton.c1.k8s.node.>" in mine.subscribe
    plain = access.server_config(access.users(specs(), C))
    assert "accounts" not in plain and "system_account" not in plain  # no callout: as before


def test_the_callout_stops_naming_a_bad_kick_seed(tmp_path: Path) -> None:
    seed, issuer = tmp_path / "seed", tmp_path / "issuer"
    seed.write_text(new_user_seed())
    issuer.write_text(new_account_seed())
    env = {"BATON_NATS_NKEY_SEED_FILE": str(seed), "BATON_CALLOUT_ISSUER_SEED_FILE": str(issuer)}
    assert callout.settings_from(env).kick_seed_file == ""  # optional: then nothing is closed
    with pytest.raises(SettingsError, match=r"BATON_CALLOUT_KICK_SEED_FILE: .*cannot read"):
        callout.settings_from({**env, "BATON_CALLOUT_KICK_SEED_FILE": str(tmp_path / "none")})
    with pytest.raises(SettingsError, match=r"BATON_CALLOUT_KICK_SEED_FILE: .*issuer"):
        callout.settings_from({**env, "BATON_CALLOUT_KICK_SEED_FILE": str(issuer)})
    good = {**env, "BATON_CALLOUT_KICK_SEED_FILE": str(seed)}
    assert callout.settings_from(good).kick_seed_file == str(seed)


async def test_a_pod_deleted_while_its_token_is_reviewed_is_refused() -> None:
    """The deletion arrives between the TokenReview (which still found the pod) and the
    answer: no user for it; another pod on that node is let in; after GONE_KEPT_S the
    name is forgotten (a new pod of that name, with its own token, may come)."""
    now = [NOW]
    callout_: shell.Callout

    async def reviewed(token: str, audience: str) -> core.Review:
        pod = token  # the test's tokens name their pod
        if pod == "agent-x":
            await callout_.revoke(encode(pod_deleted("agent-x", uid="")))
        return review(extra={core.NODE_NAME: ["gpu-0"], core.POD_NAME: [pod]})

    async def kick(server_id: str, cid: int) -> str:
        return ""

    callout_ = shell.Callout(issuer_seed=new_account_seed(), policy=POLICY, review=reviewed,
                             kick=kick, clock=lambda: now[0])  # fmt: skip

    async def nats_said(token: str) -> dict[str, Any]:
        answer = await callout_.answer(server_request(token, cid=1))
        assert answer is not None
        return dict(shell.claims.decode(answer.decode(), kind="authorization_response")["nats"])

    assert (await nats_said("agent-x")).get("error") == "not authorized"
    assert "jwt" in await nats_said("agent-y")
    assert [c.pod for c in callout_.connections] == ["agent-y"]
    now[0] += revoking.GONE_KEPT_S
    callout_.gone = revoking.recent(callout_.gone, None, now[0])
    assert callout_.gone == ()


def test_auth_only_carries_the_system_account_when_the_callout_has_one() -> None:
    """``deploy/`` includes ``--auth-only``'s file: without the system account the kick
    user would not exist there."""
    found = access.users(specs(), C, callout=True)
    text = render(access.server_config(found, callout_issuer="A" + "B" * 55), auth_only=True)
    assert text.startswith("authorization: {") and '\nsystem_account: "SYS"' in text
    assert "\naccounts: {" in text
    plain = render(access.server_config(access.users(specs(), C)), auth_only=True)
    assert "accounts" not in plain and "system_account" not in plain


def listed(cid: int, user: str, server: str = "NS1") -> tuple[str, dict[str, Any]]:
    """One CONNZ entry, as nats-server lists a connection (``auth: true``)."""
    return server, {"cid": cid, "authorized_user": user, "name": "agent", "kind": "Client"}


def test_a_connection_the_callout_let_in_is_known_again_by_its_user_name() -> None:
    grant = core.decide(review(extra={core.NODE_NAME: ["gpu-0"], core.POD_NAME: ["agent-x"],
                                      core.POD_UID: ["u1"]}),
                        POLICY, NOW, rights)  # fmt: skip
    assert isinstance(grant, core.Grant)
    server, info = listed(7, core.user_name(grant))
    assert revoking.listed(server, info, expires=int(NOW + 600)) == conn(7)
    for other in ("UABC", "agent-gpu-0", "callout", "a/b/c/d", "agent-gpu-0//agent-x/u1",
                  "agent-gpu-0/gpu-0//u1"):  # fmt: skip
        assert revoking.listed(*listed(8, other), expires=0) is None, other


def test_a_resync_keeps_connections_of_pods_still_there_and_closes_the_rest() -> None:
    found = (conn(1), conn(2, pod="agent-y", uid="u2"), conn(3, pod="agent-z", uid="u3"),
             conn(4, pod="agent-w", uid=""))  # fmt: skip
    pods = {"agent-x": "u1", "agent-y": "u2-new", "agent-w": "u9"}  # y: another pod of its name
    keep, close = revoking.stale(found, pods)
    assert [c.cid for c in keep] == [1, 4] and [c.cid for c in close] == [2, 3]
    assert [c.cid for c in revoking.merged((conn(1), conn(5)), found)] == [1, 5, 2, 3, 4]


async def test_a_restarted_callout_learns_the_connections_it_forgot_and_closes_the_gone_ones() -> (
    None
):
    kicked: list[tuple[str, int]] = []

    async def kick(server_id: str, cid: int) -> str:
        kicked.append((server_id, cid))
        return "" if cid != 3 else "no such client"  # another replica closed it first

    async def listing() -> list[tuple[str, dict[str, Any]]]:
        there = [listed(1, "agent-gpu-0/gpu-0/agent-x/u1"), listed(2, "UAKEY"),
                 listed(3, "agent-gpu-1/gpu-1/agent-y/u2", server="NS2")]  # fmt: skip
        return [(s, i) for s, i in there if (s, i["cid"]) not in kicked]  # closed: not listed

    async def pods() -> dict[str, str]:
        return {"agent-x": "u1"}  # agent-y went while no callout listened

    async def unused(token: str, audience: str) -> core.Review:
        raise AssertionError("no review in a resync")

    callout_ = shell.Callout(issuer_seed=new_account_seed(), policy=POLICY, review=unused,
                             kick=kick, listing=listing, pods=pods, clock=lambda: NOW)  # fmt: skip
    closed = await callout_.resync()
    assert [(c.server_id, c.cid) for c in closed] == [("NS2", 3)] == kicked
    assert [(c.pod, c.cid) for c in callout_.connections] == [("agent-x", 1)]
    assert await callout_.resync() == [] and len(callout_.connections) == 1  # nothing twice
    closed = await callout_.revoke(encode(pod_deleted("agent-x")))  # known again: closed
    assert [c.cid for c in closed] == [1]
