"""Bridge benchmarks: decoding, publish throughput, late-consumer bootstrap, latency, memory.

``python -m tests.bench bridge``. Every number comes with its baseline from the
same run: generated kubernetes-asyncio models next to msgspec decoding, raw nats-py
``js.publish_async`` next to the bridge's publish path, a KV bucket watch next to
``last_per_subject`` delivery. Results are written down in docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import ApiClient

from baton.libs.bus import Bus
from baton.libs.kube import PODS
from baton.libs.runner import Item
from baton.proto import k8s, subjects
from baton.proto.codec import encode
from baton.services.bridge import core
from tests.support.nats import running_nats

PODS_N = int(os.environ.get("BATON_BENCH_PODS", "100000"))
NODES_N = int(os.environ.get("BATON_BENCH_NODES", "7500"))


def wire_pod(i: int) -> dict[str, Any]:
    """A realistic API-server pod (~1.7 KB of JSON: managedFields, statuses, env...)."""
    ns, gang, rank = f"team-{i % 8}", f"job{i // 64}", i % 64
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{gang}-w-{rank}", "namespace": ns, "uid": f"0000-{i:08d}",
            "resourceVersion": str(1000 + i), "creationTimestamp": "2026-11-22T01:00:00Z",
            "labels": {"scheduling.x-k8s.io/pod-group": gang, "app": "train"},
            "annotations": {"baton.io/team": ns, "sim.baton.io/duration": "3600"},
            "managedFields": [{"manager": "baton", "operation": "Update", "apiVersion": "v1",
                               "time": "2026-11-22T01:00:00Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {}}}}],
        },
        "spec": {
            "schedulerName": "baton", "priority": 0, "nodeName": f"gpu-{i % 7500:04d}",
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "trainer", "image": "registry.example/train:1.2.3",
                "command": ["python", "train.py"], "env": [{"name": "RANK", "value": str(rank)}],
                "resources": {"requests": {"cpu": "12", "memory": "96Gi", "nvidia.com/gpu": "8"},
                              "limits": {"nvidia.com/gpu": "8"}},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "tolerations": [
                {"key": "baton.io/team", "operator": "Equal", "value": ns, "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300},
            ],
        },
        "status": {
            "phase": "Running", "podIP": f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}",
            "hostIP": "10.255.0.1", "startTime": "2026-11-22T01:00:01Z",
            "conditions": [{"type": "Ready", "status": "True",
                            "lastTransitionTime": "2026-11-22T01:00:05Z"}],
            "containerStatuses": [{"name": "trainer", "ready": True, "restartCount": 0,
                                   "image": "registry.example/train:1.2.3", "imageID": "sha256:abc",
                                   "state": {"running": {"startedAt": "2026-11-22T01:00:04Z"}}}],
        },
    }  # fmt: skip


def pod_list(n: int) -> bytes:
    items = [wire_pod(i) for i in range(n)]
    return json.dumps(
        {"kind": "PodList", "metadata": {"resourceVersion": "9"}, "items": items}
    ).encode()


def slim_events(n: int) -> list[k8s.K8sEvent]:
    at = time.time()
    return [k8s.PodEvent(op="upsert", at=at, pod=p) for p in PODS.decode_page(pod_list(n)).items]  # type: ignore[arg-type]


# --- decoding ---------------------------------------------------------------------


async def bench_decode(n: int) -> list[tuple[str, str]]:
    body = pod_list(n)
    started = time.perf_counter()
    page = PODS.decode_page(body)
    slim = time.perf_counter() - started
    assert len(page.items) == n
    async with ApiClient() as api:
        started = time.perf_counter()
        models = api._ApiClient__deserialize(json.loads(body), "V1PodList")  # type: ignore[attr-defined]
        generated = time.perf_counter() - started
    assert len(models.items) == n
    what = f"decode {n:,} pods ({len(body) / 2**20:.0f} MiB of JSON)"
    return [
        (f"{what}: kubernetes-asyncio models", f"{generated:.2f} s ({n / generated:,.0f} pods/s)"),
        (
            f"{what}: msgspec -> slim proto.k8s",
            f"{slim:.2f} s ({n / slim:,.0f} pods/s, {generated / slim:.0f}x faster)",
        ),
    ]


# --- publishing: raw nats-py next to the bridge's publish path ------------------------


async def publish_round(
    url: str, events: list[k8s.K8sEvent], *, cluster: str
) -> tuple[float, float]:
    """(raw, bridge) seconds to publish ``events`` to a fresh K8S stream of ``cluster``."""
    from baton.services.bridge import main as bridge_main

    bus = await Bus.connect(url, cluster=cluster, name="bench")
    await bus.ensure_streams()
    stream = subjects.stream_name(cluster, "k8s")
    state = core.initial(core.Policy(cluster=cluster))
    outputs = [
        o for e in events for o in core.step(state, e, 0.0)[1] if isinstance(o, core.Publish)
    ]

    started = time.perf_counter()
    futures = []
    for o in outputs:
        headers = {"Nats-Msg-Id": "raw:" + o.msg_id}
        futures.append(await bus.js.publish_async(o.subject, encode(o.event), headers=headers))
    await asyncio.gather(*futures)
    raw = time.perf_counter() - started
    await bus.js.purge_stream(stream)

    runner = bridge_main.runner(bus, None, bridge_main.Settings(cluster=cluster))  # type: ignore[arg-type]
    runner.feed = ListFeed(events)
    started = time.perf_counter()
    task = asyncio.create_task(runner.run())
    while runner.handled < len(events):  # noqa: ASYNC110 - a local counter, read cheaply
        await asyncio.sleep(0.005)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    bridged = time.perf_counter() - started
    info = await bus.js.stream_info(stream)
    assert info.state.messages == len(events), info.state
    await bus.close()
    return raw, bridged


class ListFeed:
    """The bridge's feed without an API server: the events, in the watch's batches."""

    def __init__(self, events: list[k8s.K8sEvent], *, page: int = 500) -> None:
        self.pages = [events[i : i + page] for i in range(0, len(events), page)]
        self.caught_up = False

    async def start(self) -> None:
        return None

    async def take(self, limit: int) -> list[Item]:
        if not self.pages:
            self.caught_up = True
            await asyncio.Event().wait()
        taken: list[k8s.K8sEvent] = []
        while self.pages and len(taken) < limit:
            taken.extend(self.pages.pop(0))
        return [Item(event=e) for e in taken]

    async def close(self) -> None:
        return None


async def bench_publish(
    url: str, events: list[k8s.K8sEvent], *, rounds: int = 3
) -> list[tuple[str, str]]:
    """Alternating rounds on a shared machine; the median round of each is reported.
    The last round's stream (cluster "bench") is left for bench_bootstrap."""
    n = len(events)
    times = [
        await publish_round(url, events, cluster="bench" if r == rounds - 1 else f"bench{r}")
        for r in range(rounds)
    ]
    raw = statistics.median(t[0] for t in times)
    bridged = statistics.median(t[1] for t in times)
    return [
        (
            f"raw nats-py js.publish_async, {n:,} slim pod events (median of {rounds})",
            f"{n / raw:,.0f} events/s",
        ),
        (
            "bridge publish path (core + Bus.publish_many + metrics)",
            f"{n / bridged:,.0f} events/s ({raw / bridged:.0%} of raw)",
        ),
    ]


