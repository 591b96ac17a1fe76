"""The NATS auth callout (services/baton/services/callout) with a real nats-server and simcluster's
TokenRequest and TokenReview: an agent with its pod's token speaks for its node alone;
no token, garbage, an expired token, a deleted pod's, another audience's, another
ServiceAccount's: refused; the services' nkey users never go through the callout."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import nats
import nats.errors
import pytest
from kubernetes_asyncio.client import ApiClient, CoreV1Api

from baton.libs.bus import Bus
from baton.libs.bus.connection import auth_options
from baton.libs.runner import access
from baton.libs.runtime.nkey import account_pair, new_account_seed, public_key
from baton.proto import subjects
from baton.proto.codec import encode
from baton.proto.telemetry import Heartbeat
from baton.services.bridge import main as bridge
from baton.services.callout import main as callout
from baton.services.callout import shell as callout_shell
from baton.services.callout.core import claims
from baton.services.cli.natsconfig import run as nats_config
from baton.services.cli.natsconfig import seed_path, specs
from baton.services.gang import main as gang
from tests.connected.test_nats_auth import hello, write_seeds
from tests.pipeline import running, stop, until
from tests.support.nats import running_nats
from tests.support.sim import Sim, running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(120)]
C = "c1"
NS = "baton-agent"  # where deploy/ runs the agents
SA = "baton-agent"
A, B = "gpu-0", "gpu-1"


@dataclass
class Setup:
    server: str
    seeds: dict[str, str]
    sim: Sim
    client: ApiClient
    folder: Path

    @property
    def core(self) -> CoreV1Api:
        return CoreV1Api(self.client)

    async def pod(self, name: str, node: str, *, service_account: str = SA) -> None:
        pod = {"metadata": {"name": name, "namespace": NS},
               "spec": {"nodeName": node, "serviceAccountName": service_account,
                        "containers": [{"name": "agent", "image": "baton"}]}}  # fmt: skip
        await self.core.create_namespaced_pod(NS, pod)

    async def token(
        self, pod: str, *, audience: str = "nats", seconds: int = 600, service_account: str = SA
    ) -> str:
        """A TokenRequest bound to ``pod``, as the kubelet asks for a projected volume."""
        bound = {"kind": "Pod", "apiVersion": "v1", "name": pod}
        body = {"spec": {"audiences": [audience], "expirationSeconds": seconds,
                         "boundObjectRef": bound}}  # fmt: skip
        answer = await self.core.create_namespaced_service_account_token(service_account, NS, body)
        token: str = answer.status.token
        return token

    def token_file(self, token: str) -> str:
        path = self.folder / f"token-{secrets.token_hex(4)}"
        path.write_text(token)
        return str(path)


@contextlib.asynccontextmanager
async def callout_nats(tmp_path: Path, *, serve_callout: bool = True) -> AsyncIterator[Setup]:
    """simcluster with nodes A and B and the agents' namespace; NATS configured as
    ``baton nats-config --callout`` does; the callout running (unless told not to)."""
    found = access.users(specs(), C, callout=True)
    issuer = new_account_seed()
    issuer_file = tmp_path / "issuer"
    issuer_file.write_text(issuer)
    issuer_key = account_pair(issuer).public_key.decode()
    config = access.server_config(found, host="127.0.0.1", store_dir=None,
                                  callout_issuer=issuer_key)  # fmt: skip
    path = tmp_path / "nats.conf"
    path.write_text(json.dumps(config))
    seeds = write_seeds(tmp_path, found)
    async with running_sim() as sim, running_nats(config=path) as server:
        client = await sim.api_client()
        setup = Setup(server, seeds, sim, client, tmp_path)
        await setup.core.create_namespace({"metadata": {"name": NS}})
        for node in (A, B):
            await setup.core.create_node({"metadata": {"name": node}})
        try:
            if not serve_callout:
                yield setup
                return
            async with serving_callout(setup):
                yield setup
        finally:
            await client.close()


@contextlib.asynccontextmanager
async def serving_callout(setup: Setup) -> AsyncIterator[None]:
    """One callout replica of ``setup``'s NATS, from start (subscribed) to stop."""
    settings = callout.Settings(nats_url=setup.server, cluster=C, ops_port=0,
                                nats_nkey_seed_file=setup.seeds["callout"],
                                issuer_seed_file=str(setup.folder / "issuer"),
                                kick_seed_file=setup.seeds[access.CALLOUT_KICK],
                                kubeconfig=setup.sim.kubeconfig)  # fmt: skip
    ready = asyncio.Event()
    task = asyncio.create_task(callout.serve(settings, ready=ready), name="callout")
    try:
        await until(lambda: ready.is_set() or task.done(), what="the callout subscribed")
        if task.done():
            task.result()
        yield
    finally:
        await stop(task, within=10.0, what="callout")


