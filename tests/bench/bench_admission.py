"""Admission benchmarks: webhook latency over HTTPS under load, and gang admissions per
second with 10,000 gangs queued across 20 teams.

Baseline in the same run: an HTTPS server answering a constant AdmissionReview (the
cost of TLS + aiohttp alone), so the webhook's own share is visible.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from baton.proto.k8s import GPU, Node, NodeEvent, Pod, PodEvent, PodGroup, PodGroupEvent
from baton.services.admission import core
from baton.services.admission.serving import Webhook, serve_webhook, tls_context
from baton.services.admission.teams import parse
from tests.connected.test_webhook import make_cert, review

TEAMS = 20
GANGS = 10_000
REQUESTS = 2_000
CONCURRENCY = 16


def twenty_teams(nodes_per_team: int = 50) -> core.State:
    config = parse(
        {
            "teams": [
                {
                    "name": f"t{i}",
                    "namespaces": [f"ns{i}"],
                    "pools": [f"p{i}"],
                    "borrow": {"gpus": 64},
                }
                for i in range(TEAMS)
            ]
        }
    )
    state = core.initial(config)
    for t in range(TEAMS):
        for n in range(nodes_per_team):
            node = Node(
                name=f"n{t}-{n}", uid="u", labels={"baton.io/pool": f"p{t}"}, allocatable={GPU: 8}
            )
            state, _ = core.step(state, NodeEvent(op="upsert", at=0.0, node=node), 0.0)
    return state


def gang_events(i: int, ns: str = "") -> list[Any]:
    ns, name = ns or f"ns{i % TEAMS}", f"g{i}"
    group = PodGroup(namespace=ns, name=name, uid=name, min_member=2, created_at=float(i))
    pods = [
        PodEvent(
            op="upsert",
            at=float(i),
            pod=Pod(
                namespace=ns,
                name=f"{name}-{m}",
                uid=f"{name}-{m}",
                requests={GPU: 8},
                labels={"scheduling.x-k8s.io/pod-group": name},
            ),
        )
        for m in range(2)
    ]
    return [PodGroupEvent(op="upsert", at=float(i), pod_group=group), *pods]


def bench_queue() -> list[tuple[str, str]]:
    """Queue 10k gangs (no capacity), then free capacity and count admissions per second."""
    state = twenty_teams(nodes_per_team=0)
    started = time.perf_counter()
    for i in range(GANGS):
        for event in gang_events(i):
            state, _ = core.step(state, event, float(i))
    queued_s = time.perf_counter() - started
    queued = sum(len(q) for q in state.queues.values())
    admitted = 0
    started = time.perf_counter()
    for t in range(TEAMS):  # 50 x 8-GPU nodes per team arrive: 25 gangs per team fit
        for n in range(50):
            node = Node(
                name=f"n{t}-{n}", uid="u", labels={"baton.io/pool": f"p{t}"}, allocatable={GPU: 8}
            )
            state, outputs = core.step(state, NodeEvent(op="upsert", at=1e6, node=node), 1e6)
            admitted += sum(type(o).__name__ == "GangAdmitted" for o in outputs)
    admit_s = time.perf_counter() - started
    return [
        ("gangs queued (20 teams)", f"{queued:,}"),
        ("enqueue rate (PodGroup + 2 pods per gang)", f"{GANGS / queued_s:,.0f} gangs/s"),
        ("gangs admitted as 1,000 nodes join", f"{admitted:,}"),
        (
            "admission rate with 10k queued",
            f"{admitted / admit_s:,.0f} gangs/s ({1000 / admit_s:,.0f} node events/s)",
        ),
    ]


WAITING = 20_000  # PodGroups whose pods have not come yet (15,000 nodes: 23,000 gangs waited)
ARRIVING = 1_000  # gangs whose two pods then come, one event each


def bench_waiting() -> list[tuple[str, str]]:
    """20,000 PodGroups queued before their pods (as a job controller makes them), one
    team with room in its quota and no nodes yet; then the pods of 1,000 of them arrive.
    Each pod event walks the team's queue: with ``State.hush`` it leaves out the gangs
    told they wait for members; the raw baseline (same run, same code) wakes them all
    before each event, as admission walked before."""
    config = parse({"teams": [{"name": "a", "namespaces": ["a"], "quota": {"gpus": 80_000}}]})

    def queued() -> core.State:
        state = core.initial(config)
        for i in range(WAITING):
            group = PodGroup(namespace="a", name=f"g{i}", uid=f"g{i}", min_member=2, created_at=0)
            state, _ = core.step(state, PodGroupEvent(op="upsert", at=0.0, pod_group=group), 0.0)
        return state

    def arrive(state: core.State, *, forget: bool) -> float:
        every = range(0, WAITING, WAITING // ARRIVING)
        events = [e for i in every for e in gang_events(i, ns="a")[1:]]  # its pods, not its group
        started = time.perf_counter()
        for event in events:
            if forget:
                state.wake_all()
            state, _ = core.step(state, event, 1.0)
        return len(events) / (time.perf_counter() - started)

    raw = arrive(queued(), forget=True)
    kept = arrive(queued(), forget=False)
    return [
        (f"pod events/s, {WAITING:,} gangs waiting for pods: every gang told again (raw)",
         f"{raw:,.0f}"),
        ("the same, gangs told and unchanged left out (`State.hush`)", f"{kept:,.0f}"),
    ]  # fmt: skip


async def _load(url: str, ca: str, body: bytes) -> list[float]:
    context = ssl.create_default_context(cadata=ca)
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=CONCURRENCY, ssl=context)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def worker(n: int) -> None:
            for _ in range(n):
                started = time.perf_counter()
                async with http.post(
                    url, data=body, headers={"Content-Type": "application/json"}
                ) as reply:
                    await reply.read()
                    assert reply.status == 200
                latencies.append(time.perf_counter() - started)

        await asyncio.gather(*(worker(REQUESTS // CONCURRENCY) for _ in range(CONCURRENCY)))
    return latencies


async def bench_webhook() -> list[tuple[str, str]]:
    with tempfile.TemporaryDirectory() as scratch:
        cert, key = make_cert(Path(scratch))
        ca = Path(cert).read_text()  # noqa: ASYNC240 - setup, before any load
        tls = tls_context(cert, key)
        state = twenty_teams()
        for i in range(2_000):
            for event in gang_events(i):
                state, _ = core.step(state, event, float(i))
        events: list[Any] = []
        runner, port = await serve_webhook(
            Webhook(state=lambda: state, publish=events.append), host="127.0.0.1", port=0, tls=tls
        )
        constant = json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": "x", "allowed": True},
            }
        ).encode()

        async def fixed(_: web.Request) -> web.Response:
            return web.Response(body=constant, content_type="application/json")

        app = web.Application()
        app.router.add_post("/", fixed)
        raw = web.AppRunner(app, access_log=None)
        await raw.setup()
        site = web.TCPSite(raw, "127.0.0.1", 0, ssl_context=tls)
        await site.start()
        raw_port = raw.addresses[0][1]
        pod = {
            "metadata": {"name": "g5-0", "labels": {"scheduling.x-k8s.io/pod-group": "g5"}},
            "spec": {
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]
            },
        }
        body = json.dumps(review(pod, namespace="ns5")).encode()
        rows = []
        try:
            for label, url in (
                (
                    "baseline: constant answer, same TLS server stack",
                    f"https://127.0.0.1:{raw_port}/",
                ),
                (
                    "mutate (gang pod, 20 teams, 2k gangs in state)",
                    f"https://127.0.0.1:{port}/mutate",
                ),
                ("validate", f"https://127.0.0.1:{port}/validate"),
            ):
                lat = sorted(await _load(url, ca, body))
                p50, p99 = statistics.median(lat), lat[int(len(lat) * 0.99) - 1]
                rows.append((label, f"p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms"))
        finally:
            await runner.cleanup()
            await raw.cleanup()
        return rows


def main() -> None:
    rows = asyncio.run(bench_webhook()) + bench_queue() + bench_waiting()
    print(f"| admission ({REQUESTS} HTTPS requests, {CONCURRENCY} concurrent) | result |")
    print("|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