# --- a late consumer's bootstrap: last_per_subject on the K8S stream vs a KV watch --------


async def bench_bootstrap(url: str, events: list[k8s.K8sEvent]) -> list[tuple[str, str]]:
    """Expects the K8S stream of cluster "bench" to hold ``events`` (bench_publish leaves it)."""
    n = len(events)
    bus = await Bus.connect(url, cluster="bench", name="late")
    started = time.perf_counter()
    got = await bus.snapshot(subjects.wildcard("bench", subjects.K8S, ">"), k8s.K8sEvent)
    stream_s = time.perf_counter() - started
    assert len(got) == n, len(got)

    started = time.perf_counter()
    ordered = await ordered_bootstrap(bus, subjects.wildcard("bench", subjects.K8S, ">"))
    ordered_s = time.perf_counter() - started
    assert ordered == n, ordered

    kv = await bus.js.create_key_value(bucket="bench_k8s", history=1)
    futures = []
    for event in events:
        pod = event.pod  # type: ignore[union-attr]
        key = f"pod.{pod.namespace}.{subjects.encode_name(pod.name)}"
        futures.append(await bus.js.publish_async(f"$KV.bench_k8s.{key}", encode(event)))
    await asyncio.gather(*futures)
    from baton.proto.codec import decode

    started = time.perf_counter()
    watcher = await kv.watchall()
    count = 0
    async for entry in watcher:
        if entry is None:  # initial values delivered
            break
        decode(entry.value, k8s.K8sEvent)
        count += 1
    kv_s = time.perf_counter() - started
    await watcher.stop()
    assert count == n, count
    started = time.perf_counter()
    keys = await kv.keys()
    keys_s = time.perf_counter() - started
    assert len(keys) == n
    await bus.js.delete_key_value("bench_k8s")
    await bus.close()
    return [
        (
            f"bootstrap {n:,} objects: K8S stream, last_per_subject pull (bus.snapshot)",
            f"{stream_s:.2f} s",
        ),
        (
            f"bootstrap {n:,} objects: K8S stream, last_per_subject ordered push",
            f"{ordered_s:.2f} s",
        ),
        (f"bootstrap {n:,} keys: KV bucket watchall until initial values done", f"{kv_s:.2f} s"),
        (f"KV keys() listing, {n:,} keys", f"{keys_s:.2f} s"),
    ]


