"""Dynamic Resource Allocation in gang placement: GPUs a pod claims, devices per member.

A pod that asks for GPUs through ResourceClaims (``spec.resourceClaims``) instead of
``nvidia.com/gpu`` counts, for placement, as asking that many GPUs: its requests carry
the GPUs its claims ask (``Devices.gpus_claimed``), and a node the GPU driver publishes
devices for has at least that many GPUs allocatable (``Devices.node_gpus``). So the
search, quotas of the shared view and topology see claimed GPUs like counted ones.

The devices themselves are chosen when a placement is committed: each member's claims
are allocated on its node (``Devices.allocate``: counts, selectors, ``matchAttribute``),
held until their claims show the allocation, and sent with the bind, which the actuator
writes claims first, then binds, all or nothing. A member whose claims cannot be
allocated on its node undoes the placement; that node is kept from the gang for
``verdict_refresh_s`` and the gang is told why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from baton.libs.view.devices import Devices
from baton.proto.dra import ClaimAllocation
from baton.proto.k8s import (
    GPU,
    DeviceClassEvent,
    Node,
    Pod,
    ResourceClaimEvent,
    ResourceSliceEvent,
)
from baton.services.gang.core.gangs import Cluster

DeviceEvent = ResourceSliceEvent | DeviceClassEvent | ResourceClaimEvent


@dataclass(slots=True)
class Claims:
    """The devices, and what the gang core added to pods and nodes because of them."""

    devices: Devices = field(default_factory=Devices)
    extra: dict[str, int] = field(default_factory=dict)  # pod key -> GPUs its claims added
    users: dict[str, str] = field(default_factory=dict)  # "<ns>/<claim>" -> pod key
    # gang key -> (nodes its members' claims could not be allocated on, until)
    misfits: dict[str, tuple[frozenset[str], float]] = field(default_factory=dict)

    def node(self, node: Node) -> Node:
        """``node`` with at least as many GPUs allocatable as the GPU driver publishes."""
        published = self.devices.node_gpus(node.name)
        if published <= node.allocatable.get(GPU, 0):
            return node
        return msgspec.structs.replace(node, allocatable={**node.allocatable, GPU: published})

    def pod(self, pod: Pod) -> Pod:
        """``pod`` as the bridge sent it, asking the GPUs its claims ask beside its own."""
        for entry in pod.claims:
            if entry.claim:
                self.users[f"{pod.namespace}/{entry.claim}"] = pod.key
        claimed = self.devices.gpus_claimed(pod) if pod.claims else 0
        if not claimed:
            self.extra.pop(pod.key, None)
            return pod
        self.extra[pod.key] = claimed
        gpus = pod.requests.get(GPU, 0) + claimed
        return msgspec.structs.replace(pod, requests={**pod.requests, GPU: gpus})

    def forget_pod(self, pod: Pod) -> None:
        self.extra.pop(pod.key, None)
        self.devices.release(pod.key)
        for entry in pod.claims:
            self.users.pop(f"{pod.namespace}/{entry.claim}", None)

    def on_event(self, cl: Cluster, event: DeviceEvent) -> list[Pod]:
        """A driver's slice, a class or a claim changed: the nodes and pods it counts in
        are counted again. Returns the pods counted again."""
        self.devices.apply(event)
        match event:
            case ResourceSliceEvent(resource_slice=piece):
                if (state := cl.nodes.get(piece.node)) is not None:
                    cl.upsert_node(self.node(state.node))
                return []
            case ResourceClaimEvent(resource_claim=claim):
                key = self.users.get(claim.key)
                keys = [key] if key is not None else []
            case DeviceClassEvent():
                keys = list(self.extra)
        pods = [self.pod(self._as_sent(cl.pods[k])) for k in keys if k in cl.pods]
        for pod in pods:
            cl.upsert_pod(pod)
        return pods

    def _as_sent(self, pod: Pod) -> Pod:
        added = self.extra.get(pod.key, 0)
        if not added:
            return pod
        gpus = pod.requests[GPU] - added
        return msgspec.structs.replace(pod, requests={**pod.requests, GPU: gpus})

    def not_ready(self, cl: Cluster, keys: list[str]) -> str:
        """Why a member of ``keys`` cannot be placed: its claims are not all made, or ask
        what no node's devices could give as Baton reads them ("" when neither)."""
        for key in keys:
            pod = cl.pods.get(key)
            if pod is None or not pod.claims:
                continue
            found = self.devices.claims_of(pod)
            if isinstance(found, str):
                return f"{pod.name}: {found}"
            if why := self.devices.unreadable(pod):
                return f"{pod.name}: {why}"
        return ""

    def allocate(
        self, cl: Cluster, nodes: dict[str, str]
    ) -> tuple[dict[str, tuple[ClaimAllocation, ...]], tuple[str, str]]:
        """Every claiming member's devices on its node, held at once (the next member on
        the same node gets others). Returns the allocations by pod key and ("", ""), or
        nothing and the (node, why) of the first member that has none (nothing held)."""
        out: dict[str, tuple[ClaimAllocation, ...]] = {}
        for key, node in sorted(nodes.items()):
            pod = cl.pods.get(key)
            if pod is None or not pod.claims:
                continue
            self.devices.release(key)  # what an earlier placement of it held
            found = self.devices.allocate(node, pod)
            if isinstance(found, str):
                self.release(list(out))
                return {}, (node, f"{pod.name} on {node}: {found}")
            self.devices.hold(key, node, found)
            out[key] = found
        return out, ("", "")

    def release(self, keys: list[str]) -> None:
        for key in keys:
            self.devices.release(key)

    def kept_from(self, gang: str, now: float) -> frozenset[str]:
        """Nodes the gang's claims could not be allocated on lately."""
        nodes, until = self.misfits.get(gang, (frozenset(), 0.0))
        if now >= until:
            self.misfits.pop(gang, None)
            return frozenset()
        return nodes

    def misfit(self, gang: str, node: str, *, now: float, for_s: float) -> None:
        nodes = self.kept_from(gang, now)
        self.misfits[gang] = (nodes | {node}, now + for_s)
