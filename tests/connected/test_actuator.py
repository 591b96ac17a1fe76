"""The actuator against a real nats-server and simcluster over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec
import pytest
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from baton.libs.bus import Bus
from baton.libs.runner import Runner
from baton.libs.runner.leasing import Held, leases_bucket
from baton.proto import subjects
from baton.proto.actions import (
    ActionResult,
    Annotate,
    AnyAction,
    BindGang,
    Binding,
    CreatePod,
    EvictGang,
    MarkNode,
    PodTemplate,
    ScaleMachineDeployment,
    SetLabels,
    SetTaint,
    action_subject,
)
from baton.proto.deadletter import DeadLetter
from baton.proto.k8s import GPU, Taint
from baton.services.actuator import core
from baton.services.actuator import main as actuator_main
from baton.services.actuator.calling import Api
from baton.services.simcluster.api.objects import ApiError as SimApiError
from tests.pipeline import stop
from tests.support.actions import Producers
from tests.support.nats import running_nats
from tests.support.sim import Sim, running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(90)]

NS = "team-a"
MARK: dict[str, str | None] = {"t.baton.io/marked": "true"}
READS = {"get", "list", "watch"}


@dataclass
class Env:
    bus: Bus
    nats_url: str
    sim: Any
    client: ApiClient
    nodes: list[str]
    producers: Producers
    results: dict[str, list[ActionResult]] = field(default_factory=dict)

    @property
    def core(self) -> CoreV1Api:
        return CoreV1Api(self.client)

    async def publish(self, action: AnyAction, *, msg_id: str = "") -> None:
        """On its subject, from ``action.by`` holding its lease (``Producers``)."""
        await self.producers.publish(action, msg_id=msg_id)

    async def result(self, action_id: str, *, within: float = 20.0) -> ActionResult:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.results.get(action_id):
                return self.results[action_id][-1]
            await asyncio.sleep(0.02)
        raise AssertionError(f"no result for {action_id} in {within}s")

    async def pod(self, name: str) -> dict[str, Any] | None:
        try:
            pod = await self.core.read_namespaced_pod(name, NS)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return self.client.sanitize_for_serialization(pod)  # type: ignore[no-any-return]

    async def node_name(self, pod: str) -> str:
        found = await self.pod(pod)
        assert found is not None, f"pod {pod} is gone"
        return str(found["spec"].get("nodeName") or "")

    async def writes(self) -> int:
        """Requests simcluster served with a verb that changes state."""
        async with aiohttp.ClientSession() as http, http.get(f"{self.sim.url}/metrics") as resp:
            text = await resp.text()
        total = 0.0
        for family in text_string_to_metric_families(text):
            if family.name == "apiserver_request":
                for sample in family.samples:
                    if (
                        sample.name.endswith("_total")
                        and sample.labels["verb"].lower() not in READS
                    ):
                        total += sample.value
        return int(total)


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    async with running_nats() as url, running_sim() as sim:
        client = await sim.api_client()
        api = CoreV1Api(client)
        await api.create_namespace({"metadata": {"name": NS}})
        nodes = [f"gpu-{i}" for i in range(8)]
        for node in nodes:
            await api.create_node({"metadata": {"name": node}})
        async with results_of(url, sim, client, nodes) as env:
            yield env


@contextlib.asynccontextmanager
async def results_of(url: str, sim: Sim, client: ApiClient, nodes: list[str]) -> AsyncIterator[Env]:
    """An ``Env`` on the bus at ``url`` collecting every action result; the bus and
    ``client`` closed at the end."""
    bus = await Bus.connect(url, cluster="c1", name="test")
    await bus.ensure_streams()
    env = Env(bus=bus, nats_url=url, sim=sim, client=client, nodes=nodes,
              producers=Producers(bus))  # fmt: skip
    sub = bus.consume(subjects.wildcard("c1", subjects.RESULT, ">"), type_=ActionResult)
    reader = asyncio.create_task(_collect(sub, env.results))
    try:
        yield env
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        await sub.close()
        await client.close()
        await bus.close()


async def _collect(sub: Any, into: dict[str, list[ActionResult]]) -> None:
    async for msg in sub:
        into.setdefault(msg.event.action_id, []).append(msg.event)
        await msg.ack()


@contextlib.asynccontextmanager
async def actuator(
    env: Env,
    *,
    dry_run: bool = False,
    bind_concurrency: int = 64,
    max_attempts: int = 5,
    api: Api | None = None,
) -> AsyncIterator[Runner[core.State]]:
    bus = await Bus.connect(env.nats_url, cluster="c1", name="actuator")
    api = None if dry_run else (api or Api(env.client, tries=2, base=0.01))
    limits = core.Limits(qps=0, max_attempts=max_attempts, backoff_base=0.05)
    settings = actuator_main.Settings(dry_run=dry_run, bind_concurrency=bind_concurrency)
    running = actuator_main.runner(bus, settings, api=api, limits=limits)
    task = asyncio.create_task(running.run())
    try:
        yield running
    finally:
        await stop(task, within=15.0, what="actuator")
        await bus.close()


async def make_pods(env: Env, names: list[str], *, owned: set[str] = frozenset()) -> dict[str, str]:
    """Create unbound pods; returns name -> uid."""
    uids = {}
    for name in names:
        meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": {"app": "gang"}}
        if name in owned:
            meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                        "uid": "job-uid", "controller": True}]  # fmt: skip
        container = {"name": "main", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}
        body = {"metadata": meta, "spec": {"schedulerName": "baton", "containers": [container]}}
        created = await env.core.create_namespaced_pod(NS, body)
        uids[name] = created.metadata.uid
    return uids


def bind_gang(id_: str, pairs: list[tuple[str, str]]) -> BindGang:
    bindings = tuple(Binding(namespace=NS, pod=pod, node=node) for pod, node in pairs)
    return BindGang(id=id_, by="gang", at=time.time(), gang=f"{NS}/g", bindings=bindings)


async def test_bind_gang_binds_every_member(env: Env) -> None:
    nodes = env.nodes[:4]
    pods = [f"w-{i}" for i in range(4)]
    await make_pods(env, pods)
    async with actuator(env):
        await env.publish(bind_gang("g1", list(zip(pods, nodes, strict=True))))
        result = await env.result("g1")
    assert result.outcome == "applied", result.error
    assert result.action_type == "action.bind-gang.v1"
    assert [await env.node_name(p) for p in pods] == nodes


async def test_gang_aimed_at_a_missing_node_binds_nothing(env: Env) -> None:
    nodes = env.nodes[:3]
    pods = ["m-0", "m-1", "m-2", "m-3"]
    await make_pods(env, pods)
    pairs = [*zip(pods, nodes, strict=False), ("m-3", "no-such-node")]
    async with actuator(env):
        await env.publish(bind_gang("g-missing", pairs))
        result = await env.result("g-missing")
    assert result.outcome == "rolled-back"
    assert "node no-such-node not found" in result.error
    assert [await env.node_name(p) for p in pods] == ["", "", "", ""]


async def test_gang_with_a_pod_bound_elsewhere_rolls_back_every_member(env: Env) -> None:
    nodes = env.nodes
    pods = ["r-0", "r-1", "r-2", "r-3"]
    await make_pods(env, pods, owned={"r-1"})
    taken = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "r-3"},
             "target": {"apiVersion": "v1", "kind": "Node", "name": nodes[7]}}  # fmt: skip
    await env.core.create_namespaced_pod_binding("r-3", NS, taken, _preload_content=False)
    pairs = list(zip(pods, nodes[:4], strict=True))  # r-3 -> nodes[3], but it is on nodes[7]
    async with actuator(env, bind_concurrency=1):  # r-0..r-2 bind before r-3 fails
        await env.publish(bind_gang("g-taken", pairs))
        result = await env.result("g-taken")
    assert result.outcome == "rolled-back"
    assert "already bound" in result.error and "rolled back 3 bound members" in result.error
    assert await env.node_name("r-0") == "" and await env.node_name("r-2") == ""
    assert await env.pod("r-1") is None  # had a controller: deleted, the controller recreates
    assert await env.node_name("r-3") == nodes[7]  # not ours to undo


async def test_taint_add_and_remove_are_idempotent(env: Env) -> None:
    node = env.nodes[0]
    taint = Taint(key="baton.io/test", value="x", effect="NoSchedule")

    def act(id_: str, present: bool) -> SetTaint:
        return SetTaint(id=id_, by="admission", at=0.0, node=node, taint=taint, present=present,
                        priority="health")  # fmt: skip

    async with actuator(env):
        outcomes = []
        for id_, present in [("t1", True), ("t2", True), ("t3", False), ("t4", False)]:
            await env.publish(act(id_, present))
            outcomes.append((await env.result(id_)).outcome)
            read = await env.core.read_node(node)
            keys = [t.key for t in read.spec.taints or []]
            assert ("baton.io/test" in keys) is present
    assert outcomes == ["applied", "already", "applied", "already"]


async def test_annotate_a_node_sets_and_removes_only_the_keys_it_names(env: Env) -> None:
    node = env.nodes[1]
    await env.core.patch_node(node, {"metadata": {"annotations": {"someone.else/note": "keep"}}})

    def act(id_: str, value: str | None) -> Annotate:
        notes = {"baton.io/health": value}
        return Annotate(id=id_, by="autoscaler", at=0.0, priority="health", kind="Node",
                        namespace="", name=node, annotations=notes)  # fmt: skip

    async with actuator(env):
        outcomes = []
        for id_, value in [("a1", '{"state":"quarantined"}'), ("a2", '{"state":"quarantined"}'),
                           ("a3", None)]:  # fmt: skip
            action = act(id_, value)
            assert action_subject("c1", action) == f"baton.c1.action.annotate.autoscaler.{node}"
            await env.publish(action)
            outcomes.append((await env.result(id_)).outcome)
            notes = (await env.core.read_node(node)).metadata.annotations or {}
            assert notes.get("baton.io/health") == value
            assert notes["someone.else/note"] == "keep"
    assert outcomes == ["applied", "already", "applied"]


async def test_mark_node_changes_only_what_it_names_in_one_write(env: Env) -> None:
    node = env.nodes[2]
    theirs = {"key": "other.io/x", "value": "y", "effect": "NoSchedule"}
    await env.core.patch_node(node, {"spec": {"taints": [theirs]},
                                     "metadata": {"labels": {"team": "a"}}})  # fmt: skip
    bad = Taint(key="baton.io/unhealthy", value="true", effect="NoSchedule")
    drain = Taint(key="baton.io/draining", value="true", effect="NoExecute")

    def act(id_: str, on: tuple[Taint, ...], off: tuple[Taint, ...], fix: str | None) -> MarkNode:
        return MarkNode(id=id_, by="health", at=0.0, priority="health", node=node, taints=on,
                        untaint=off, labels={"baton.io/remediation": fix},
                        annotations={"baton.io/health": f"note {id_}"})  # fmt: skip

    async with actuator(env):
        steps = [
            ("m1", (bad, drain), (), "reboot"),
            ("m2", (bad, drain), (), "reboot"),  # the same again: nothing to write
            ("m3", (), (bad, drain), None),
        ]
        outcomes = []
        for id_, on, off, fix in steps:
            action = act(id_, on, off, fix)
            assert action_subject("c1", action) == f"baton.c1.action.mark-node.health.{node}"
            await env.publish(action)
            outcomes.append((await env.result(id_)).outcome)
            read = await env.core.read_node(node)
            keys = {t.key for t in read.spec.taints or []}
            assert keys == {"other.io/x"} | {t.key for t in on}
            assert read.metadata.labels.get("baton.io/remediation") == fix
            assert read.metadata.labels["team"] == "a"
    assert outcomes == ["applied", "applied", "applied"]  # m2: its note differs
    repeat = act("m4", (), (bad, drain), None)
    repeat = msgspec.structs.replace(repeat, annotations={"baton.io/health": "note m3"})
    async with actuator(env):
        await env.publish(repeat)
        assert (await env.result("m4")).outcome == "already"


async def test_evict_gang_evicts_and_tolerates_missing_pods(env: Env) -> None:
    node = env.nodes[0]
    await make_pods(env, ["e-0"])
    pairs = [("e-0", node)]
    async with actuator(env):
        await env.publish(bind_gang("e-bind", pairs))
        assert (await env.result("e-bind")).outcome == "applied"
        members = (Binding(namespace=NS, pod="e-0", node=node),
                   Binding(namespace=NS, pod="never-was", node=node))  # fmt: skip
        evict = EvictGang(id="e1", by="gang", at=0.0, gang=f"{NS}/e", pods=members)
        await env.publish(evict)
        assert (await env.result("e1")).outcome == "applied"
    pod = await env.pod("e-0")
    assert pod is None or pod["metadata"].get("deletionTimestamp")


async def test_scale_machine_deployment(env: Env) -> None:
    custom = CustomObjectsApi(env.client)
    md = {"name": "pool-a", "namespace": "default"}
    body = {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment",
            "metadata": md, "spec": {"clusterName": "c1", "replicas": 3}}  # fmt: skip
    await custom.create_namespaced_custom_object(
        "cluster.x-k8s.io", "v1beta1", "default", "machinedeployments", body
    )
    where = ("cluster.x-k8s.io", "v1beta1", md["namespace"], "machinedeployments", md["name"])
    before = (await custom.get_namespaced_custom_object_scale(*where))["spec"]["replicas"]

    def scale(id_: str) -> ScaleMachineDeployment:
        return ScaleMachineDeployment(
            id=id_, by="autoscaler", at=0.0, priority="scaling",
            namespace=md["namespace"], name=md["name"], replicas=before + 2,
        )  # fmt: skip

    async with actuator(env):
        await env.publish(scale("s1"))
        assert (await env.result("s1")).outcome == "applied"
        await env.publish(scale("s2"))
        assert (await env.result("s2")).outcome == "already"
    after = (await custom.get_namespaced_custom_object_scale(*where))["spec"]["replicas"]
    assert after == before + 2


async def test_dry_run_makes_no_api_write(env: Env) -> None:
    nodes = env.nodes[:2]
    await make_pods(env, ["d-0", "d-1"])
    writes = await env.writes()
    async with actuator(env, dry_run=True):
        await env.publish(bind_gang("d1", list(zip(["d-0", "d-1"], nodes, strict=True))))
        await env.publish(SetLabels(id="d2", by="admission", at=0.0, node=nodes[0], labels=MARK))
        assert (await env.result("d1")).outcome == "would-do"
        assert (await env.result("d2")).outcome == "would-do"
    assert await env.writes() == writes
    assert await env.node_name("d-0") == ""


async def test_duplicate_action_id_is_applied_once(env: Env) -> None:
    nodes = env.nodes[:2]
    await make_pods(env, ["u-0", "u-1"])
    gang = bind_gang("dup", list(zip(["u-0", "u-1"], nodes, strict=True)))

    def already() -> float:
        labels = {"type": "action.bind-gang.v1", "outcome": "already"}
        return REGISTRY.get_sample_value("baton_actuator_actions_total", labels) or 0.0

    already_before = already()
    async with actuator(env) as running:
        await env.publish(gang)
        assert (await env.result("dup")).outcome == "applied"
        writes = await env.writes()
        # Published again past JetStream's dedup (another msg id): the seen set answers.
        await env.publish(gang, msg_id="dup-again")
        deadline = time.monotonic() + 20
        while already() < already_before + 1:
            assert time.monotonic() < deadline, "the duplicate was not handled"
            await asyncio.sleep(0.02)
        assert not running.state.in_flight and not running.feed.messages  # type: ignore[attr-defined]
    assert await env.writes() == writes
    assert [await env.node_name(p) for p in ["u-0", "u-1"]] == nodes


async def test_api_errors_are_retried_reread_or_reported(env: Env) -> None:
    """500 -> backoff, 409 -> re-read; a node that keeps failing is dead-lettered; 404 fails."""
    script = {env.nodes[0]: [(500, "InternalError"), (409, "Conflict")]}
    seen: list[str] = []

    async def hook(op: str, res: Any, obj: dict[str, Any], old: Any, **_: Any) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        if res.plural == "nodes" and op == "UPDATE":
            seen.append(name)
            if name == env.nodes[1]:
                raise SimApiError(503, "ServiceUnavailable", "the sim is down for this node")
            if script.get(name):
                code, reason = script[name].pop(0)
                raise SimApiError(code, reason, f"scripted {code}")
        return obj

    env.sim.server.admission.append(hook)
    dead = env.bus.consume(subjects.wildcard("c1", subjects.DEADLETTER, ">"), type_=DeadLetter)
    try:
        async with actuator(env, max_attempts=2):
            for i, node in enumerate([env.nodes[0], env.nodes[1], "no-such-node"]):
                await env.publish(SetLabels(id=f"c{i}", by="admission", at=0.0, node=node,
                                            labels=MARK))  # fmt: skip
            flaky, down, missing = [await env.result(f"c{i}") for i in range(3)]
            letter = await asyncio.wait_for(anext(aiter(dead)), 20)
    finally:
        await dead.close()
    assert flaky.outcome == "applied", flaky.error
    assert seen.count(env.nodes[0]) == 3  # 500, then 409, then stored
    assert (await env.core.read_node(env.nodes[0])).metadata.labels.items() >= MARK.items()
    assert down.outcome == "failed" and down.attempts == 2
    assert "gave up after 2 attempts" in down.error and "503" in down.error
    assert letter.event.subject == f"baton.c1.action.label.admission.{env.nodes[1]}"
    assert missing.outcome == "failed" and "404" in missing.error


async def test_a_pod_bound_by_name_to_a_node_without_free_gpus_is_not_created(env: Env) -> None:
    """Health's preflight pods name their node: the actuator checks the fit no scheduler
    checks, so a gang bound there a moment before keeps the node (its kubelet would
    otherwise fail one of them)."""
    node = env.nodes[0]
    await env.core.patch_node_status(node, {"status": {"capacity": {GPU: "8"},
                                                      "allocatable": {GPU: "8"}}})  # fmt: skip
    held = {"name": "main", "image": "pause", "resources": {"requests": {GPU: "8"}}}
    worker = {"metadata": {"name": "worker", "namespace": NS},
              "spec": {"nodeName": node, "containers": [held]}}  # fmt: skip
    await env.core.create_namespaced_pod(NS, worker)

    def preflight(id_: str, on: str) -> CreatePod:
        pod = PodTemplate(namespace=NS, name=f"preflight-{on}", image="dcgm",
                          requests={GPU: 8}, node_name=on, restart_policy="Never")  # fmt: skip
        return CreatePod(id=id_, by="health", at=time.time(), priority="health", pod=pod)

    async with actuator(env):
        await env.publish(preflight("busy", node))
        refused = await env.result("busy")
        free = env.nodes[1]
        await env.core.patch_node_status(free, {"status": {"capacity": {GPU: "8"},
                                                          "allocatable": {GPU: "8"}}})  # fmt: skip
        await env.publish(preflight("idle", free))
        created = await env.result("idle")
    assert refused.outcome == "failed" and "0 GPU(s) free" in refused.error, refused
    assert await env.pod(f"preflight-{node}") is None
    assert created.outcome == "applied", created


async def _gpu_node(env: Env, node: str) -> None:
    await env.core.patch_node_status(node, {"status": {"capacity": {GPU: "8"},
                                                      "allocatable": {GPU: "8"}}})  # fmt: skip


async def _gpu_worker(env: Env, name: str) -> None:
    held = {"name": "main", "image": "pause", "resources": {"requests": {GPU: "8"},
                                                            "limits": {GPU: "8"}}}  # fmt: skip
    body = {"metadata": {"name": name, "namespace": NS},
            "spec": {"schedulerName": "baton", "containers": [held]}}  # fmt: skip
    await env.core.create_namespaced_pod(NS, body)


def _preflight(node: str) -> tuple[MarkNode, CreatePod]:
    """What health asks for a check: the preflight taint, then (once the taint is seen
    on the node) the pod bound by name, asking for every GPU."""
    taint = Taint(key="baton.io/preflight", effect="NoSchedule")
    mark = MarkNode(id=f"mark-{node}", by="health", at=time.time(), priority="health",
                    node=node, taints=(taint,))  # fmt: skip
    pod = PodTemplate(namespace=NS, name=f"preflight-{node}", image="dcgm",
                      requests={GPU: 8}, node_name=node, restart_policy="Never")  # fmt: skip
    create = CreatePod(id=f"check-{node}", by="health", at=time.time(), priority="health",
                       pod=pod)  # fmt: skip
    return mark, create


async def test_a_gang_placed_before_a_preflight_took_its_node_is_not_bound_there(env: Env) -> None:
    """The gang service decided before it saw the preflight taint; health's pod took the
    GPUs first. The bind is refused whole (nothing bound, the gang placed again) instead
    of a member failing on the kubelet."""
    node, other = env.nodes[0], env.nodes[1]
    for n in (node, other):
        await _gpu_node(env, n)
    await _gpu_worker(env, "late-0")
    await _gpu_worker(env, "late-1")
    mark, create = _preflight(node)
    async with actuator(env):
        await env.publish(mark)
        assert (await env.result(mark.id)).outcome == "applied"
        await env.publish(create)
        assert (await env.result(create.id)).outcome == "applied"
        gang = bind_gang("late", [("late-0", other), ("late-1", node)])
        await env.publish(gang)
        result = await env.result("late")
    assert result.outcome == "rolled-back", result
    assert f"node {node} carries baton.io/preflight (NoSchedule)" in result.error
    assert await env.node_name("late-0") == "" and await env.node_name("late-1") == ""
    assert await env.pod(f"preflight-{node}") is not None


async def test_a_preflight_pod_waits_for_a_bind_in_flight_on_its_node(env: Env) -> None:
    """A gang's bind onto the node is under way (it checked the node before the taint)
    when health asks for its preflight pod there: the pod waits for the bind, then finds
    the GPUs taken and is not created; the gang keeps the node."""
    node = env.nodes[0]
    await _gpu_node(env, node)
    await _gpu_worker(env, "busy-0")
    mark, create = _preflight(node)
    gate, binding = asyncio.Event(), asyncio.Event()
    api = Api(env.client, tries=2, base=0.01)
    async with actuator(env, api=api):
        real = api.core.create_namespaced_pod_binding

        async def held_bind(*args: Any, **kw: Any) -> Any:
            binding.set()
            await gate.wait()
            return await real(*args, **kw)

        api.core.create_namespaced_pod_binding = held_bind
        await env.publish(bind_gang("busy", [("busy-0", node)]))
        await asyncio.wait_for(binding.wait(), 20)  # the node was checked: no taint yet
        await env.publish(mark)
        assert (await env.result(mark.id)).outcome == "applied"
        await env.publish(create)
        # Without the node's lock the pod would be created now (the GPUs still free);
        # with it, it waits: let the bind go once the pod's result came or 2 s passed.
        with contextlib.suppress(AssertionError):
            await env.result(create.id, within=2.0)
        gate.set()
        bound, made = await env.result("busy"), await env.result(create.id)
    assert bound.outcome == "applied", bound
    assert made.outcome == "failed" and "0 GPU(s) free" in made.error, made
    assert await env.node_name("busy-0") == node
    assert await env.pod(f"preflight-{node}") is None


async def test_a_leaders_action_that_comes_before_its_lease_is_applied_once_the_lease_lands(
    env: Env,
) -> None:
    """health's mark claims an epoch the lease bucket does not hold yet (the lease lands
    0.3 s later): the actuator's read of the bucket misses it, and rather than refuse a
    leader's action it waits, briefly, for the lease on its watch. An epoch no lease ever
    takes is still refused."""
    node = env.nodes[0]
    mark, _ = _preflight(node)
    early = msgspec.structs.replace(mark, epoch=10_000)
    forged = msgspec.structs.replace(mark, id="forged", epoch=20_000)
    async with actuator(env):
        await env.bus.publish(action_subject("c1", early), early, msg_id=early.id)
        await asyncio.sleep(0.3)
        kv = await leases_bucket(env.bus)
        held = Held(holder="test", renewed_at=time.time(), ttl=3600.0, epoch=10_000)
        await kv.create("health", msgspec.json.encode(held))
        assert (await env.result(early.id)).outcome == "applied"
        for n in range(2):
            again = msgspec.structs.replace(forged, id=f"forged-{n}")
            await env.bus.publish(action_subject("c1", again), again, msg_id=again.id)
            refused = await env.result(again.id)
            assert refused.outcome == "failed" and "epoch 20000" in refused.error, refused
    taints = (await env.core.read_node(node)).spec.taints or []
    assert [t.key for t in taints] == ["baton.io/preflight"]


async def test_an_action_applied_before_a_restart_is_answered_from_its_done_record(
    env: Env,
) -> None:
    """The done-records of a burst are looked up together, and each still decides: an id
    applied before a restart is answered ``already`` with no API write, though the
    API state alone would have it applied again."""
    node = env.nodes[0]
    taint = Taint(key="baton.io/test", value="x", effect="NoSchedule")
    burst = [SetTaint(id=f"r{i}", by="admission", at=0.0, node=env.nodes[i], taint=taint,
                      priority="health") for i in range(len(env.nodes))]  # fmt: skip

    def already() -> float:
        labels = {"type": "action.taint.v1", "outcome": "already"}
        return REGISTRY.get_sample_value("baton_actuator_actions_total", labels) or 0.0

    async with actuator(env):
        await env.publish(burst[0])
        assert (await env.result("r0")).outcome == "applied"
    await env.core.patch_node(node, {"spec": {"taints": []}})  # someone took it off
    before = already()
    async with actuator(env):
        for action in burst:
            await env.publish(action, msg_id=f"{action.id}-again")
        deadline = time.monotonic() + 20
        # r0's second result has r0's result msg id: JetStream keeps the first one only
        while already() < before + 1 or any(a.id not in env.results for a in burst):
            assert time.monotonic() < deadline, f"results: {sorted(env.results)}"
            await asyncio.sleep(0.02)
    assert not (await env.core.read_node(node)).spec.taints
    assert [env.results[a.id][-1].outcome for a in burst[1:]] == ["applied"] * (len(burst) - 1)