async def ordered_bootstrap(bus: Bus, filter_subject: str) -> int:
    """What a KV watch does under the hood, on the K8S stream: an ordered push consumer."""
    from nats.js.api import DeliverPolicy

    from baton.proto.codec import decode

    done = asyncio.get_running_loop().create_future()
    count = 0

    async def handle(msg: Any) -> None:
        nonlocal count
        decode(msg.data, k8s.K8sEvent)
        count += 1
        if msg.metadata.num_pending == 0 and not done.done():
            done.set_result(None)

    sub = await bus.js.subscribe(
        filter_subject,
        cb=handle,
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
    )
    await done
    await sub.unsubscribe()
    return count


# --- the bridge process against simcluster: initial sync, memory, change -> consumer latency --


def load_sim(store: Any, *, nodes: int, pods: int) -> None:
    for i in range(8):
        store.create("namespaces", {"metadata": {"name": f"team-{i}"}})
    for i in range(nodes):
        store.create("nodes", {
            "metadata": {"name": f"gpu-{i:04d}", "labels": {"rack": f"r{i // 32}"}},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        })  # fmt: skip
    for i in range(pods):
        obj = wire_pod(i)
        del obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]
        store.create("pods", obj)


def rss_mib(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of a process, MiB."""
    fields = dict(
        line.split(":", 1)
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if ":" in line
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


async def stream_messages(bus: Bus) -> int:
    info = await bus.js.stream_info(subjects.stream_name("bench", "k8s"))
    return int(info.state.messages)


async def bench_bridge_process(url: str, *, nodes: int, pods: int) -> list[tuple[str, str]]:
    from tests.support.sim import running_sim

    rows: list[tuple[str, str]] = []
    async with running_sim() as sim:
        load_sim(sim.store, nodes=nodes, pods=pods)
        env = {**os.environ, "BATON_NATS_URL": url, "BATON_CLUSTER": "bench",
               "KUBECONFIG": sim.kubeconfig, "BATON_OPS_PORT": "0"}  # fmt: skip
        bus = await Bus.connect(url, cluster="bench", name="bench")
        await bus.ensure_streams()
        with tempfile.TemporaryFile() as logs:
            started = time.perf_counter()
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "baton.services.cli",
                "bridge",
                env=env,
                stdout=logs,
                stderr=logs,
            )
            try:
                total = nodes + pods
                while await stream_messages(bus) < total:
                    if proc.returncode is not None:
                        logs.seek(0)
                        raise RuntimeError(f"bridge exited: {logs.read()[-2000:].decode()}")
                    await asyncio.sleep(0.05)
                synced = time.perf_counter() - started
                rss, peak = rss_mib(proc.pid)
                what = f"{nodes:,} nodes + {pods:,} pods"
                rows.append(
                    (
                        f"bridge initial sync, {what} (process start -> all stored)",
                        f"{synced:.1f} s ({total / synced:,.0f} events/s)",
                    )
                )
                rows.append(
                    (
                        f"bridge RSS after sync, {nodes:,} nodes + {pods:,} pods",
                        f"{rss:.0f} MiB (peak {peak:.0f} MiB)",
                    )
                )
                rows += await bench_latency(bus, sim.store, rate=1000, seconds=5.0)
            finally:
                proc.terminate()
                await asyncio.wait_for(proc.wait(), 10)
        await bus.close()
    return rows


async def bench_latency(
    bus: Bus, store: Any, *, rate: int, seconds: float
) -> list[tuple[str, str]]:
    """Patch pods at ``rate``/s, each stamped with the time of the change; a consumer of the
    bridge's events (another process: the bridge is a subprocess) measures change -> receipt."""
    from nats.js.api import DeliverPolicy

    from baton.proto.codec import decode

    latencies: list[float] = []
    expected = [int(rate * seconds)]  # corrected to the number actually sent
    all_in = asyncio.Event()

    async def handle(msg: Any) -> None:
        event = decode(msg.data, k8s.K8sEvent)
        stamp = event.pod.annotations.get("baton.io/changed-at")  # type: ignore[union-attr]
        if stamp:
            latencies.append(time.time() - float(stamp))
            if len(latencies) >= expected[0]:
                all_in.set()

    sub = await bus.js.subscribe(
        subjects.wildcard("bench", subjects.K8S, "pod", ">"), cb=handle,
        ordered_consumer=True, deliver_policy=DeliverPolicy.NEW,
    )  # fmt: skip
    names = [(f"team-{i % 8}", f"job{i // 64}-w-{i % 64}") for i in range(2000)]
    tick, per_tick = 0.01, max(1, rate // 100)
    sent, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(per_tick):
            ns, name = names[sent % len(names)]
            stamp = repr(time.time())
            store.mutate(
                "pods",
                ns,
                name,
                lambda p, s=stamp: p["metadata"]["annotations"].update({"baton.io/changed-at": s}),
            )
            sent += 1
        await asyncio.sleep(max(0.0, started + tick * (sent // per_tick) - time.perf_counter()))
    expected[0] = sent
    if len(latencies) >= sent:
        all_in.set()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(all_in.wait(), 10)
    await sub.unsubscribe()
    ordered = sorted(latencies)
    p50 = statistics.median(ordered) * 1000
    p99 = ordered[int(len(ordered) * 0.99) - 1] * 1000
    achieved = sent / seconds
    what = f"API change -> consumer, {achieved:,.0f} changes/s ({len(ordered):,} of {sent:,} seen)"
    return [(what, f"p50 {p50:.1f} ms, p99 {p99:.1f} ms")]


def table(rows: list[tuple[str, str]]) -> str:
    lines = ["| measurement | result |", "|---|---|"]
    lines += [f"| {what} | {result} |" for what, result in rows]
    return "\n".join(lines)


async def run_all() -> list[tuple[str, str]]:
    rows = await bench_decode(PODS_N)
    events = slim_events(PODS_N)
    async with running_nats() as url:
        rows += await bench_publish(url, events)
        rows += await bench_bootstrap(url, events)
    async with running_nats() as url:
        rows += await bench_bridge_process(url, nodes=NODES_N, pods=PODS_N)
    return rows


def main() -> None:
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))  # warnings only
    print(table(asyncio.run(run_all())))


if __name__ == "__main__":
    main()