class Violations:
    """A plain client with a token that records the server's permission errors."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    async def connect(self, url: str, token: str, node: str) -> nats.NATS:
        async def on_error(exc: Exception) -> None:
            self.errors.append(str(exc).lower())

        return await nats.connect(url, error_cb=on_error, allow_reconnect=False, token=token,
                                  inbox_prefix=access.agent_inbox(node))  # fmt: skip

    def saw(self, subject: str) -> bool:
        return any("permissions violation" in e and subject.lower() in e for e in self.errors)


async def test_an_agent_with_its_pods_token_speaks_for_its_node_alone(tmp_path: Path) -> None:
    async with callout_nats(tmp_path) as setup:
        admin = await Bus.connect(setup.server, cluster=C, name="test",
                                  seed_file=setup.seeds["admin"])  # fmt: skip
        await admin.ensure_streams()
        await setup.pod("agent-a", A)
        token = await setup.token("agent-a")
        token_file = setup.token_file(token)
        agent = await Bus.connect(setup.server, cluster=C, name="agent-gpu-0",
                                  token_file=token_file, inbox=access.agent_inbox(A))  # fmt: skip
        beat = Heartbeat(node=A, at=1.0, seq=1, started=1.0)
        await agent.publish(subjects.telemetry(C, "heartbeat", A), beat)  # its own: stored
        own = subjects.node_limits(C, A)
        await admin.js.publish(own, b'{"limits": "for gpu-0"}')
        got = await agent.js.get_last_msg(subjects.stream_name(C, "limits"), own, direct=True)
        assert got.data == b'{"limits": "for gpu-0"}'  # its own limits, over its own inbox
        violations = Violations()
        nc = await violations.connect(setup.server, token, A)
        other = subjects.telemetry(C, "heartbeat", B)
        with pytest.raises(nats.errors.TimeoutError):
            await nc.jetstream().publish(other, encode(beat), timeout=1.0)
        await nc.subscribe(subjects.node_limits(C, B))
        await until(lambda: violations.saw(other), what="node B's telemetry refused")
        await until(lambda: violations.saw(subjects.node_limits(C, B)),
                    what="node B's limits refused")  # fmt: skip
        stored = await admin.snapshot(subjects.wildcard(C, subjects.TELEMETRY, ">"), Heartbeat)
        assert [b.node for b in stored] == [A]
        await nc.close()
        await agent.close()
        await admin.close()


async def test_no_bad_expired_deleted_or_foreign_token_gets_in(tmp_path: Path) -> None:
    """Each refused; the good token, presented the same way, is let in (so the way of
    presenting it is not what fails)."""
    async with callout_nats(tmp_path) as setup:
        setup.sim.server.tokens.min_expiration_s = 1  # an expired token, in a second
        await setup.pod("agent-a", A)
        await setup.pod("agent-b", B)
        await setup.pod("other-sa", A, service_account="default")
        good = await setup.token("agent-a")
        expired = await setup.token("agent-a", seconds=1)
        deleted = await setup.token("agent-b")
        await setup.core.delete_namespaced_pod("agent-b", NS, grace_period_seconds=0)
        await until(lambda: _gone(setup, "agent-b"), what="pod agent-b deleted")
        refused = {
            "no token": {},
            "garbage": {"auth_token": "not-a-token"},
            "a forged JWT-shaped token": {"auth_token": _forged(good)},
            "another audience": {"auth_token": await setup.token("agent-a", audience="api")},
            "another ServiceAccount": {
                "auth_token": await setup.token("other-sa", service_account="default")
            },
            "a deleted pod's": {"auth_token": deleted},
        }
        exp = _exp(expired)
        await until(lambda: time.time() > exp + 0.1, what="the short token expired")
        refused["expired"] = {"auth_token": expired}
        for why, creds in refused.items():
            said = await hello(setup.server, creds)
            assert "authorization violation" in said.lower(), (why, said)
        assert (await hello(setup.server, {"auth_token": good})).startswith("PONG")


def _gone(setup: Setup, pod: str) -> bool:
    try:
        setup.sim.store.get("pods", NS, pod)
    except Exception:
        return True
    return False


def _exp(token: str) -> float:
    payload = token.split(".")[1]
    return float(json.loads(claims.unb64(payload))["exp"])


def _forged(token: str) -> str:
    """``token`` with its claims kept and another signature: only the API server's
    review (not the token's look) may vouch for it."""
    header, payload, _ = token.split(".")
    return f"{header}.{payload}.{claims.b64(secrets.token_bytes(64))}"


async def test_services_with_their_nkeys_never_wait_for_the_callout(tmp_path: Path) -> None:
    """No callout running: gang with its seed connects, leads and ticks; the operator's
    seed is let in; a token is not (nobody answers for it)."""
    async with callout_nats(tmp_path, serve_callout=False) as setup:
        admin = await Bus.connect(setup.server, cluster=C, name="test",
                                  seed_file=setup.seeds["admin"])  # fmt: skip
        await admin.ensure_streams()
        settings = gang.Settings(cluster=C, cycle_interval=0.1,
                                 nats_nkey_seed_file=setup.seeds["gang"])  # fmt: skip
        async with running(gang.SPEC, setup.server, settings, cluster=C) as runner:
            await until(lambda: runner.ready and runner.leader, what="gang ready, leading")
            started = await until(
                lambda: admin.snapshot(subjects.runner(C, "started", "gang"), msgspec.Raw),
                what="gang's start record",
            )
            assert started
        await admin.close()
        creds = _nkey_creds(setup.seeds["bandwidth"])
        assert (await hello(setup.server, creds)).startswith("PONG")
        await setup.pod("agent-a", A)
        said = await hello(setup.server, {"auth_token": await setup.token("agent-a")}, within=15)
        assert "authorization violation" in said.lower(), said


def _nkey_creds(seed_file: str) -> dict[str, Any]:
    seed = Path(seed_file).read_text().strip()
    return {"signer": seed, "nkey": public_key(seed)}


async def test_an_agent_moves_to_its_rotated_token_before_the_old_one_expires(
    tmp_path: Path,
) -> None:
    """The user lives no longer than its token, and NATS closes the connection then
    (nats-py does not come back from that): the agent reconnects as soon as the kubelet
    writes the new token, so it is still connected once the old one has expired."""
    async with callout_nats(tmp_path) as setup:
        setup.sim.server.tokens.min_expiration_s = 1
        admin = await Bus.connect(setup.server, cluster=C, name="test",
                                  seed_file=setup.seeds["admin"])  # fmt: skip
        await admin.ensure_streams()
        await setup.pod("agent-a", A)
        short = await setup.token("agent-a", seconds=4)
        token_file = setup.token_file(short)
        agent = await Bus.connect(setup.server, cluster=C, name="agent-gpu-0",
                                  token_file=token_file, inbox=access.agent_inbox(A),
                                  token_check_s=0.1)  # fmt: skip
        assert agent.nc.stats["reconnects"] == 0
        _rotate(token_file, await setup.token("agent-a"))  # as the kubelet does
        await until(lambda: agent.nc.stats["reconnects"] >= 1 and agent.nc.is_connected,
                    what="reconnected with the new token")  # fmt: skip
        exp = _exp(short)
        await until(lambda: time.time() > exp + 1.5, what="the old token expired", within=15)
        assert agent.nc.is_connected and agent.nc.stats["reconnects"] == 1, agent.nc.last_error
        beat = Heartbeat(node=A, at=1.0, seq=1, started=1.0)
        await agent.publish(subjects.telemetry(C, "heartbeat", A), beat)
        stored = await admin.snapshot(subjects.wildcard(C, subjects.TELEMETRY, ">"), Heartbeat)
        assert [b.node for b in stored] == [A]
        await agent.close()
        await admin.close()


def _rotate(path: str, token: str) -> None:
    Path(path).write_text(token)


async def test_the_operator_never_sees_an_agents_token_on_the_callouts_subject(
    tmp_path: Path,
) -> None:
    """The server hands each CONNECT to the callout with the agent's token in the clear:
    admin (everything else allowed) may neither read those requests nor send one."""
    async with callout_nats(tmp_path) as setup:
        errors: list[str] = []

        async def on_error(exc: Exception) -> None:
            errors.append(str(exc).lower())

        admin = await nats.connect(setup.server, error_cb=on_error, allow_reconnect=False,
                                   **auth_options(seed_file=setup.seeds["admin"]))  # fmt: skip
        seen: list[bytes] = []

        async def keep(msg: Any) -> None:
            seen.append(msg.data)

        await admin.subscribe(access.AUTH_REQUESTS, cb=keep)
        await admin.subscribe(">", cb=keep)
        await admin.publish(access.AUTH_REQUESTS, b"forged")
        await admin.flush()
        await setup.pod("agent-a", A)
        token = await setup.token("agent-a")
        said = await hello(setup.server, {"auth_token": token})
        assert said.startswith("PONG"), said  # the callout got the request and let it in

        def refused(what: str) -> bool:
            return any(
                "permissions violation" in e and what in e and access.AUTH_REQUESTS.lower() in e
                for e in errors
            )

        await until(lambda: refused("subscription"), what="admin's subscription refused")
        await until(lambda: refused("publish"), what="admin's publish refused")
        assert not any(token.encode() in data for data in seen)
        await admin.close()


@contextlib.asynccontextmanager
async def running_bridge(setup: Setup) -> AsyncIterator[None]:
    """The bridge with its own seed, watching simcluster: pods' deletions reach the bus."""
    bus = await Bus.connect(setup.server, cluster=C, name="bridge",
                            seed_file=setup.seeds["bridge"])  # fmt: skip
    settings = bridge.Settings(cluster=C, nats_nkey_seed_file=setup.seeds["bridge"])
    runner = bridge.runner(bus, setup.client, settings)
    task = asyncio.create_task(runner.run(), name="bridge")
    try:
        await until(lambda: runner.ready or task.done(), what="bridge ready", within=30)
        if task.done():
            task.result()
        yield
    finally:
        await stop(task, within=15.0, what="bridge")
        await bus.close()


async def test_an_agent_is_disconnected_when_its_pod_goes_and_cannot_come_back(
    tmp_path: Path,
) -> None:
    """Pod agent-a deleted: the bridge says so, the callout has NATS close agent-a's
    connection, and its reconnects with the same (still unexpired) token are refused;
    node B's agent, whose pod stays, keeps its connection and publishes. Then node B
    removed: its agent is closed too."""
    async with callout_nats(tmp_path) as setup:
        admin = await Bus.connect(setup.server, cluster=C, name="test",
                                  seed_file=setup.seeds["admin"])  # fmt: skip
        await admin.ensure_streams()
        agents: dict[str, Bus] = {}
        tokens: dict[str, str] = {}
        try:
            for pod, node in (("agent-a", A), ("agent-b", B)):
                await setup.pod(pod, node)
                tokens[node] = await setup.token(pod)
                agents[node] = await Bus.connect(setup.server, cluster=C, name=f"agent-{node}",
                                                 token_file=setup.token_file(tokens[node]),
                                                 inbox=access.agent_inbox(node))  # fmt: skip
            async with running_bridge(setup):
                await _delete_agents_pod_and_node(setup, agents, tokens)
        finally:
            for agent in agents.values():
                await agent.close()
        await admin.close()


async def _delete_agents_pod_and_node(
    setup: Setup, agents: dict[str, Bus], tokens: dict[str, str]
) -> None:
    await setup.core.delete_namespaced_pod("agent-a", NS, grace_period_seconds=0)
    await until(lambda: not agents[A].nc.is_connected, within=10,
                what="agent-a's connection closed once its pod was deleted")  # fmt: skip
    said = await hello(setup.server, {"auth_token": tokens[A]})
    assert "authorization violation" in said.lower(), said  # the same token: refused
    assert not agents[A].nc.is_connected and agents[A].nc.stats["reconnects"] == 0
    beat = Heartbeat(node=B, at=1.0, seq=1, started=1.0)
    await agents[B].publish(subjects.telemetry(C, "heartbeat", B), beat)
    assert agents[B].nc.is_connected  # its pod stays: it does
    await setup.core.delete_node(B)
    await until(lambda: not agents[B].nc.is_connected, within=10,
                what="agent-b's connection closed once its node was removed")  # fmt: skip


async def test_the_kick_user_of_an_included_auth_only_config_closes_a_client(
    tmp_path: Path,
) -> None:
    """``deploy/``'s way: nats.conf includes ``nats-config --callout --auth-only``'s
    file; its ``callout-kick`` user (system account) closes a client by its id, and
    is told when there is no such client."""
    creds = tmp_path / "creds"
    out = tmp_path / "auth.conf"
    assert nats_config(["--cluster", C, "--credentials", str(creds), "--callout",
                        "--auth-only", "--out", str(out)]) == 0  # fmt: skip
    conf = tmp_path / "nats.conf"
    conf.write_text("include auth.conf\n")
    async with running_nats(config=conf) as server:
        closed = asyncio.Event()

        async def on_closed() -> None:
            closed.set()

        admin_seed = str(seed_path(creds, "admin"))
        admin = await nats.connect(server, allow_reconnect=False, closed_cb=on_closed,
                                   **auth_options(seed_file=admin_seed))  # fmt: skip
        kick_seed = str(seed_path(creds, access.CALLOUT_KICK))
        kicker = await nats.connect(server, **auth_options(seed_file=kick_seed))
        try:
            server_id = admin._server_info["server_id"]
            said = await callout_shell.nats_kicker(kicker)(server_id, admin.client_id or 0)
            assert said == ""
            await until(closed.is_set, what="the kicked client closed")
            assert "no such client" in (await callout_shell.nats_kicker(kicker)(server_id, 999_999))
        finally:
            await kicker.close()
            await admin.close()


async def test_a_restarted_callout_closes_the_agents_whose_pods_went_while_it_was_away(
    tmp_path: Path,
) -> None:
    """The callout that let agents A and B in stops; agent-a's pod is deleted meanwhile,
    with no bridge to say so on the bus. A new callout, which let no one in, reads every
    server's connections at start and closes agent-a's; agent-b's pod stays, and so does
    its connection, until that pod goes: the new callout knows it and closes it then."""
    async with callout_nats(tmp_path, serve_callout=False) as setup:
        admin = await Bus.connect(setup.server, cluster=C, name="test",
                                  seed_file=setup.seeds["admin"])  # fmt: skip
        await admin.ensure_streams()  # the bridge's
        await admin.close()
        agents: dict[str, Bus] = {}
        try:
            async with serving_callout(setup):
                for pod, node in (("agent-a", A), ("agent-b", B)):
                    await setup.pod(pod, node)
                    token_file = setup.token_file(await setup.token(pod))
                    agents[node] = await Bus.connect(setup.server, cluster=C, name=f"agent-{node}",
                                                     token_file=token_file,
                                                     inbox=access.agent_inbox(node))  # fmt: skip
            await setup.core.delete_namespaced_pod("agent-a", NS, grace_period_seconds=0)
            assert agents[A].nc.is_connected  # no callout, no bridge: nothing closed it
            async with serving_callout(setup):
                await until(lambda: not agents[A].nc.is_connected, within=10,
                            what="agent-a closed by the new callout's resync at start")  # fmt: skip
                assert agents[B].nc.is_connected  # its pod is there
                async with running_bridge(setup):
                    await setup.core.delete_namespaced_pod("agent-b", NS, grace_period_seconds=0)
                    await until(lambda: not agents[B].nc.is_connected, within=10,
                                what="agent-b closed once its pod went, by a callout that "
                                "never let it in")  # fmt: skip
        finally:
            for agent in agents.values():
                await agent.close()


async def test_a_kick_user_that_may_not_list_connections_is_named_not_taken_for_no_agents(
    tmp_path: Path,
) -> None:
    """A configuration generated before the resync: its ``callout-kick`` may only KICK,
    so no server answers CONNZ; the resync says what to do instead of finding nothing."""
    creds = tmp_path / "creds"
    out = tmp_path / "auth.conf"
    assert nats_config(["--cluster", C, "--credentials", str(creds), "--callout",
                        "--auth-only", "--out", str(out)]) == 0  # fmt: skip
    text = re.sub(r',\s*"\$SYS\.REQ\.SERVER\.\*\.CONNZ"', "", out.read_text())
    assert "CONNZ" not in text  # as the older configuration had it
    out.write_text(text)
    conf = tmp_path / "nats.conf"
    conf.write_text("include auth.conf\n")
    async with running_nats(config=conf) as server:
        kick_seed = str(seed_path(creds, access.CALLOUT_KICK))
        kicker = await nats.connect(server, **auth_options(seed_file=kick_seed))
        try:
            with pytest.raises(RuntimeError, match="run baton nats-config --callout again"):
                await callout_shell.nats_lister(kicker, gather_s=0.5)()
        finally:
            await kicker.close()
