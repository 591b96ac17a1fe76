"""NATS with the users ``baton nats-config`` generates (nkeys): a client without the
right cannot publish an action and the actuator never sees one; services with their own
seeds still work; a node agent reaches only its own node's subjects; over TLS, a client
without the CA cannot connect."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import nats
import nats.errors
import nkeys
import pytest
from kubernetes_asyncio.client import CoreV1Api

from baton.libs.bus import Bus
from baton.libs.bus.connection import auth_options
from baton.libs.runner import access
from baton.libs.runtime.nkey import new_user_seed, public_key
from baton.proto import subjects
from baton.proto.actions import ActionResult, SetTaint, action_subject
from baton.proto.codec import encode
from baton.proto.k8s import Taint
from baton.proto.telemetry import Heartbeat
from baton.services.actuator import core as actuator_core
from baton.services.actuator import main as actuator
from baton.services.actuator.calling import Api
from baton.services.admission import main as admission
from baton.services.bandwidth import main as bandwidth
from baton.services.cli.natsconfig import seed_path, specs, write_credentials
from baton.services.gang import main as gang
from baton.services.health import main as health
from baton.services.reporter import main as reporter
from tests.pipeline import running, stop, until
from tests.support.actions import take_lease
from tests.support.nats import running_nats
from tests.support.sim import running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(90)]
C = "c1"
NODE = "gpu-0"


@dataclass
class Secured:
    server: str  # nats://127.0.0.1:PORT
    seeds: dict[str, str]  # user -> its nkey seed file (baton nats-config --credentials)

    def seed(self, user: str) -> str:
        return self.seeds[user]

    def seed_text(self, user: str) -> str:
        return Path(self.seeds[user]).read_text().strip()

    async def bus(self, user: str, *, name: str = "") -> Bus:
        return await Bus.connect(self.server, cluster=C, name=name or user,
                                 seed_file=self.seeds[user])  # fmt: skip


def write_seeds(tmp_path: Path, found: list[access.User]) -> dict[str, str]:
    folder = tmp_path / "creds"
    write_credentials(folder, found)
    return {u.name: str(seed_path(folder, u.name)) for u in found}


@contextlib.asynccontextmanager
async def secured_nats(tmp_path: Path) -> AsyncIterator[Secured]:
    found = access.users(specs(), C, nodes=[NODE, "gpu-1"], fleet=True)
    config = tmp_path / "nats.conf"
    config.write_text(json.dumps(access.server_config(found, host="127.0.0.1", store_dir=None)))
    async with running_nats(config=config) as server:
        yield Secured(server, write_seeds(tmp_path, found))


class Violations:
    """A plain client that records the server's permission errors."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    async def connect(self, url: str, seed_file: str) -> nats.NATS:
        async def on_error(exc: Exception) -> None:
            self.errors.append(str(exc))

        return await nats.connect(url, error_cb=on_error, allow_reconnect=False,
                                  **auth_options(seed_file=seed_file))  # fmt: skip

    def saw(self, subject: str) -> bool:
        found = [e.lower() for e in self.errors]  # nats-py lowercases the server's error
        return any("permissions violation" in e and subject.lower() in e for e in found)


def taint(id_: str, node: str, *, by: str) -> SetTaint:
    return SetTaint(id=id_, by=by, at=0.0, node=node, priority="health",
                    taint=Taint(key=f"test/{id_}", value="x", effect="NoSchedule"))  # fmt: skip


async def test_a_client_without_credentials_is_refused(tmp_path: Path) -> None:
    """No credentials, a password, another key signing for the actuator's, an unknown
    key: refused. The actuator's own seed signing the server's nonce: let in."""
    async with secured_nats(tmp_path) as nats_:
        actuator = nats_.seed_text("actuator")
        stranger = new_user_seed()
        for creds in ({}, {"user": "actuator", "pass": "anything"},
                      {"signer": stranger, "nkey": public_key(actuator)},
                      {"signer": stranger, "nkey": public_key(stranger)}):  # fmt: skip
            assert "authorization violation" in (await hello(nats_.server, creds)).lower(), creds
        good = {"signer": actuator, "nkey": public_key(actuator)}
        assert (await hello(nats_.server, good)).startswith("PONG")


