"""The autoscaler on simcluster, through the whole path: bridge -> gang -> autoscaler ->
actuator -> the simulated cloud behind each pool's MachineDeployment. A gang larger than
the free capacity grows its pool by exactly what it needs and then runs whole; a
scale-up whose machines never join is reverted; idle nodes go after the unneeded time,
never below the pool's min size. Short times throughout (seconds, not minutes)."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiException, CoreV1Api, CustomObjectsApi

from baton.libs.bus import Bus
from baton.proto import health, keys, subjects
from baton.proto.autoscaler import AnyAutoscaler, ScaledUp, ScaleRefused, ScaleReverted
from baton.proto.codec import decode
from baton.proto.health import Remediate
from baton.services.admission import main as admission
from baton.services.autoscaler import main as autoscaler
from baton.services.gang import main as gang
from baton.services.simcluster.api.store import ApiError
from baton.services.simcluster.world import spec
from tests.pipeline import running, running_services, until
from tests.support.nats import running_nats
from tests.support.sim import running_sim

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
NS = "research"
PODGROUPS = ("scheduling.x-k8s.io", "v1alpha1", NS, "podgroups")


def cluster(**pool: Any) -> spec.ClusterSpec:
    base = {"name": "h100", "count": 2, "min_size": 1, "max_size": 8, "provisioning_s": 2.0}
    return spec.from_dict({"pools": [{**base, **pool}]})


def settings(**kw: Any) -> autoscaler.Settings:
    base: dict[str, Any] = {"tick_s": 0.2, "unneeded_s": 600.0, "provisioning_timeout_s": 30.0,
                            "mark_machines": False}  # simcluster has no Machines  # fmt: skip
    return autoscaler.Settings(**{**base, **kw})


async def submit_gang(client: Any, name: str, size: int) -> None:
    api = CoreV1Api(client)
    with contextlib.suppress(ApiException):  # 409: already there
        await api.create_namespace({"metadata": {"name": NS}})
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": name}, "spec": {"minMember": size}}  # fmt: skip
    await CustomObjectsApi(client).create_namespaced_custom_object(*PODGROUPS, group)
    for i in range(size):
        container = {"name": "w", "image": "train:1",
                     "resources": {"requests": {"nvidia.com/gpu": "8"}}}  # fmt: skip
        body = {"metadata": {"name": f"{name}-{i}",
                             "labels": {"scheduling.x-k8s.io/pod-group": name}},
                "spec": {"schedulerName": "baton", "containers": [container]}}  # fmt: skip
        await api.create_namespaced_pod(NS, body)


def replicas(sim: Any) -> int:
    try:
        return int(sim.store.get("machinedeployments", "default", "h100")["spec"]["replicas"])
    except ApiError:
        return -1


def nodes(sim: Any) -> int:
    return len(sim.store.list("nodes")[0])


async def decisions(url: str) -> tuple[Bus, list[AnyAutoscaler]]:
    """Every autoscaler decision as it is published (the test reads the list)."""
    bus = await Bus.connect(url, cluster="c1", name="test-watch")
    seen: list[AnyAutoscaler] = []

    async def got(msg: Any) -> None:
        seen.append(decode(msg.data, AnyAutoscaler))

    await bus.nc.subscribe(subjects.wildcard("c1", subjects.AUTOSCALER, ">"), cb=got)
    return bus, seen


async def test_a_gang_larger_than_free_capacity_grows_the_pool_by_exactly_its_need() -> None:
    async with (
        running_nats() as url,
        running_sim(spec=cluster(), speed=1.0) as sim,
        running_services(url, sim) as services,
        running(autoscaler.SPEC, url, settings()),
    ):
        bus, seen = await decisions(url)
        try:
            await submit_gang(services.client, "train", 4)  # 4 nodes' worth; 2 exist

            def running_whole() -> bool:
                pods = sim.store.list("pods", namespace=NS)[0]
                return len(pods) == 4 and all(
                    p.get("status", {}).get("phase") == "Running" for p in pods
                )

            await until(running_whole, within=60, what="all 4 members running")
            assert replicas(sim) == 4 and nodes(sim) == 4  # exactly the need, not more
            ups = [d for d in seen if isinstance(d, ScaledUp)]
            assert [(u.gang, u.pool, u.nodes, u.replicas) for u in ups] == [
                (f"{NS}/train", "default/h100", 2, 4)
            ]
        finally:
            await bus.close()


async def test_a_scale_up_whose_machines_never_join_is_reverted() -> None:
    async with (
        running_nats() as url,
        running_sim(spec=cluster(join_failure_share=1.0), speed=1.0) as sim,
        running_services(url, sim) as services,
        running(autoscaler.SPEC, url, settings(provisioning_timeout_s=3.0, backoff_s=600.0)),
    ):
        bus, seen = await decisions(url)
        try:
            await submit_gang(services.client, "train", 3)
            await until(lambda: replicas(sim) == 3, within=30, what="the pool asked for 3")
            await until(lambda: replicas(sim) == 2, within=30, what="the scale-up reverted to 2")
            await until(
                lambda: any(isinstance(d, ScaleReverted) for d in seen),
                within=10,
                what="the revert published",
            )
            (reverted,) = [d for d in seen if isinstance(d, ScaleReverted)]
            assert reverted.nodes == 1 and "not Ready" in reverted.reason
            await until(
                lambda: any(
                    isinstance(d, ScaleRefused) and "backing off" in d.reason for d in seen
                ),
                within=10,
                what="the gang refused while the pool backs off",
            )
            assert nodes(sim) == 2
        finally:
            await bus.close()


async def test_idle_nodes_are_removed_after_the_unneeded_time_down_to_min_size() -> None:
    async with (
        running_nats() as url,
        running_sim(spec=cluster(count=3, min_size=1), speed=1.0) as sim,
        running_services(url, sim),
        running(autoscaler.SPEC, url, settings(unneeded_s=1.0)),
    ):
        await until(lambda: replicas(sim) == 1 and nodes(sim) == 1, within=60,
                    what="two idle nodes removed, one machine at a time")  # fmt: skip
        left = sim.store.list("nodes")[0]
        marked = [n for n in left if keys.DELETE_MACHINE in n["metadata"].get("annotations", {})]
        assert marked == []  # the marked ones are the ones that went


async def test_a_node_health_asks_to_replace_is_deleted_and_replaced() -> None:
    async with (
        running_nats() as url,
        running_sim(spec=cluster(count=3, min_size=3), speed=1.0) as sim,
        running_services(url, sim),
        running(autoscaler.SPEC, url, settings()),
    ):
        before = {n["metadata"]["name"] for n in sim.store.list("nodes")[0]}
        victim = sorted(before)[0]
        bus = await Bus.connect(url, cluster="c1", name="test-health")
        try:
            ask = Remediate(node=victim, at=time.time(), remedy="replace")
            subject = health.subject("c1", health.REMEDIATE, victim)
            await bus.publish(subject, ask, msg_id=f"replace:{victim}")
        finally:
            await bus.close()

        def replaced() -> set[str]:
            now = {n["metadata"]["name"] for n in sim.store.list("nodes")[0]}
            return now if victim not in now and len(now) == 3 else set()

        now = await until(replaced, within=60, what=f"{victim} gone and a new node joined")
        assert len(now - before) == 1 and replicas(sim) == 3


def test_baton_up_autoscale_grows_the_pool_and_shows_it() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "baton.services.cli", "up", "--nodes", "8", "--workload",
         "synthetic", "--autoscale", "--duration", "45"],
        capture_output=True, text=True, timeout=170, check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    last = output.rsplit("baton up ", 1)[-1]  # the final status block
    assert "autoscaler:ok" in last and "balloon:ok" in last, last
    pool = re.search(r"pool gpu: .*machines (\d+) ready / (\d+) asked, size 4\.\.16", last)
    assert pool is not None, last
    assert int(pool[2]) > 8, last  # the synthetic load (90% of the GPUs) grew the pool


async def test_with_admission_a_gang_larger_than_todays_nodes_is_admitted_and_grown_for() -> None:
    """Admission counts what the pool may grow to (max size 8 nodes), so a 4-node gang on
    2 nodes is admitted, placed only once admitted, and the pool grows for it."""
    gang_settings = gang.Settings(cycle_interval=0.1, require_admission=True)
    async with (
        running_nats() as url,
        running_sim(spec=cluster(), speed=1.0) as sim,
        running_services(url, sim, gang_settings=gang_settings) as services,
        running(admission.SPEC, url, admission.Settings()),
        running(autoscaler.SPEC, url, settings()),
    ):
        await submit_gang(services.client, "train", 4)

        def running_whole() -> bool:
            pods = sim.store.list("pods", namespace=NS)[0]
            return len(pods) == 4 and all(
                p.get("status", {}).get("phase") == "Running" for p in pods
            )

        await until(running_whole, within=60, what="all 4 members running")
        assert replicas(sim) == 4


async def test_a_recorded_run_replays_identically_for_the_autoscaler_and_balloons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Balloons, their deficit and a gang growing the pool: recorded (HISTORY) and
    replayed into fresh cores, the same decisions and actions."""
    from baton.services.balloon import main as balloon
    from baton.services.cli import recording, replay

    held = balloon.Settings(static_nodes=1, priority_class="", tick_s=0.2)
    async with (
        running_nats() as url,
        running_sim(spec=cluster(count=3), speed=1.0) as sim,
        running_services(url, sim) as services,
        running(balloon.SPEC, url, held),
        running(autoscaler.SPEC, url, settings()),
    ):
        await CoreV1Api(services.client).create_namespace({"metadata": {"name": held.namespace}})
        await submit_gang(services.client, "train", 4)
        await until(lambda: replicas(sim) >= 5, within=60, what="the pool grown for the gang")
        path = tmp_path / "run.jsonl"
        with path.open("wb") as file:
            assert await recording.record(url, cluster="c1", out=file) > 0
    capsys.readouterr()
    for service in ("autoscaler", "balloon"):
        code = replay.run(["--from", str(path), "--service", service, "--compare", "--quiet"])
        captured = capsys.readouterr()
        assert code == 0, f"{service}:\n{captured.out}\n{captured.err}"
        assert "compare: identical" in captured.out, captured.out
        checked = re.search(r"identical \((\d+) decisions", captured.out)
        assert checked is not None and int(checked.group(1)) > 0, captured.out
