"""NATS servers of one cluster route to each other over TLS with the certificate
``baton nats-config --make-tls`` makes, and refuse a server whose certificate another
CA signed (deploy/base/nats.yaml's ``cluster { tls {} }``). Real nats-servers."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest

from baton.services.cli.natsconfig import make_tls
from tests.pipeline import until
from tests.support.nats import running_nats

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]
HOSTS = ["localhost", "127.0.0.1"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def server(
    folder: Path, name: str, tls: Path, ca: Path, port: int, routes: list[int]
) -> AsyncIterator[str]:
    config = {
        "server_name": name,
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
    async with running_nats(config=path, store_dir=folder / name) as url:
        yield url


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
    a, b, c = free_port(), free_port(), free_port()
    async with (
        server(tmp_path, "a", ours, ca, a, [b]) as url_a,
        server(tmp_path, "b", ours, ca, b, [a]) as url_b,
        server(tmp_path, "c", theirs, theirs / "ca.crt", c, [a, b]) as url_c,
    ):
        await until(lambda: delivered(url_a, url_b, "hello.ab"), within=20,
                    what="a message routed from server a to server b over TLS")  # fmt: skip
        assert not await delivered(url_c, url_a, "hello.ca")  # c's routes are refused
        assert not await delivered(url_a, url_c, "hello.ac")