async def hello(server: str, creds: dict[str, str], *, within: float = 5.0) -> str:
    """The server's answer to CONNECT (with ``creds``; ``signer``: the seed that signs
    the server's nonce) and PING, over a plain socket: PONG or its -ERR."""
    host, port = server.removeprefix("nats://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        info = json.loads((await reader.readline()).decode().removeprefix("INFO "))
        creds = dict(creds)
        if signer := creds.pop("signer", ""):
            pair = nkeys.from_seed(bytearray(signer.encode()))
            creds["sig"] = base64.b64encode(pair.sign(info["nonce"].encode())).decode()
        connect = {"verbose": False, "pedantic": False, "protocol": 1, **creds}
        writer.write(f"CONNECT {json.dumps(connect)}\r\nPING\r\n".encode())
        await writer.drain()
        async with asyncio.timeout(within):
            while True:
                # The server's own PING (it measures each client's round trip) or a
                # new INFO may come before its answer to ours; neither is the answer.
                line = (await reader.readline()).decode()
                if line != "PING\r\n" and not line.startswith("INFO "):
                    return line
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def test_only_a_service_allowed_to_publish_an_action_gets_it_applied(tmp_path: Path) -> None:
    async with secured_nats(tmp_path) as nats_, running_sim() as sim:
        client = await sim.api_client()
        core_api = CoreV1Api(client)
        for node in (NODE, "gpu-1"):
            await core_api.create_node({"metadata": {"name": node}})
        admin = await nats_.bus("admin", name="test")
        await admin.ensure_streams()
        bus = await nats_.bus("actuator")
        limits = actuator_core.Limits(qps=0, backoff_base=0.05)
        runner = actuator.runner(bus, actuator.Settings(cluster=C, qps=0),
                                 api=Api(client, tries=2, base=0.01), limits=limits)  # fmt: skip
        task = asyncio.create_task(runner.run(), name="actuator")
        violations = Violations()
        try:
            # Forged: the gang may bind and evict gangs, health mark nodes, never taint; an
            # agent may publish only telemetry; the bridge only Kubernetes objects.
            forged = [("gang", "forged-gang"), ("health", "forged-health"),
                      ("agent-gpu-0", "forged-agent"), ("bridge", "forged-bridge"),
                      ("agent-fleet", "forged-fleet")]  # fmt: skip
            for user, id_ in forged:
                nc = await violations.connect(nats_.server, nats_.seed(user))
                action = taint(id_, "gpu-1", by="health")
                subject = action_subject(C, action)
                # the server drops it and says so (waiting out a JetStream ack that never
                # comes would cost a second each); the stream's count below shows none stored
                await nc.publish(subject, encode(action))
                await until(lambda s=subject: violations.saw(s),  # type: ignore[misc]
                            what=f"a permission violation for {user}")  # fmt: skip
                await nc.close()
            # Allowed: admission taints nodes (team pools); the actuator applies it.
            admission = await nats_.bus("admission")
            allowed = taint("allowed", "gpu-1", by="admission")
            allowed = msgspec.structs.replace(allowed, epoch=await take_lease(admin, "admission"))
            await admission.publish(action_subject(C, allowed), allowed, msg_id=allowed.id)
            await admission.close()
            results: list[ActionResult] = await collect_results(admin, want=1)
            assert [r.action_id for r in results] == ["allowed"], results
            node = client.sanitize_for_serialization(await core_api.read_node("gpu-1"))
            keys = [t["key"] for t in node["spec"].get("taints") or []]
            assert keys == ["test/allowed"], keys
            # Nothing forged reached the actions stream at all.
            info = await admin.js.stream_info(subjects.stream_name(C, "actions"))
            assert info.state.messages == 1, info.state
        finally:
            await stop(task, within=15.0, what="actuator")
            await bus.close()
            await admin.close()
            await client.close()


async def collect_results(bus: Bus, *, want: int, within: float = 20.0) -> list[ActionResult]:
    got: list[ActionResult] = []
    async with bus.consume(subjects.wildcard(C, subjects.RESULT, ">"), type_=ActionResult) as sub:
        async with asyncio.timeout(within):
            async for msg in sub:
                await msg.ack()
                got.append(msg.event)
                if len(got) >= want:
                    break
    return got


@pytest.mark.parametrize(
    ("spec", "settings"),
    [
        (gang.SPEC, gang.Settings(cluster=C, cycle_interval=0.1)),
        (reporter.SPEC, reporter.Settings(cluster=C)),
        (admission.SPEC, admission.Settings(cluster=C)),
        (health.SPEC, health.Settings(cluster=C)),
        (bandwidth.SPEC, bandwidth.Settings(cluster=C)),
    ],
    ids=["gang", "reporter", "admission", "health", "bandwidth"],
)
async def test_a_service_with_its_generated_credentials_starts_leads_and_ticks(
    tmp_path: Path, spec: Any, settings: Any
) -> None:
    async with secured_nats(tmp_path) as nats_:
        admin = await nats_.bus("admin", name="test")
        await admin.ensure_streams()
        settings = msgspec.structs.replace(settings, nats_nkey_seed_file=nats_.seed(spec.name))
        async with running(spec, nats_.server, settings, cluster=C) as runner:
            await until(lambda: runner.ready and runner.leader, what=f"{spec.name} ready, leading")
            started = await until(
                lambda: admin.snapshot(subjects.runner(C, "started", spec.name), msgspec.Raw),
                what=f"{spec.name}'s start record",
            )
            assert started
        await admin.close()


async def test_a_node_agent_reaches_only_its_own_nodes_subjects(tmp_path: Path) -> None:
    async with secured_nats(tmp_path) as nats_:
        admin = await nats_.bus("admin", name="test")
        await admin.ensure_streams()
        agent = await nats_.bus("agent-gpu-0")
        beat = Heartbeat(node=NODE, at=1.0, seq=1, started=1.0)
        await agent.publish(subjects.telemetry(C, "heartbeat", NODE), beat)  # its own: stored
        own = subjects.node_limits(C, NODE)
        await admin.js.publish(own, b'{"limits": "for gpu-0"}')
        got = await agent.js.get_last_msg(subjects.stream_name(C, "limits"), own, direct=True)
        assert got.data == b'{"limits": "for gpu-0"}'  # its own limits: readable
        violations = Violations()
        nc = await violations.connect(nats_.server, nats_.seed("agent-gpu-0"))
        other = subjects.telemetry(C, "heartbeat", "gpu-1")
        with pytest.raises(nats.errors.TimeoutError):
            await nc.jetstream().publish(other, encode(beat), timeout=1.0)
        # It may not read another node's limits, nor create consumers.
        await nc.subscribe(subjects.node_limits(C, "gpu-1"))
        with pytest.raises(nats.errors.TimeoutError):
            await nc.jetstream(timeout=1.0).stream_info(subjects.stream_name(C, "actions"))
        await until(lambda: violations.saw(other), what="the other node's telemetry refused")
        await until(lambda: violations.saw(subjects.node_limits(C, "gpu-1")),
                    what="the other node's limits refused")  # fmt: skip
        stored = await admin.snapshot(subjects.wildcard(C, subjects.TELEMETRY, ">"), Heartbeat)
        assert [b.node for b in stored] == [NODE]
        await nc.close()
        await agent.close()
        await admin.close()


async def test_services_connect_over_tls_and_a_client_without_the_ca_cannot(
    tmp_path: Path,
) -> None:
    """NATS serving TLS with a certificate made here (as ``baton nats-tls`` makes it): gang
    with its seed and the CA connects, leads and ticks; the bridge's objects are stored;
    a client with the right seed but without the CA is refused by its own TLS check."""
    from baton.services.admission.certificates import self_signed

    cert, key = self_signed(str(tmp_path / "tls"), hosts=("127.0.0.1",), days=1)
    found = access.users(specs(), C)
    config = access.server_config(found, host="127.0.0.1", store_dir=None,
                                  tls={"cert_file": cert, "key_file": key})  # fmt: skip
    path = tmp_path / "nats.conf"
    path.write_text(json.dumps(config))
    seeds = write_seeds(tmp_path, found)
    async with running_nats(config=path) as server:
        tls_server = server.replace("nats://", "tls://")
        admin = await Bus.connect(tls_server, cluster=C, name="test", ca_file=cert,
                                  seed_file=seeds["admin"])  # fmt: skip
        await admin.ensure_streams()
        settings = gang.Settings(cluster=C, cycle_interval=0.1, nats_ca_file=cert,
                                 nats_nkey_seed_file=seeds["gang"])  # fmt: skip
        async with running(gang.SPEC, tls_server, settings, cluster=C) as runner:
            await until(lambda: runner.ready and runner.leader, what="gang ready over TLS")
            assert runner.bus.nc.connected_url is not None
            assert runner.bus.nc.connected_url.scheme == "tls"
        bridge = await Bus.connect(tls_server, cluster=C, name="bridge", ca_file=cert,
                                   seed_file=seeds["bridge"])  # fmt: skip
        beat = Heartbeat(node=NODE, at=1.0, seq=1, started=1.0)
        subject = subjects.subject(C, subjects.K8S, "node", NODE)
        await bridge.js.publish(subject, encode(beat))  # stored: the bridge may publish objects
        assert (await admin.js.stream_info(subjects.stream_name(C, "k8s"))).state.messages == 1
        await bridge.close()
        for url in (tls_server, server):  # tls://, and nats:// upgraded as the server asks
            options = auth_options(seed_file=seeds["bridge"])  # the right key, no CA
            with pytest.raises((ssl.SSLError, nats.errors.NoServersError)) as refused:
                await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0,
                                   connect_timeout=2, **options)  # fmt: skip
            if isinstance(refused.value, nats.errors.NoServersError):  # nats-py hides the cause
                assert "certificate verify failed" in caplog_text(refused.value), refused.value
        await admin.close()


