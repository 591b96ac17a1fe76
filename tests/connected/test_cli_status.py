"""``baton status`` against a real nats-server: what it reads off the bus."""

from __future__ import annotations

import argparse
import asyncio

import pytest

from baton.libs.bus import Bus
from baton.libs.runner import Runner
from baton.proto import keys, subjects
from baton.proto.actions import (
    ActionResult,
    CreatePod,
    PodTemplate,
    action_subject,
    result_subject,
)
from baton.proto.k8s import NodeEvent
from baton.services.admission import main as admission
from baton.services.cli.status import status
from tests.pipeline import until
from tests.support.builders import node
from tests.support.nats import running_nats

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]

C = "c1"
REFUSED = 'admission webhook "pods.baton.io" denied the request: namespace baton-system has no team'


async def test_status_names_a_node_whose_preflight_pod_the_api_server_refused() -> None:
    async with running_nats() as url:
        bus = await Bus.connect(url, cluster=C, name="test")
        try:
            await bus.ensure_streams()
            for name in ("gpu-00001", "gpu-00002"):
                built = node(name).tainted(keys.PREFLIGHT).build()
                await bus.publish(subjects.subject(C, subjects.K8S, "node", name),
                                  NodeEvent(op="upsert", at=1.0, node=built))  # fmt: skip
            pod = PodTemplate(namespace="baton-system", name="preflight-gpu-00001-0a1b2c3d",
                              labels={keys.PREFLIGHT: "true"}, node_name="gpu-00001")  # fmt: skip
            ask = CreatePod(id="preflight-1", by="health", at=2.0, pod=pod)
            await bus.publish(action_subject(C, ask), ask)
            answer = ActionResult(action_id=ask.id, action_type="action.create-pod.v1",
                                  by="actuator", at=3.0, outcome="failed",
                                  error=REFUSED)  # fmt: skip
            await bus.publish(result_subject(action_subject(C, ask)), answer)
        finally:
            await bus.close()
        shown = await status(argparse.Namespace(nats=url, cluster=C))
    assert "validating 2 (gpu-00001, gpu-00002)" in shown
    assert f"preflight pod refused 1 (gpu-00001): {REFUSED}" in shown


async def test_status_says_admission_serves_no_webhook_without_a_certificate() -> None:
    """Admission without a certificate runs quotas and taints but serves no webhook:
    ``baton status`` says so, with the settings that would give it one."""
    async with running_nats() as url:
        settings = admission.Settings(nats_url=url, cluster=C, ops_port=0)
        bus = await Bus.connect(url, cluster=C, name="admission")
        try:
            await bus.ensure_streams()
            runner = Runner(admission.SPEC, bus=bus, settings=settings)
            tasks = [asyncio.create_task(runner.run()),
                     asyncio.create_task(admission.beside(settings, bus).run(runner))]  # fmt: skip

            async def said() -> str | None:
                shown = await status(argparse.Namespace(nats=url, cluster=C))
                return shown if "webhook" in shown else None

            try:
                shown = await until(said, within=30, step=0.2, what="baton status's webhook line")
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await bus.close()
    assert "OFF on " in shown and (
        ": no TLS certificate (BATON_ADMISSION_TLS_CERT or _TLS_SELF_SIGNED_DIR); "
        "quotas and team taints still run") in shown, shown  # fmt: skip
