"""Forged actions against real nats-server auth (the users ``baton nats-config`` makes)
and the actuator: a service's own credentials, on subjects the server lets it publish
on, cannot get an action applied that is not its to ask for, nor one off its lease."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kubernetes_asyncio.client import CoreV1Api

from baton.proto import subjects
from baton.proto.actions import AnyAction, Cordon, CreatePod, PodTemplate, SetTaint
from baton.proto.deadletter import DeadLetter
from baton.proto.k8s import Taint, Toleration
from baton.services.actuator import core as actuator_core
from baton.services.actuator import main as actuator
from baton.services.actuator.calling import Api
from tests.connected.test_nats_auth import NODE, collect_results, secured_nats
from tests.pipeline import stop
from tests.support.actions import take_lease
from tests.support.sim import running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(90)]
C = "c1"
NS = "team-a"


def evil(id_: str, *, by: str, epoch: int) -> CreatePod:
    """A pod pinned to a GPU node that tolerates everything (what the finding created)."""
    pod = PodTemplate(
        namespace=NS, name=id_, node_name=NODE, tolerations=(Toleration(operator="Exists"),)
    )
    return CreatePod(id=id_, by=by, at=0.0, epoch=epoch, priority="health", pod=pod)


async def test_forged_kinds_producers_and_epochs_are_refused_and_dead_lettered(
    tmp_path: Path,
) -> None:
    async with secured_nats(tmp_path) as nats_, running_sim() as sim:
        client = await sim.api_client()
        core_api = CoreV1Api(client)
        await core_api.create_namespace({"metadata": {"name": NS}})
        await core_api.create_node({"metadata": {"name": NODE}})
        admin = await nats_.bus("admin", name="test")
        await admin.ensure_streams()
        epoch = {
            name: await take_lease(admin, name)
            for name in ("gang", "bandwidth", "reporter", "health", "balloon", "admission")
        }
        bus = await nats_.bus("actuator")
        limits = actuator_core.Limits(qps=0, backoff_base=0.05)
        runner = actuator.runner(
            bus,
            actuator.Settings(cluster=C, qps=0),
            api=Api(client, tries=2, base=0.01),
            limits=limits,
        )
        task = asyncio.create_task(runner.run(), name="actuator")
        noexecute = Taint(key="test/forged", effect="NoExecute")
        base = f"baton.{C}.action"
        e = epoch
        taint = SetTaint(id="via-bandwidth", by="bandwidth", at=0.0, epoch=e["bandwidth"],
                         node=NODE, taint=noexecute)  # fmt: skip
        cordon = Cordon(id="via-reporter", by="reporter", at=0.0, epoch=e["reporter"], node=NODE)
        # (credential, subject the server lets it publish on, body, what the refusal names)
        forged: list[tuple[str, str, AnyAction, str]] = [
            ("gang", f"{base}.bind-gang.gang.{NS}.g", evil("via-gang", by="gang", epoch=e["gang"]),
             "the body is create-pod, the subject says bind-gang"),
            ("bandwidth", f"{base}.annotate.bandwidth.{NODE}", taint,
             "the body is taint, the subject says annotate"),
            ("reporter", f"{base}.event.reporter.{NODE}", cordon,
             "the body is cordon, the subject says event"),
            ("health", f"{base}.create-pod.health.{NS}.as-balloon",
             evil("as-balloon", by="balloon", epoch=e["balloon"]),
             "the body says by='balloon', the subject 'health'"),
            ("health", f"{base}.create-pod.health.{NS}.epoch-zero",
             evil("epoch-zero", by="health", epoch=0), "carries no lease epoch"),
            ("health", f"{base}.create-pod.health.{NS}.epoch-ahead",
             evil("epoch-ahead", by="health", epoch=e["health"] + 1000), "is ahead of its lease's"),
        ]  # fmt: skip
        dead = admin.consume(subjects.wildcard(C, subjects.DEADLETTER, ">"), type_=DeadLetter)
        try:
            for user, subject, body, _ in forged:
                sender = await nats_.bus(user)
                await sender.publish(subject, body, msg_id=body.id)  # stored: the server allows it
                await sender.close()
            admission = await nats_.bus("admission")
            allowed = SetTaint(id="allowed", by="admission", at=0.0, epoch=epoch["admission"],
                               node=NODE, taint=Taint(key="test/allowed"))  # fmt: skip
            await admission.publish(f"{base}.taint.admission.{NODE}", allowed, msg_id=allowed.id)
            await admission.close()
            results = {r.action_id: r for r in await collect_results(admin, want=len(forged) + 1)}
            letters = [(await asyncio.wait_for(anext(aiter(dead)), 20)).event for _ in forged]
        finally:
            await dead.close()
            await stop(task, within=15.0, what="actuator")
            await bus.close()
            await admin.close()
        try:
            assert results["allowed"].outcome == "applied", results["allowed"]
            for _, _, body, named in forged:
                outcome = results[body.id]
                assert outcome.outcome == "failed" and named in outcome.error, outcome
            assert {letter.error_class for letter in letters} == {"bad-input"}
            assert sorted(letter.reason for letter in letters) == sorted(
                results[b.id].error for _, _, b, _ in forged
            )
            node = client.sanitize_for_serialization(await core_api.read_node(NODE))
            assert [t["key"] for t in node["spec"].get("taints") or []] == ["test/allowed"]
            assert not node["spec"].get("unschedulable")
            pods = await core_api.list_namespaced_pod(NS)
            assert [p.metadata.name for p in pods.items] == []
        finally:
            await client.close()
