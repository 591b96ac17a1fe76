"""What a gang no node can take is told, end to end on simcluster (bridge -> gang ->
the reporter): the nodes refused by each reason, in kube-scheduler's FailedScheduling
words ("0/16 nodes are available: 16 node(s) didn't match Pod's node
affinity/selector."), on the waiting members' PodScheduled condition and in a
FailedScheduling Event, rather than "need N more nodes" while the free nodes are
the ones its selector leaves out."""

from __future__ import annotations

import pytest

from baton.proto import keys
from tests.e2e.test_gang_formats import PLUGINS, member
from tests.e2e.test_gang_quorum import TOLD, condition, failed_event
from tests.pipeline import stack, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


async def test_a_selector_that_leaves_free_nodes_out_is_named_with_per_reason_counts() -> None:
    """Mirrors kube-scheduler's FitError message (``0/N nodes are available:`` and one
    count per reason, sorted), as a pod with a nodeSelector no node matches gets it in
    its FailedScheduling Event: two 8-GPU members asking ``pool=a`` on four free
    8-GPU nodes of which one is labelled so."""
    async with stack(nodes=4, namespaces=["ml"], reporter_settings=TOLD) as s:
        api, custom, sim = s.api, s.custom, s.sim
        nodes = sorted(n.metadata.name for n in (await api.list_node()).items)
        await api.patch_node(nodes[0], {"metadata": {"labels": {"pool": "a"}}})
        body = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                "metadata": {"name": "job"}, "spec": {"minMember": 2}}  # fmt: skip
        await custom.create_namespaced_custom_object(*PLUGINS, "ml", "podgroups", body)
        for i in range(2):
            pod = member(f"job-{i}", gpus=8, labels={keys.POD_GROUP: "job"},
                         nodeSelector={"pool": "a"})  # fmt: skip
            await api.create_namespaced_pod("ml", pod)
        said = (
            "1 of 2 members fit; 1/4 nodes are available: 3 node(s) didn't match Pod's node "
            "affinity/selector (nodeSelector pool=a)"
        )
        await until(lambda: said in condition(sim, "ml", "job-0"), within=60,
                    what="job-0's PodScheduled condition naming the selector")  # fmt: skip
        await until(lambda: failed_event(sim, "ml", "job-1", said), within=30,
                    what="a FailedScheduling Event on job-1 naming the selector")  # fmt: skip