def caplog_text(exc: BaseException) -> str:
    """The chain of causes of ``exc``, as text."""
    said = []
    while exc is not None:
        said.append(repr(exc))
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return " ".join(said)


async def test_only_the_actuator_may_change_a_streams_configuration(tmp_path: Path) -> None:
    """A RePublish on EVENTS would turn gang's placement decisions into taint actions
    (ACTIONS captures what is republished): only the actuator may change a stream."""
    import dataclasses

    from nats.js.api import RePublish

    from baton.libs.bus import streams

    async with secured_nats(tmp_path) as nats_:
        admin = await nats_.bus("admin", name="test")
        await admin.ensure_streams()
        events = next(c for c in streams.stream_configs(C)
                      if c.name == subjects.stream_name(C, "events"))  # fmt: skip
        hostile = dataclasses.replace(
            events, republish=RePublish(src="baton.c1.placement.>", dest="baton.c1.action.taint.>")
        )
        violations = Violations()
        nc = await violations.connect(nats_.server, nats_.seed("gang"))
        with pytest.raises(nats.errors.TimeoutError):
            await nc.jetstream(timeout=1.0).update_stream(hostile)
        await until(lambda: violations.saw(f"$JS.API.STREAM.UPDATE.{events.name}"),
                    what="the update refused")  # fmt: skip
        await nc.close()
        info = await admin.js.stream_info(events.name or "")
        assert info.config.republish is None
        # Nor may it make a stream of its own choosing first (nor a KV bucket).
        nc = await violations.connect(nats_.server, nats_.seed("gang"))
        mine = dataclasses.replace(events, name="MINE", subjects=["baton.c1.placement.x"])
        with pytest.raises(nats.errors.TimeoutError):
            await nc.jetstream(timeout=1.0).add_stream(mine)
        await until(lambda: violations.saw("$JS.API.STREAM.CREATE.MINE"), what="create refused")
        await nc.close()
        actuator_bus = await nats_.bus("actuator")
        await actuator_bus.js.update_stream(events)  # the actuator may
        await actuator_bus.close()
        await admin.close()


