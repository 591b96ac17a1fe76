"""Which pods run on this node, and which pod holds which GPU: for zombie GPU memory.

On a real node this is the kubelet's pod-resources API (gRPC ``v1.PodResourcesLister/List``
on ``/var/lib/kubelet/pod-resources/kubelet.sock``): every pod with its containers and
their devices, GPUs by uuid under ``nvidia.com/gpu``. It is local to the node, so the
agent still never talks to the API server. That client is not built yet: this backend
reports itself unavailable, and GPU reports carry no ``zombie_mib``. The simulated
backend has the pods, so zombie memory is real there.
"""

from __future__ import annotations

from typing import Final

from baton.services.agent.core.readings import AnyReading, Backend

NAME: Final = "pods"
SOCKET: Final = "/var/lib/kubelet/pod-resources/kubelet.sock"
NOT_BUILT: Final = (
    "the kubelet pod-resources client is not built yet: zombie GPU memory is not computed"
)


class PodResources:
    """The pod-resources backend (a stub): says once that it is unavailable, and why."""

    name = NAME

    def __init__(self, socket: str = SOCKET) -> None:
        self.socket = socket
        self._said = False

    def poll(self, at: float) -> list[AnyReading]:
        if self._said:
            return []
        self._said = True
        return [Backend(at=at, name=NAME, reason=NOT_BUILT)]
