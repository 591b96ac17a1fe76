"""``baton status`` against a real nats-server: what it reads off the bus."""

from __future__ import annotations

import argparse

import pytest

from baton.libs.bus import Bus
from baton.proto import keys, subjects
from baton.proto.actions import (
    ActionResult,
    CreatePod,
    PodTemplate,
    action_subject,
    result_subject,
)
from baton.proto.k8s import NodeEvent
from baton.services.cli.status import status
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