async def test_a_push_consumer_cannot_deliver_a_decision_into_the_actions_stream(
    tmp_path: Path,
) -> None:
    """JetStream delivers a push consumer's messages to its deliver subject only once a
    client subscribes to that very subject (a wildcard subscription does not count), and
    the actions stream keeps what arrives on an action subject. No service may subscribe
    to an action subject, and the operator's tools never do (``baton tail`` reads actions
    from their stream); `nats sub 'baton.c1.>'` opens nothing. An operator subscribing to
    one exact action subject would (docs/security.md, "Not enforced yet")."""
    from nats.js.api import ConsumerConfig

    async with secured_nats(tmp_path) as nats_:
        admin = await nats_.bus("admin", name="test")
        await admin.ensure_streams()
        forged = taint("via-push", "gpu-1", by="health")
        target = action_subject(C, forged)
        violations = Violations()
        nc = await violations.connect(nats_.server, nats_.seed("gang"))
        js = nc.jetstream(timeout=2.0)
        await js.publish(subjects.subject(C, subjects.PLACEMENT, "placed", "a", "g"),
                         encode(forged))  # fmt: skip
        events = subjects.stream_name(C, "events")
        push = await js.add_consumer(
            events, ConsumerConfig(deliver_subject=target, ack_policy="none")
        )
        await nc.subscribe(target)  # gang listening there itself: refused
        await until(lambda: violations.saw(target), what="gang's subscription refused")
        await admin.nc.subscribe(subjects.wildcard(C))  # what `nats sub 'baton.c1.>'` does
        await admin.nc.flush()  # the server has the subscription: the consumer saw it
        held = await admin.js.consumer_info(events, push.name)
        assert not held.push_bound and held.delivered.consumer_seq == 0, held  # no listener
        assert held.num_pending == 1, held  # the forged decision waits in the consumer
        actions = subjects.stream_name(C, "actions")
        assert (await admin.js.stream_info(actions)).state.messages == 0
        await admin.nc.subscribe(target)  # the one door left: a subscription on that subject

        async def landed() -> bool:
            return (await admin.js.stream_info(actions)).state.messages > 0

        await until(landed, what="the delivery captured once someone listens on its subject")
        await nc.close()
        await admin.close()


