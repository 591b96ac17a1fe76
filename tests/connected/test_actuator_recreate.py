"""RecreatePod against a real nats-server, simcluster over HTTP (with its kubelets, so a
deleted running pod lingers, terminating, before it goes) and the real actuator; the
first test also runs Baton's real admission webhook, which refuses a pod that claims
``baton.io/admitted``."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from baton.libs.bus import Bus
from baton.proto import subjects
from baton.proto.actions import (
    ActionResult,
    Annotate,
    AnyAction,
    BindGang,
    Binding,
    RecreatePod,
)
from baton.proto.keys import ADMITTED, RECREATED_FROM
from baton.services.actuator import core
from baton.services.actuator import main as actuator_main
from baton.services.actuator.calling import Api
from baton.services.admission.serving import Webhook, serve_webhook, tls_context
from baton.services.simcluster.api.objects import ApiError as SimApiError
from tests.connected.test_webhook import Served, make_cert, state_with_teams
from tests.support.actions import Producers
from tests.support.nats import running_nats
from tests.support.sim import Sim, running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(90)]

NS = "team-a"  # a namespace of team "a" in the webhook's team config


@dataclass
class Env:
    bus: Bus
    sim: Sim
    client: ApiClient
    nodes: list[str]
    results: dict[str, ActionResult] = field(default_factory=dict)

    @property
    def core(self) -> CoreV1Api:
        return CoreV1Api(self.client)

    async def act(self, action: AnyAction) -> ActionResult:
        """Publish ``action`` as a service does and wait for its result."""
        await Producers(self.bus).publish(action)
        deadline = time.monotonic() + 30
        while action.id not in self.results:
            assert time.monotonic() < deadline, f"no result for {action.id}"
            await asyncio.sleep(0.02)
        return self.results[action.id]

    async def pod(self, name: str) -> dict[str, Any] | None:
        try:
            pod = await self.core.read_namespaced_pod(name, NS)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return self.client.sanitize_for_serialization(pod)  # type: ignore[no-any-return]

    async def live(self, name: str) -> dict[str, Any]:
        pod = await self.pod(name)
        assert pod is not None, f"pod {name} is gone"
        return pod

    async def bind(self, name: str, node: str) -> str:
        """Bind the pod through the actuator; returns its uid."""
        uid = str((await self.live(name))["metadata"]["uid"])
        binding = Binding(namespace=NS, pod=name, uid=uid, node=node)
        bind = BindGang(id=f"bind-{uid}", by="gang", at=0.0, gang=f"{NS}/{name}",
                        bindings=(binding,))  # fmt: skip
        assert (await self.act(bind)).outcome == "applied"
        return uid

    async def recreate(self, id_: str, name: str, uid: str) -> ActionResult:
        action = RecreatePod(id=id_, by="gang", at=0.0, reason="test", gang=f"{NS}/{name}",
                             namespace=NS, pod=name, uid=uid)  # fmt: skip
        return await self.act(action)


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    async with running_nats() as url, running_sim(nodes=4) as sim:
        bus = await Bus.connect(url, cluster="c1", name="test")
        await bus.ensure_streams()
        client = await sim.api_client()
        await CoreV1Api(client).create_namespace({"metadata": {"name": NS}})
        env = Env(bus=bus, sim=sim, client=client, nodes=sim.cluster.node_names())
        sub = bus.consume(subjects.wildcard("c1", subjects.RESULT, ">"), type_=ActionResult)
        actuator_bus = await Bus.connect(url, cluster="c1", name="actuator")
        limits = core.Limits(qps=0, max_attempts=3, backoff_base=0.05)
        actuator = actuator_main.runner(
            actuator_bus, actuator_main.Settings(), api=Api(client, tries=2, base=0.01),
            limits=limits,
        )  # fmt: skip
        tasks = [
            asyncio.create_task(_collect(sub, env.results)),
            asyncio.create_task(actuator.run()),
        ]
        try:
            yield env
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await sub.close()
            await actuator_bus.close()
            await client.close()
            await bus.close()


async def _collect(sub: Any, into: dict[str, ActionResult]) -> None:
    async for msg in sub:
        into[msg.event.action_id] = msg.event
        await msg.ack()


def trainer(name: str, *, gang: str = "", node_choices: list[str] | None = None) -> dict[str, Any]:
    """A bare pod as a user writes it: image, command, args, env, a volume, resources and a
    required node affinity."""
    container = {
        "name": "trainer", "image": "ghcr.io/acme/train:1.4", "command": ["torchrun"],
        "args": ["--nproc-per-node=8", "train.py"],
        "env": [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "EPOCHS", "value": "90"}],
        "resources": {"requests": {"nvidia.com/gpu": "8", "cpu": "8"},
                      "limits": {"nvidia.com/gpu": "8"}},
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
    }  # fmt: skip
    hosts = {"key": "kubernetes.io/hostname", "operator": "In", "values": node_choices or []}
    term = {"matchExpressions": [hosts]}
    labels = {"app": "train", **({"scheduling.x-k8s.io/pod-group": gang} if gang else {})}
    return {
        "metadata": {"name": name, "labels": labels, "annotations": {"note": "mine"}},
        "spec": {
            "schedulerName": "baton", "restartPolicy": "Never", "priority": 100,
            "containers": [container], "volumes": [{"name": "scratch", "emptyDir": {}}],
            "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }  # fmt: skip


WRITTEN = ("containers", "volumes", "affinity", "tolerations", "priority", "schedulerName")


def assert_same_as_written(copy: dict[str, Any], old: dict[str, Any]) -> None:
    assert copy["metadata"]["name"] == old["metadata"]["name"]
    assert copy["metadata"]["uid"] != old["metadata"]["uid"]
    assert not copy["spec"].get("nodeName"), "the copy must be unbound"
    assert copy["status"].get("phase") == "Pending"
    for key in WRITTEN:
        assert copy["spec"][key] == old["spec"][key], key
    assert copy["metadata"]["labels"] == old["metadata"]["labels"]
    assert copy["metadata"]["annotations"]["note"] == "mine"
    assert copy["metadata"]["annotations"][RECREATED_FROM] == old["metadata"]["uid"]


@pytest.fixture
async def admission(env: Env, tmp_path: Path) -> AsyncIterator[Served]:
    """Baton's admission webhook (static team state), configured in simcluster as a
    mutating and a validating webhook for pod creates."""
    cert, key = make_cert(tmp_path)
    served = Served("", Path(cert).read_text(), state_with_teams())  # noqa: ASYNC240 - tiny file
    hook = Webhook(state=lambda: served.state, publish=served.events.append)
    runner, port = await serve_webhook(hook, host="127.0.0.1", port=0, tls=tls_context(cert, key))
    served.url = f"https://127.0.0.1:{port}"
    ca = base64.b64encode(served.ca.encode()).decode()
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
              "resources": ["pods"]}]  # fmt: skip
    custom = CustomObjectsApi(env.client)
    for kind, path in (("Mutating", "/mutate"), ("Validating", "/validate")):
        config = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": f"{kind}WebhookConfiguration",
            "metadata": {"name": "baton"},
            "webhooks": [{"name": "pods.baton.io", "admissionReviewVersions": ["v1"],
                          "sideEffects": "None", "failurePolicy": "Fail", "rules": rules,
                          "clientConfig": {"url": served.url + path, "caBundle": ca}}],
        }  # fmt: skip
        plural = f"{kind.lower()}webhookconfigurations"
        await custom.create_cluster_custom_object("admissionregistration.k8s.io", "v1", plural,
                                                  config)  # fmt: skip
    try:
        yield served
    finally:
        await runner.cleanup()


async def test_an_admitted_bare_pod_comes_back_whole_unbound_and_admissible(
    env: Env, admission: Served
) -> None:
    await env.core.create_namespaced_pod(NS, trainer("solo", node_choices=env.nodes[:2]))
    mark = Annotate(
        id="admit",
        by="admission",
        at=0.0,
        kind="Pod",
        namespace=NS,
        name="solo",
        annotations={ADMITTED: "true"},
    )  # what admission does for a gang of one
    assert (await env.act(mark)).outcome == "applied"
    await env.bind("solo", env.nodes[0])
    old = await env.live("solo")
    assert old["metadata"]["annotations"][ADMITTED] == "true"
    assert old["spec"]["nodeName"] == env.nodes[0]
    assert old["metadata"]["labels"]["baton.io/team"] == "a"  # the webhook mutated it

    result = await env.recreate("r1", "solo", old["metadata"]["uid"])

    assert result.outcome == "applied", result.error
    copy = await env.live("solo")
    assert_same_as_written(copy, old)
    assert ADMITTED not in copy["metadata"]["annotations"]
    rejected = [e for e in admission.events if type(e).__name__ == "PodRejected"]
    assert rejected == []


async def test_recreating_is_idempotent_and_leaves_others_pods_alone(env: Env) -> None:
    await env.core.create_namespaced_pod(NS, trainer("w-0", gang="job", node_choices=env.nodes))
    uid = await env.bind("w-0", env.nodes[1])
    old = await env.live("w-0")

    assert (await env.recreate("r1", "w-0", uid)).outcome == "applied"
    copy = await env.live("w-0")
    assert_same_as_written(copy, old)
    # Applied again under another id (past the seen set): the copy is there already.
    again = await env.recreate("r1-again", "w-0", uid)
    assert again.outcome == "already", again.error
    assert (await env.live("w-0"))["metadata"]["uid"] == copy["metadata"]["uid"]

    # Someone else replaced the pod: it is not ours to touch.
    await env.core.delete_namespaced_pod("w-0", NS, grace_period_seconds=0)
    await env.core.create_namespaced_pod(NS, trainer("w-0", gang="job", node_choices=env.nodes))
    theirs = (await env.live("w-0"))["metadata"]["uid"]
    replaced = await env.recreate("r2", "w-0", copy["metadata"]["uid"])
    assert replaced.outcome == "failed"
    assert "replaced by someone else" in replaced.error and theirs in replaced.error
    assert (await env.live("w-0"))["metadata"]["uid"] == theirs

    gone = await env.recreate("r3", "never-was", "uid-x")
    assert gone.outcome == "failed" and "is gone" in gone.error


async def test_a_pod_with_a_controller_is_only_deleted(env: Env) -> None:
    body = trainer("owned", node_choices=env.nodes)
    body["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                            "uid": "job-uid", "controller": True}]  # fmt: skip
    await env.core.create_namespaced_pod(NS, body)
    uid = await env.bind("owned", env.nodes[2])
    assert (await env.recreate("r-owned", "owned", uid)).outcome == "applied"
    pod = await env.pod("owned")
    assert pod is None or pod["metadata"].get("deletionTimestamp")  # its Job makes a new one


async def test_a_copy_whose_create_failed_is_created_on_the_next_attempt(env: Env) -> None:
    """The old pod is deleted, then the create fails (503) past the in-process retries:
    the action is retried, and the copy kept from the first attempt is created."""
    await env.core.create_namespaced_pod(NS, trainer("w-1", gang="job", node_choices=env.nodes))
    uid = await env.bind("w-1", env.nodes[3])
    old = await env.live("w-1")
    refused: list[str] = []

    async def hook(op: str, res: Any, obj: dict[str, Any], _: Any, **__: Any) -> dict[str, Any]:
        if res.plural == "pods" and op == "CREATE" and len(refused) < 2:
            refused.append(obj["metadata"]["name"])
            raise SimApiError(503, "ServiceUnavailable", "webhook not ready")
        return obj

    env.sim.server.admission.append(hook)
    result = await env.recreate("r-flaky", "w-1", uid)

    assert refused == ["w-1", "w-1"]  # the one in-process retry (tries=2) failed too
    assert (result.outcome, result.attempts) == ("applied", 2), result.error
    assert_same_as_written(await env.live("w-1"), old)
