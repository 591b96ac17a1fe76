"""The simulated cloud seen through the API, as an autoscaler sees it: MachineDeployment
bounds, scale beyond quota, machines that join NotReady."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client

from baton.services.simcluster.world import spec
from baton.services.simcluster.world.topology import MAX_SIZE, MIN_SIZE
from tests.pipeline import until
from tests.support.sim import running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]
CAPI = ("cluster.x-k8s.io", "v1beta1", "default", "machinedeployments")
MERGE = "application/merge-patch+json"
CLUSTER = {
    "delays": {"provisioning_s": 30},
    "pools": [
        {"name": "h100", "count": 2, "min_size": 1, "max_size": 10, "quota": 6},
        {"name": "cpu", "count": 1, "gpus": 0, "rdma": 0, "not_ready_share": 1.0},
    ],
}


def ready(node: Any) -> str:
    return str(next(c.status for c in node.status.conditions if c.type == "Ready"))


async def test_scale_beyond_quota_waits_and_not_ready_joins_are_not_ready_replicas() -> None:
    async with running_sim(spec=spec.from_dict(CLUSTER), speed=100) as sim:
        api_client = await sim.api_client()
        async with api_client:
            custom, core = client.CustomObjectsApi(api_client), client.CoreV1Api(api_client)
            md = await custom.get_namespaced_custom_object(*CAPI, "h100")
            bounds = md["metadata"]["annotations"]
            assert (bounds[MIN_SIZE], bounds[MAX_SIZE]) == ("1", "10")
            for name, replicas in (("h100", 8), ("cpu", 2)):
                await custom.patch_namespaced_custom_object_scale(
                    *CAPI, name, {"spec": {"replicas": replicas}}, _content_type=MERGE
                )

            def settled(name: str, ready: int) -> Callable[[], Awaitable[Any]]:
                async def probe() -> Any:
                    md = await custom.get_namespaced_custom_object(*CAPI, name)
                    return md["status"] if md["status"]["readyReplicas"] == ready else None

                return probe

            h100 = await until(settled("h100", 6), what="h100: 6 of 8 ready (quota 6)")
            assert h100["replicas"] == 8 and h100["phase"] == "ScalingUp"
            assert h100["conditions"][0]["reason"] == "QuotaExceeded"

            async def cpu_nodes() -> Any:
                nodes = await core.list_node(label_selector="baton.io/pool=cpu")
                return nodes.items if len(nodes.items) == 2 else None

            nodes = await until(cpu_nodes, what="the second cpu node joined")
            assert sorted(ready(n) for n in nodes) == ["False", "True"]
            cpu = await until(settled("cpu", 1), what="cpu: 1 of 2 ready")
            assert (cpu["replicas"], cpu["conditions"][0]["reason"]) == (2, "WaitingForMachines")