async def test_the_operators_live_tail_reads_actions_from_their_stream(tmp_path: Path) -> None:
    """`baton tail` live on one action subject, with admin's seed: it shows the actions
    published there, read from the actions stream, and so opens no door: a push consumer
    gang makes to deliver its decisions to that subject delivers nothing (a plain
    subscription there would be its listener)."""
    import os
    import signal
    import sys

    from nats.js.api import ConsumerConfig

    async with secured_nats(tmp_path) as nats_:
        admin = await nats_.bus("admin", name="test")
        await admin.ensure_streams()
        admission = await nats_.bus("admission", name="admission")
        action = taint("live", "gpu-1", by="admission")
        target = action_subject(C, action)
        env = {**os.environ, "BATON_NATS_NKEY_SEED_FILE": nats_.seed("admin")}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "baton.services.cli", "tail", "--nats", nats_.server,
            "--cluster", C, target, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert process.stdout is not None and process.stderr is not None
        lines: list[str] = []

        async def read(stream: asyncio.StreamReader) -> None:
            async for line in stream:
                lines.append(line.decode())

        reader = asyncio.create_task(read(process.stdout))
        sent = 0
        try:

            async def shown() -> bool:  # published again until the tail, starting, sees it
                nonlocal sent
                await admission.publish(target, action)
                sent += 1
                await asyncio.sleep(0.2)
                return any(".action.taint." in line for line in lines)

            await until(shown, within=30, what="the live tail showing the action")
            gang = await nats_.bus("gang", name="gang")
            await gang.js.publish(subjects.subject(C, subjects.PLACEMENT, "placed", "a", "g"),
                                  encode(taint("forged", "gpu-1", by="admission")))  # fmt: skip
            events = subjects.stream_name(C, "events")
            push = ConsumerConfig(deliver_subject=target, ack_policy="none")
            made = await gang.js.add_consumer(events, push)
            held = await admin.js.consumer_info(events, made.name)  # the tail is no listener:
            assert not held.push_bound and held.delivered.consumer_seq == 0, held
            actions = subjects.stream_name(C, "actions")
            assert (await admin.js.stream_info(actions)).state.messages == sent
            await gang.close()
            process.send_signal(signal.SIGINT)
            err = await asyncio.wait_for(process.stderr.read(), timeout=30)
            await asyncio.wait_for(process.wait(), timeout=30)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            reader.cancel()
            await admission.close()
            await admin.close()
    assert "Traceback" not in err.decode(), err.decode()


