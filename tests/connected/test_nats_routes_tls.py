"""NATS servers of one cluster route to each other over TLS with the certificate
``baton nats-config --make-tls`` makes, and refuse a server whose certificate another
CA signed (deploy/base/nats.yaml's ``cluster { tls {} }``). Real nats-servers."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import nats
import pytest

from baton.services.cli.natsconfig import make_tls
from tests.pipeline import until
from tests.support.nats import running_nats

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]
HOSTS = ["localhost", "127.0.0.1"]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports: each socket is held until all are chosen (ports
    picked one at a time could repeat, and a server's monitor then take its own route
    port)."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]


@contextlib.asynccontextmanager
async def server(
    folder: Path, name: str, tls: Path, ca: Path, ports: tuple[int, int], routes: list[int]
) -> AsyncIterator[Server]:
    """A nats-server of the cluster "baton" on ``ports`` (route, monitoring) routing to
    ``routes``; its log is read by ``Server.refused`` and its monitoring port answers
    ``Server.routes``."""
    port, monitor = ports
    config = {
        "server_name": name,
        "http": f"127.0.0.1:{monitor}",
        "cluster": {
            "name": "baton",
            "host": "127.0.0.1",
            "port": port,
            "routes": [f"nats://localhost:{p}" for p in routes],
            "tls": {"cert_file": str(tls / "tls.crt"), "key_file": str(tls / "tls.key"),
                    "ca_file": str(ca), "verify": True, "timeout": 2},
        },
    }  # fmt: skip
    path = folder / f"{name}.conf"
    path.write_text(json.dumps(config))
    log = folder / f"{name}.log"
    async with running_nats(config=path, store_dir=folder / name, log=log) as url:
        yield Server(url=url, log=log, monitor=monitor)


@dataclass
class Server:
    url: str
    log: Path
    monitor: int

    def refused(self) -> int:
        """How many route connections this server closed for a failed TLS handshake."""
        return self.log.read_text().count("Router connection closed: TLS Handshake Failure")

    async def routes(self) -> list[str]:
        """The names of the servers this one has routes to (``/routez``)."""
        url = f"http://127.0.0.1:{self.monitor}/routez"
        async with aiohttp.ClientSession() as http, http.get(url) as response:
            found = (await response.json())["routes"] or []
        return sorted({route["remote_name"] for route in found})


async def delivered(source: str, target: str, subject: str) -> bool:
    """A message published on ``source`` reaches a subscriber on ``target``."""
    sub_nc, pub_nc = await nats.connect(target), await nats.connect(source)
    try:
        sub = await sub_nc.subscribe(subject)
        await sub_nc.flush()
        for _ in range(20):  # interest crosses the route a moment after the subscription
            await pub_nc.publish(subject, b"x")
            await pub_nc.flush()
            try:
                await sub.next_msg(timeout=0.25)
                return True
            except nats.errors.TimeoutError:
                continue
        return False
    finally:
        await sub_nc.close()
        await pub_nc.close()


async def test_servers_route_over_tls_and_refuse_a_peer_another_ca_signed(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ca = make_tls(ours, HOSTS)
    make_tls(theirs, HOSTS)  # a certificate for the same names, from another CA
    a, b, c, *monitors = free_ports(6)
    async with (
        server(tmp_path, "a", ours, ca, (a, monitors[0]), [b]) as server_a,
        server(tmp_path, "b", ours, ca, (b, monitors[1]), [a]) as server_b,
        server(tmp_path, "c", theirs, theirs / "ca.crt", (c, monitors[2]), [a, b]) as server_c,
    ):
        await until(lambda: delivered(server_a.url, server_b.url, "hello.ab"), within=20,
                    what="a message routed from server a to server b over TLS")  # fmt: skip
        # c dialled a and b and each refused its certificate; c refused theirs when
        # they dialled back: the handshakes failed, so no route to or from c exists
        refused = (server_a, server_b, server_c)
        await until(lambda: all(s.refused() for s in refused), within=20,
                    what="c's routes refused for their certificate, both ways")  # fmt: skip
        assert await server_a.routes() == ["b"]
        assert await server_b.routes() == ["a"]
        assert await server_c.routes() == []
