"""The auth callout's pure parts: NATS JWTs (encode, decode, signatures), the decision
(a TokenReview's answer -> a user or a refusal), the server config's ``auth_callout``
block, ``baton nats-config --callout``, settings that stop start-up; and simcluster's
TokenRequest and TokenReview on a store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nkeys
import pytest

from baton.libs.runner import access
from baton.libs.runtime import SettingsError
from baton.libs.runtime.nkey import account_pair, new_account_seed, new_user_seed, public_key
from baton.services.agent import main as agent
from baton.services.callout import core, shell
from baton.services.callout import main as callout
from baton.services.callout.core import claims
from baton.services.cli.natsconfig import CALLOUT_ISSUER, run, specs
from baton.services.simcluster.api.objects import ApiError
from baton.services.simcluster.api.store import Store
from baton.services.simcluster.api.tokens import EXTRA, Tokens

pytestmark = pytest.mark.unit
C = "c1"
NOW = 1_800_000_000.0
POLICY = core.Policy(cluster=C, max_s=3600)


def rights(node: str) -> tuple[str, access.Permissions]:
    return access.agent_token_user(C, node)


def pair() -> Any:
    return account_pair(new_account_seed())


# JWTs


def test_what_is_encoded_decodes_and_a_tampered_one_does_not() -> None:
    signer = pair()
    body = {"sub": "UABC", "aud": "$G", "nats": {"type": "user", "version": 2}}
    token = claims.encode(body, signer)
    header, payload, signature = token.split(".")
    assert json.loads(claims.unb64(header)) == {"typ": "JWT", "alg": "ed25519-nkey"}
    assert "=" not in token  # base64url without padding
    got = claims.decode(token, kind="user", issuer_prefix="A")
    assert got["iss"] == signer.public_key.decode() and got["sub"] == "UABC"
    assert got["jti"] == claims.jti(got)  # as NATS makes it: the claims' hash, jti empty
    flipped = signature[:-2] + ("A" if signature[-2] != "A" else "B") + signature[-1]
    forged = {**got, "aud": "OTHER"}
    for bad in (f"{header}.{payload}.{flipped}",
                f"{header}.{claims.b64(json.dumps(forged).encode())}.{signature}",
                token.replace(".", "", 1), "not a jwt"):  # fmt: skip
        with pytest.raises(claims.InvalidJwt):
            claims.decode(bad, kind="user")


def test_a_jwt_of_another_kind_or_issuer_is_refused() -> None:
    token = claims.encode({"nats": {"type": "user", "version": 2}}, pair())
    with pytest.raises(claims.InvalidJwt, match="not 'authorization_request'"):
        claims.decode(token, kind="authorization_request")
    with pytest.raises(claims.InvalidJwt, match="is not a N key"):
        claims.decode(token, kind="user", issuer_prefix="N")  # a server's, not an account's


def test_another_keys_signature_does_not_verify() -> None:
    one, other = pair(), pair()
    data = b"header.payload"
    assert claims.verify(one.public_key.decode(), data, one.sign(data))
    assert not claims.verify(other.public_key.decode(), data, one.sign(data))
    assert not claims.verify("AGARBAGE", data, one.sign(data))


def test_an_account_seed_is_required_to_sign() -> None:
    with pytest.raises(ValueError, match="starting SA"):
        account_pair(new_user_seed())


# The decision


def review(**kw: Any) -> core.Review:
    base: dict[str, Any] = {
        "authenticated": True,
        "username": "system:serviceaccount:baton-agent:baton-agent",
        "audiences": ("nats",),
        "extra": {core.NODE_NAME: ["gpu-0"], core.POD_NAME: ["baton-agent-x1"]},
        "expires": NOW + 600,
    }
    return core.Review(**{**base, **kw})


def test_a_good_token_gets_exactly_its_nodes_agent_permissions_until_it_expires() -> None:
    grant = core.decide(review(), POLICY, NOW, rights)
    assert isinstance(grant, core.Grant)
    own = access.agent_permissions(C, "gpu-0")
    assert grant.permissions.publish == own.publish
    assert grant.permissions.subscribe == (*own.subscribe, access.agent_inbox("gpu-0") + ".>")
    assert grant.node == "gpu-0" and grant.name == "agent-gpu-0" and grant.pod == "baton-agent-x1"
    assert grant.expires == int(NOW + 600)  # the token's expiry, before max_s
    later = core.decide(review(expires=None), POLICY, NOW, rights)
    assert isinstance(later, core.Grant) and later.expires == int(NOW + 3600)
    user = core.user_claims(grant, user_key="UKEY", now=NOW)
    assert user["sub"] == "UKEY" and user["aud"] == "$G" and user["exp"] == int(NOW + 600)
    assert user["nats"]["pub"] == {"allow": list(own.publish)}
    assert user["nats"]["type"] == "user" and user["nats"]["version"] == 2


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (None, "no auth_token"),
        (review(authenticated=False, error="invalid bearer token"), "invalid bearer token"),
        (review(audiences=("api",)), "not for audience 'nats'"),
        (review(username="system:serviceaccount:default:default"), "not the agents'"),
        (review(username="system:serviceaccount:baton-agent:baton-agents"), "not the agents'"),
        (review(extra={core.POD_NAME: ["p"]}), "names no node"),
        (review(extra={core.NODE_NAME: ["a", "b"]}), "names no node"),
        (review(extra={core.NODE_NAME: ["Not_A_Name"]}), "cannot be a subject token"),
        (review(expires=NOW - 1), "expired"),
    ],
    ids=[
        "no-token",
        "unauthenticated",
        "audience",
        "other-sa",
        "near-name",
        "no-node",
        "two-nodes",
        "bad-node",
        "expired",
    ],
)
def test_refusals_say_why(answer: core.Review | None, reason: str) -> None:
    refusal = core.decide(answer, POLICY, NOW, rights)
    assert isinstance(refusal, core.Refusal) and reason in refusal.reason, refusal


def test_the_response_carries_the_user_or_an_error_for_that_server_and_key() -> None:
    ok = core.response_claims(user_key="UKEY", server_id="NSRV", now=NOW, user_jwt="a.b.c")
    assert ok["sub"] == "UKEY" and ok["aud"] == "NSRV"
    assert ok["nats"] == {"type": "authorization_response", "version": 2, "jwt": "a.b.c"}
    refused = core.response_claims(user_key="UKEY", server_id="NSRV", now=NOW, error="no")
    assert refused["nats"]["error"] == "no" and "jwt" not in refused["nats"]


def test_a_request_without_its_user_key_is_unreadable() -> None:
    good = {"aud": claims.REQUEST_AUDIENCE,
            "nats": {"user_nkey": "UKEY", "server_id": {"id": "NSRV"},
                     "connect_opts": {"auth_token": "t", "name": "agent-gpu-0"},
                     "client_info": {"host": "10.0.0.7"}}}  # fmt: skip
    request = core.request_of(good)
    assert (request.user_key, request.server_id, request.token) == ("UKEY", "NSRV", "t")
    assert request.client == "agent-gpu-0@10.0.0.7"
    with pytest.raises(ValueError, match="user_nkey"):
        core.request_of({"aud": claims.REQUEST_AUDIENCE, "nats": {"server_id": {"id": "NSRV"}}})
    with pytest.raises(ValueError, match="not 'nats-authorization-request'"):
        core.request_of({**good, "aud": "NSERVERID"})  # e.g. a response replayed as a request


# The server's configuration


def test_the_config_sends_everyone_but_its_own_users_to_the_callout() -> None:
    found = access.users(specs(), C, callout=True)
    issuer = public_key(new_user_seed()).replace("U", "A", 1)  # any A... key will do here
    config = access.server_config(found, callout_issuer=issuer)
    block = config["authorization"]["auth_callout"]
    assert block["issuer"] == issuer
    assert sorted(block["auth_users"]) == sorted(u.public_key for u in found)
    assert not any(u.name.startswith("agent-") for u in found)  # no per-node users
    mine = next(u for u in found if u.name == access.CALLOUT).to_config()["permissions"]
    assert mine["subscribe"]["allow"][0] == "$SYS.REQ.USER.AUTH"
    assert mine["publish"]["allow"] == ["$SYS._INBOX.>"]
    with pytest.raises(ValueError, match="no callout user"):
        access.server_config(access.users(specs(), C), callout_issuer=issuer)
    assert "auth_callout" not in access.server_config(found)["authorization"]


def test_nats_config_callout_keeps_its_issuer_and_refuses_a_bad_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def issuer() -> str:
        assert run(["--credentials", str(tmp_path), "--callout"]) == 0
        text = capsys.readouterr().out
        config = json.loads("\n".join(x for x in text.splitlines() if not x.startswith("#")))
        return str(config["authorization"]["auth_callout"]["issuer"])

    first = issuer()
    assert first.startswith("A") and issuer() == first
    assert (tmp_path / "services" / "callout").is_file()
    (tmp_path / CALLOUT_ISSUER).write_text(new_user_seed())
    assert run(["--credentials", str(tmp_path), "--callout"]) == 2
    assert CALLOUT_ISSUER in capsys.readouterr().err


# Settings


def test_the_callout_stops_naming_a_missing_or_bad_issuer(tmp_path: Path) -> None:
    seed = tmp_path / "seed"
    seed.write_text(new_user_seed())
    env = {"BATON_NATS_NKEY_SEED_FILE": str(seed)}
    with pytest.raises(SettingsError, match="BATON_CALLOUT_ISSUER_SEED_FILE: required"):
        callout.settings_from(env)
    with pytest.raises(SettingsError, match=r"BATON_CALLOUT_ISSUER_SEED_FILE: .*starting SA"):
        callout.settings_from({**env, "BATON_CALLOUT_ISSUER_SEED_FILE": str(seed)})
    issuer = tmp_path / "issuer"
    issuer.write_text(new_account_seed())
    good = callout.settings_from({**env, "BATON_CALLOUT_ISSUER_SEED_FILE": str(issuer)})
    assert good.policy().username == "system:serviceaccount:baton-agent:baton-agent"
    with pytest.raises(SettingsError, match="BATON_NATS_NKEY_SEED_FILE"):
        callout.settings_from({"BATON_CALLOUT_ISSUER_SEED_FILE": str(issuer)})


def test_an_agent_stops_naming_a_bad_token_file(tmp_path: Path) -> None:
    key = "BATON_AGENT_NATS_TOKEN_FILE"
    missing = agent.load(None, {key: str(tmp_path / "none")})
    with pytest.raises(SettingsError, match=f"{key}: cannot read"):
        agent.nats_token_file(missing, fleet=False)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(SettingsError, match=f"{key}: .* is empty"):
        agent.nats_token_file(agent.load(None, {key: str(empty)}), fleet=False)
    token = tmp_path / "token"
    token.write_text("a.b.c")
    settings = agent.load(None, {key: str(token)})
    assert agent.nats_token_file(settings, fleet=False) == str(token)
    with pytest.raises(SettingsError, match="not with --fleet"):
        agent.nats_token_file(settings, fleet=True)
    both = agent.load(None, {key: str(token), "BATON_AGENT_NATS_CREDENTIALS_DIR": "/x"})
    with pytest.raises(SettingsError, match="not both"):
        agent.nats_token_file(both, fleet=False)
    shared = agent.load(None, {"BATON_NATS_TOKEN_FILE": str(token)})  # the shared name works
    assert agent.nats_token_file(shared, fleet=False) == str(token)


# simcluster's TokenRequest and TokenReview


def cluster(clock: list[float]) -> tuple[Store, Tokens]:
    store = Store(clock=lambda: 0.0, seed=1)
    store.create("namespaces", {"metadata": {"name": "baton-system"}})
    store.create("nodes", {"metadata": {"name": "gpu-0"}})
    pod = {"metadata": {"name": "agent-x", "namespace": "baton-system"},
           "spec": {"nodeName": "gpu-0", "serviceAccountName": "baton-agent",
                    "containers": [{"name": "agent", "image": "baton"}]}}  # fmt: skip
    store.create("pods", pod)
    return store, Tokens(store, clock=lambda: clock[0])


def ask(tokens: Tokens, **spec: Any) -> str:
    body = {"spec": {"audiences": ["nats"], "expirationSeconds": 600,
                     "boundObjectRef": {"kind": "Pod", "name": "agent-x"}, **spec}}  # fmt: skip
    answer = tokens.request("baton-system", "baton-agent", body)
    assert answer["kind"] == "TokenRequest" and answer["spec"]["boundObjectRef"]["uid"]
    token: str = answer["status"]["token"]
    return token


def test_a_pod_bound_token_reviews_as_its_pod_and_node_until_it_expires() -> None:
    clock = [NOW]
    store, tokens = cluster(clock)
    token = ask(tokens)
    status = tokens.review({"spec": {"token": token, "audiences": ["nats"]}})["status"]
    assert status["authenticated"] is True and status["audiences"] == ["nats"]
    assert status["user"]["username"] == "system:serviceaccount:baton-system:baton-agent"
    extra = status["user"]["extra"]
    assert extra[f"{EXTRA}node-name"] == ["gpu-0"] and extra[f"{EXTRA}pod-name"] == ["agent-x"]
    pod_uid = store.get("pods", "baton-system", "agent-x")["metadata"]["uid"]
    assert extra[f"{EXTRA}pod-uid"] == [pod_uid]
    other = tokens.review({"spec": {"token": token, "audiences": ["api"]}})["status"]
    assert not other.get("authenticated") and "audiences" in other["error"]
    clock[0] = NOW + 600
    expired = tokens.review({"spec": {"token": token, "audiences": ["nats"]}})["status"]
    assert not expired.get("authenticated") and "expired" in expired["error"]


def test_a_deleted_pods_token_and_a_foreign_one_are_not_authenticated() -> None:
    store, tokens = cluster([NOW])
    token = ask(tokens)
    store.delete("pods", "baton-system", "agent-x", grace_seconds=0)
    gone = tokens.review({"spec": {"token": token, "audiences": ["nats"]}})["status"]
    assert not gone.get("authenticated") and "not found" in gone["error"]
    garbage = tokens.review({"spec": {"token": "x.y.z", "audiences": ["nats"]}})["status"]
    assert not garbage.get("authenticated")


def test_token_requests_the_api_server_refuses() -> None:
    _, tokens = cluster([NOW])
    with pytest.raises(ApiError) as short:
        ask(tokens, expirationSeconds=60)
    assert short.value.code == 422
    with pytest.raises(ApiError) as other:
        bound = {"kind": "Pod", "name": "agent-x"}
        tokens.request("baton-system", "default", {"spec": {"boundObjectRef": bound}})
    assert other.value.code == 400  # the pod runs as baton-agent
    with pytest.raises(ApiError) as missing:
        ask(tokens, boundObjectRef={"kind": "Pod", "name": "nope"})
    assert missing.value.code == 404


# The shell's answer to a server's request (the reviewer stands in for the API server)


def server_request(token: str, *, cid: int = 0) -> bytes:
    client = {"host": "10.0.0.7", **({"id": cid} if cid else {})}  # id: the client's on it
    entropy = bytes(range(32))
    server = nkeys.from_seed(bytearray(nkeys.encode_seed(entropy, nkeys.PREFIX_BYTE_SERVER)))
    claims_ = {"aud": claims.REQUEST_AUDIENCE, "sub": "AISSUER", "iat": int(NOW),
               "nats": {"type": "authorization_request", "version": 2, "user_nkey": "UONE",
                        "server_id": {"id": "NSERVERID", "name": "n1"},
                        "connect_opts": {"auth_token": token, "name": "agent-gpu-0"},
                        "client_info": client}}  # fmt: skip
    return claims.encode(claims_, server).encode()


async def test_the_callout_answers_a_signed_request_with_a_signed_user_or_an_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    issuer = new_account_seed()
    key = account_pair(issuer).public_key.decode()

    async def reviewed(token: str, audience: str) -> core.Review:
        assert (token, audience) == ("the-token", "nats")
        return review()

    async def broken(token: str, audience: str) -> core.Review:
        raise ConnectionRefusedError(111, "Connect call failed")

    answer = await shell.Callout(issuer_seed=issuer, policy=POLICY, review=reviewed,
                                 clock=lambda: NOW).answer(server_request("the-token"))  # fmt: skip
    assert answer is not None
    response = claims.decode(answer.decode(), kind="authorization_response", issuer_prefix="A")
    assert (response["iss"], response["sub"], response["aud"]) == (key, "UONE", "NSERVERID")
    user = claims.decode(response["nats"]["jwt"], kind="user", issuer_prefix="A")
    assert user["iss"] == key and user["sub"] == "UONE"
    assert user["name"] == "agent-gpu-0/gpu-0/baton-agent-x1/"  # node user, node, pod, pod uid
    callout_ = shell.Callout(issuer_seed=issuer, policy=POLICY, review=broken, clock=lambda: NOW)
    refused = await callout_.answer(server_request("the-token"))
    assert refused is not None
    error = claims.decode(refused.decode(), kind="authorization_response")["nats"]
    assert "jwt" not in error and error["error"] == "not authorized"
    assert await callout_.answer(b"not.a.jwt") is None  # nobody to answer: the server times out
    forged = server_request("the-token").replace(b".", b".x", 1)
    assert await callout_.answer(forged) is None
    said = capsys.readouterr()
    logged = said.out + said.err
    assert "TokenReview failed: ConnectionRefusedError" in logged  # the reason, logged
    assert "the-token" not in logged  # never the token