async def _baton(*argv: str, env: dict[str, str]) -> tuple[int, str, str]:
    import sys

    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "baton.services.cli", *argv, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    return process.returncode or 0, out.decode(), err.decode()


async def test_the_inspect_user_reads_the_bus_and_publishes_nothing(tmp_path: Path) -> None:
    """`inspect`'s seed: `baton tail` and `baton status` read the actions stream and the
    cluster's state without a violation; its publish to an action subject, a KV put, an
    ack, a purge, the actuator's consumer and the callout's subject are refused, and the
    actions stream holds only what admission published."""
    import os

    from nats.js.api import ConsumerConfig

    async with secured_nats(tmp_path) as nats_:
        admin = await nats_.bus("admin", name="test")
        await admin.ensure_streams()
        actions = subjects.stream_name(C, "actions")
        await admin.js.add_consumer(actions, ConsumerConfig(durable_name="actuator"))
        admission = await nats_.bus("admission", name="admission")
        action = taint("seen", "gpu-1", by="admission")
        await admission.publish(action_subject(C, action), action)
        await admission.close()
        env = {**os.environ, "BATON_NATS_NKEY_SEED_FILE": nats_.seed("inspect")}
        tail = await _baton("tail", "--nats", nats_.server, "--cluster", C, "action.>",
                            "--since", "10m", "--count", "1", env=env)  # fmt: skip
        status = await _baton("status", "--nats", nats_.server, "--cluster", C, env=env)
        violations = Violations()
        nc = await violations.connect(nats_.server, nats_.seed("inspect"))
        try:
            forged = taint("forged", "gpu-1", by="health")
            target = action_subject(C, forged)
            await nc.publish(target, encode(forged))
            bucket = subjects.stream_name(C, "leases")
            await nc.publish(f"$KV.{bucket}.gang", b"1")
            await nc.publish(f"$JS.ACK.{actions}.actuator.1.1.1.0.0", b"+ACK")
            await nc.publish(f"$JS.API.STREAM.PURGE.{actions}", b"")
            await nc.publish(f"$JS.API.CONSUMER.DELETE.{actions}.actuator", b"")
            await nc.subscribe(access.AUTH_REQUESTS)
            await nc.flush()
            wanted = (target, f"$KV.{bucket}.gang", f"$JS.ACK.{actions}", "STREAM.PURGE",
                      "CONSUMER.DELETE", access.AUTH_REQUESTS)  # fmt: skip

            async def all_refused() -> bool:
                return all(violations.saw(s) for s in wanted)

            await until(all_refused, within=10, what=f"violations for {wanted}")
        finally:
            await nc.close()
        info = await admin.js.stream_info(actions)
        assert info.state.messages == 1  # admission's, nothing of inspect's
        assert (await admin.js.consumer_info(actions, "actuator")).name == "actuator"
        await admin.close()
    code, out, err = tail
    assert code == 0 and ".action.taint." in out and "violation" not in err.lower(), (out, err)
    code, out, err = status
    assert code == 0 and "services" in out and "violation" not in err.lower(), (out, err)
