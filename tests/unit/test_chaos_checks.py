"""The chaos run's invariant checks, on objects as the Kubernetes client returns them."""

from __future__ import annotations

from types import SimpleNamespace as NS
from typing import Any

import pytest

from tests.chaos.run import _overallocated

pytestmark = pytest.mark.unit


def pod(name: str, node: str, gpus: int, phase: str = "Running", reason: str = "") -> Any:
    container = NS(resources=NS(requests={"nvidia.com/gpu": str(gpus)}))
    return NS(metadata=NS(namespace="team-a", name=name),
              spec=NS(node_name=node, containers=[container]),
              status=NS(phase=phase, reason=reason))  # fmt: skip


def node(name: str, gpus: int) -> Any:
    return NS(metadata=NS(name=name), status=NS(allocatable={"nvidia.com/gpu": str(gpus)}))


def test_a_pod_the_kubelet_refused_for_want_of_gpus_counts_as_over_allocated() -> None:
    """gang bound a 9th GPU to an 8-GPU node: the kubelet failed the pod (OutOf...), so
    the node's running pods fit, but the over-allocation happened."""
    nodes = [node("gpu-1", 8)]
    fits = [pod("w-0", "gpu-1", 8), pod("done", "gpu-1", 8, phase="Failed", reason="Error")]
    assert _overallocated(fits, nodes)[0]
    ok, says = _overallocated([*fits, pod("w-1", "gpu-1", 1, "Failed", "OutOfnvidia.com/gpu")],
                              nodes)  # fmt: skip
    assert not ok
    assert "1 pods refused by the kubelet: ['team-a/w-1 on gpu-1 (OutOfnvidia.com/gpu)']" in says
