"""Bus publish and consume rates next to raw nats-py, same server, same run, same payload.

Publish: raw ``js.publish_async`` for every message then wait for all acks, against
``Bus.publish_many`` (pipelined the same way, plus encoding and ack bookkeeping),
both with a ``Nats-Msg-Id`` per message and a slim pod event as the payload.
Consume: raw ``fetch(256)`` + ack against ``Bus.consume`` + ack.
``python -m tests.bench bus`` (``BATON_BENCH_BUS_N`` sets the message count).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable

import nats
import nats.errors

from baton.libs.bus import Bus
from baton.proto import subjects
from baton.proto.codec import encode
from baton.proto.k8s import GPU, K8sEvent, Pod, PodEvent
from tests.support.nats import running_nats

CLUSTER = "bench"
N = int(os.environ.get("BATON_BENCH_BUS_N", "20000"))
CHUNK = 1000  # the bridge publishes in batches of about this size


def pod_event(i: int) -> PodEvent:
    """About the size of a bridge pod event (labels, requests, a node)."""
    pod = Pod(
        namespace="team-a",
        name=f"job-{i // 64}-w-{i % 64}",
        uid=f"6c1f6a8e-0b7e-4c3a-9f2e-{i:012d}",
        resource_version=str(100000 + i),
        labels={"scheduling.x-k8s.io/pod-group": f"job-{i // 64}", "team": "team-a"},
        scheduler_name="baton",
        node_name=f"gpu-{i % 7500:05d}",
        phase="Running",
        requests={GPU: 8, "cpu": 96000, "memory": 1_000_000_000_000},
        created_at=1_790_000_000.0,
    )
    return PodEvent(op="upsert", at=1_790_000_000.0 + i, pod=pod)


def subject_of(variant: str, event: PodEvent) -> str:
    return subjects.subject(CLUSTER, subjects.K8S, "pod", variant, event.pod.name)


async def timed(fn: Callable[[], Awaitable[None]]) -> float:
    started = time.perf_counter()
    await fn()
    return time.perf_counter() - started


async def publish_raw(url: str, events: list[PodEvent]) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream()
    payloads = [(subject_of("raw", e), encode(e), f"raw:{e.pod.uid}") for e in events]

    async def run() -> None:
        futures = [await js.publish_async(s, p, headers={"Nats-Msg-Id": m}) for s, p, m in payloads]
        await asyncio.gather(*futures)

    try:
        return await timed(run)
    finally:
        await nc.close()


async def publish_bus(bus: Bus, events: list[PodEvent], *, variant: str, chunk: int) -> float:
    items = [(subject_of(variant, e), e, f"{variant}:{e.pod.uid}") for e in events]

    async def run() -> None:
        for start in range(0, len(items), chunk):
            await bus.publish_many(items[start : start + chunk])  # type: ignore[arg-type]

    return await timed(run)


async def consume_raw(url: str, filter_subject: str, n: int) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream()
    sub = await js.pull_subscribe(filter_subject, stream=subjects.stream_name(CLUSTER, "k8s"))

    async def run() -> None:
        got = 0
        while got < n:
            for msg in await sub.fetch(256, timeout=5):
                await msg.ack()
                got += 1

    try:
        return await timed(run)
    finally:
        await sub.unsubscribe()
        await nc.close()


async def consume_bus(bus: Bus, filter_subject: str, n: int) -> float:
    async def run() -> None:
        got = 0
        async with bus.consume(filter_subject, type_=K8sEvent) as sub:
            async for msg in sub:
                await msg.ack()
                got += 1
                if got == n:
                    return

    return await timed(run)


async def measure() -> list[tuple[str, int, float]]:
    events = [pod_event(i) for i in range(N)]
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster=CLUSTER, name="bench")
        await bus.ensure_streams()
        try:
            rows = [
                ("raw nats-py js.publish_async, all in flight", N, await publish_raw(url, events)),
                (f"Bus.publish_many, chunks of {CHUNK}", N,
                 await publish_bus(bus, events, variant="many", chunk=CHUNK)),
                ("Bus.publish_many, one call", N,
                 await publish_bus(bus, events, variant="one", chunk=N)),
                ("Bus.publish, one at a time", N // 10,
                 await publish_bus(bus, events[: N // 10], variant="seq", chunk=1)),
            ]  # fmt: skip
            pods = subjects.wildcard(CLUSTER, subjects.K8S, "pod", "raw", ">")
            rows.append(("raw nats-py fetch(256) + ack", N, await consume_raw(url, pods, N)))
            rows.append(("Bus.consume + ack", N, await consume_bus(bus, pods, N)))
        finally:
            await bus.close()
    return rows


def main() -> None:
    rows = asyncio.run(measure())
    size = len(encode(pod_event(0)))
    baseline = rows[0][1] / rows[0][2]
    consume_baseline = rows[4][1] / rows[4][2]
    print(f"payload {size} bytes, Nats-Msg-Id on every publish, file storage\n")
    print("| what | messages | seconds | msgs/s | vs raw |")
    print("|---|---:|---:|---:|---:|")
    for index, (what, n, seconds) in enumerate(rows):
        rate = n / seconds
        raw = baseline if index < 4 else consume_baseline
        print(f"| {what} | {n} | {seconds:.2f} | {rate:,.0f} | {rate / raw:.0%} |")


if __name__ == "__main__":
    main()
