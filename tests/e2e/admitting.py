"""The stack the admission e2e tests share: admission (its runner and webhook, registered
in simcluster as Kubernetes would call it), bridge, actuator and gang over a real
nats-server; and the gang objects they submit."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Coroutine, Sequence
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from baton.libs.bus import Bus
from baton.libs.runner import Runner, serve
from baton.libs.runner.leasing import Lease
from baton.libs.runtime.stopping import stuck_tasks, where
from baton.services.actuator import main as actuator_main
from baton.services.admission import main as admission_main
from baton.services.bridge import main as bridge_main
from baton.services.gang import main as gang_main
from tests.connected.test_webhook import make_cert
from tests.support.sim import Sim

STOP_WITHIN_S = 30.0  # a service's stop grace is 10 s; three times that, under load


def common(url: str) -> dict[str, Any]:
    """The settings every service of the stack shares."""
    return {"nats_url": url, "cluster": "c1", "ops_port": 0}


@contextlib.asynccontextmanager
async def tasks(*coros: Coroutine[Any, Any, Any]) -> AsyncIterator[list[asyncio.Task[Any]]]:
    """Run ``coros`` as tasks; on exit cancel them and fail, naming where each waits, if
    any is still running after ``STOP_WITHIN_S`` (a service that ignores its stop)."""
    running = [asyncio.create_task(c) for c in coros]
    try:
        yield running
    finally:
        for task in running:
            task.cancel()
        done, stuck = await asyncio.wait(running, timeout=STOP_WITHIN_S)
        await asyncio.gather(*done, return_exceptions=True)  # their errors, retrieved
        if stuck:
            everything = "\n  ".join(stuck_tasks(besides=asyncio.current_task()))
            raise AssertionError(
                f"{len(stuck)} task(s) still running {STOP_WITHIN_S} s after their cancel: "
                f"{', '.join(where(t) for t in stuck)}\nevery task left:\n  {everything}"
            )


@contextlib.asynccontextmanager
async def admitting(
    url: str,
    sim: Sim,
    custom: client.CustomObjectsApi,
    *,
    teams: str,
    folder: Path,
    cycle_interval: float | None = None,
    beside: Sequence[Coroutine[Any, Any, Any]] = (),
) -> AsyncIterator[Runner[Any]]:
    """Admission with ``teams`` (YAML), its webhook registered, and bridge, actuator and
    gang (``require_admission``), plus ``beside``; yields admission's runner."""
    cert, key = make_cert(folder)
    ca = Path(cert).read_bytes()  # noqa: ASYNC240 - setup, before anything runs
    teams_file = folder / "teams.yaml"
    teams_file.write_text(teams)
    shared = common(url)
    pace = {} if cycle_interval is None else {"cycle_interval": cycle_interval}
    settings = admission_main.Settings(
        **shared, teams_file=str(teams_file), reload_s=60, tls_cert=cert, tls_key=key,
        webhook_host="127.0.0.1", webhook_port=0, **pace,
    )  # fmt: skip
    bus = await Bus.connect(url, cluster="c1", name="admission")
    try:
        await bus.ensure_streams()
        admission = Runner(admission_main.SPEC, bus=bus, settings=settings,
                           lease=Lease(bus, "admission"))  # fmt: skip
        bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        webhook = admission_main.beside(settings, bus, bound=bound)
        gang = gang_main.Settings(**shared, require_admission=True, cycle_interval=0.1)
        async with tasks(
            admission.run(),
            webhook.run(admission),
            bridge_main.serve_bridge(bridge_main.Settings(**shared, kubeconfig=sim.kubeconfig)),
            actuator_main.serve_actuator(
                actuator_main.Settings(**shared, kubeconfig=sim.kubeconfig)
            ),
            serve(gang_main.SPEC, gang),
            *beside,
        ):
            port = await asyncio.wait_for(bound, 10)
            await register_webhooks(custom, port=port, ca=ca)
            yield admission
    finally:
        await bus.close()


def gpu_pod(
    name: str, *, labels: dict[str, str] | None = None, scheduler: str = "", gpus: int = 8
) -> dict[str, Any]:
    """A pod asking for ``gpus`` GPUs (``scheduler`` '': the webhook sets Baton's for a
    gang member)."""
    spec: dict[str, Any] = {"schedulerName": scheduler} if scheduler else {}
    asks = {"nvidia.com/gpu": str(gpus)}
    spec["containers"] = [
        {"name": "c", "image": "x", "resources": {"requests": asks, "limits": asks}}
    ]
    metadata: dict[str, Any] = {"name": name, **({"labels": labels} if labels else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def gang_objects(name: str, members: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": members},
    }
    label = {"scheduling.x-k8s.io/pod-group": name}
    return group, [gpu_pod(f"{name}-{i}", labels=label) for i in range(members)]


async def submit(
    core_api: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    ns: str,
    name: str,
    members: int,
    *,
    priority_class: str = "",
) -> None:
    """A PodGroup and its pods, 8 GPUs each; the webhook sets their scheduler."""
    group, pods = gang_objects(name, members)
    await custom.create_namespaced_custom_object(
        "scheduling.x-k8s.io", "v1alpha1", ns, "podgroups", group
    )
    for pod in pods:
        if priority_class:
            pod["spec"]["priorityClassName"] = priority_class
        created = await core_api.create_namespaced_pod(ns, pod)
        assert created.spec.scheduler_name == "baton"  # set by the mutating webhook


async def register_webhooks(custom: client.CustomObjectsApi, *, port: int, ca: bytes) -> None:
    bundle = base64.b64encode(ca).decode()
    rules = [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]},
        {
            "apiGroups": ["scheduling.x-k8s.io"],
            "apiVersions": ["v1alpha1"],
            "operations": ["CREATE"],
            "resources": ["podgroups"],
        },
    ]
    for kind, plural, path in (
        ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations", "/mutate"),
        ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations", "/validate"),
    ):
        await custom.create_cluster_custom_object(
            "admissionregistration.k8s.io",
            "v1",
            plural,
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {"name": "baton"},
                "webhooks": [
                    {
                        "name": "baton.io",
                        "admissionReviewVersions": ["v1"],
                        "sideEffects": "None",
                        "failurePolicy": "Fail",
                        "rules": rules,
                        "clientConfig": {
                            "url": f"https://127.0.0.1:{port}{path}",
                            "caBundle": bundle,
                        },
                    }
                ],
            },
        )
