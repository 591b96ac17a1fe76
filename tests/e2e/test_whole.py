"""The whole system at 1,000 nodes, functional only: `baton up` as a user starts it
(NATS, simcluster, every service, the simulated agents), every node through its first
preflight, work placed in whole gangs, no lease lost, nothing over-allocated.

No timing is asserted (the deadlines only end a stuck run, naming what it waited for);
how fast it gets there is `python -m tests.bench whole` (docs/benchmarks.md).
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import config
from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi

from baton.proto import keys
from tests.chaos.run import _overallocated
from tests.e2e.upping import baton_up, endpoints_of
from tests.pipeline import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

NODES = 1_000


@pytest.fixture
def up(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    with baton_up(tmp_path, "--nodes", str(NODES), "--workload", "synthetic") as running:
        yield running


class Cluster:
    """What the API says now: nodes, pods, PodGroups."""

    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig
        self.nodes: list[Any] = []
        self.pods: list[Any] = []
        self.groups: list[dict[str, Any]] = []

    async def read(self) -> Cluster:
        client = await config.new_client_from_config(config_file=self.kubeconfig,
                                                      persist_config=False)  # fmt: skip
        try:
            core = CoreV1Api(client)
            self.nodes = (await core.list_node()).items
            self.pods = (await core.list_pod_for_all_namespaces()).items
            found = await CustomObjectsApi(client).list_cluster_custom_object(
                "scheduling.x-k8s.io", "v1alpha1", "podgroups"
            )
            self.groups = found["items"]
        finally:
            await client.close()
        return self

    def unvalidated(self) -> list[str]:
        return [n.metadata.name for n in self.nodes
                if any(t.key == keys.PREFLIGHT for t in n.spec.taints or [])]  # fmt: skip

    def partial(self) -> set[str]:
        """Gangs with some members bound (not finished) but fewer than minMember."""
        bound: Counter[str] = Counter()
        for pod in self.pods:
            group = (pod.metadata.labels or {}).get(keys.POD_GROUP)
            if group and pod.spec.node_name and pod.status.phase not in ("Succeeded", "Failed"):
                bound[f"{pod.metadata.namespace}/{group}"] += 1
        need = {f"{g['metadata']['namespace']}/{g['metadata']['name']}":
                int(g.get("spec", {}).get("minMember", 1)) for g in self.groups}  # fmt: skip
        return {key for key, n in bound.items() if 0 < n < need.get(key, 1)}

    def bound(self) -> int:
        return sum(1 for p in self.pods if p.spec.node_name and p.status.phase == "Running")

    def refused(self) -> list[str]:
        """Pods a kubelet refused for want of room: a bind past what the node holds."""
        failed = (p for p in self.pods if p.status.phase == "Failed")
        return [f"{p.metadata.namespace}/{p.metadata.name}: {p.status.reason}" for p in failed
                if (p.status.reason or "").startswith("OutOf")]  # fmt: skip


async def test_a_thousand_nodes_are_validated_and_filled_with_whole_gangs(up: Any) -> None:
    endpoints, process = up
    await until(lambda: endpoints.exists() and "KUBECONFIG" in endpoints.read_text(),
                what="baton up to write its endpoints file", within=180, step=1.0)  # fmt: skip
    cluster = Cluster(endpoints_of(endpoints)["KUBECONFIG"])

    async def validated() -> bool:
        await cluster.read()
        return len(cluster.nodes) == NODES and not cluster.unvalidated()

    async def working() -> bool:
        await cluster.read()
        return cluster.bound() >= NODES  # at least a pod a node on average: gangs placed

    left = "every node through its first preflight (baton.io/preflight gone)"
    await until(validated, what=left, within=600, step=5.0)
    try:
        await until(working, what=f"{NODES} pods running", within=300, step=5.0)
    except AssertionError as exc:  # how far it got, for the one reading the failure
        unbound = sum(1 for p in cluster.pods if not p.spec.node_name)
        raise AssertionError(f"{exc}: {cluster.bound()} running, {unbound} unbound") from None
    assert process.poll() is None, "baton up ended by itself"

    # a gang being bound in one reading is whole in the next: partial in both is not
    first = (await Cluster(cluster.kubeconfig).read()).partial()
    second = await Cluster(cluster.kubeconfig).read()
    assert first & second.partial() == set()
    ok, said = _overallocated(second.pods, second.nodes)
    assert ok, said
    assert second.refused() == []

    assert _leases_lost(endpoints.parent / "up.log") == []


def _leases_lost(up_log: Path) -> list[str]:
    logs = re.search(r"logs in (\S+)", up_log.read_text())
    assert logs is not None, "baton up did not say where it logs"
    return [f"{log.name}: {line}" for log in Path(logs[1]).glob("*.log")
            for line in log.read_text(errors="replace").splitlines()
            if '"lease lost"' in line]  # fmt: skip
