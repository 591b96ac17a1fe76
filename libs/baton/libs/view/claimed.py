"""GPUs asked through DRA claims, counted like ``nvidia.com/gpu`` requests; MIG devices
counted by DeviceClass.

A pod that asks for GPUs through ResourceClaims (``spec.resourceClaims``) instead of
``nvidia.com/gpu`` counts as asking the GPUs its claims ask (``Devices.gpus_claimed``),
and a node the GPU driver publishes devices for has at least that many GPUs
allocatable (``Devices.node_gpus``). The cores that count GPUs (gang's placement,
admission's quotas) pass every pod and node through here, so claimed GPUs are counted
exactly as counted ones, and each pod's count is redone when its claims or the
DeviceClasses change. Devices of other classes (MIG devices, NICs) count by class as
``<class>.deviceclass.resource.k8s.io/devices``, of which a node has those it publishes
(``Devices.class_devices``: a MIG device only while its GPU is not given whole), and a
GPU partitioned is out of the node's ``nvidia.com/gpu`` (``Devices.gpus_broken``).
``Devices.touched`` names the nodes whose counts so changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from baton.libs.view.devices import Devices
from baton.proto.k8s import (
    GPU,
    DeviceClassEvent,
    Node,
    Pod,
    ResourceClaimEvent,
    ResourceSliceEvent,
)

DeviceEvent = ResourceSliceEvent | DeviceClassEvent | ResourceClaimEvent


@dataclass(slots=True)
class Claimed:
    """The devices, and the pods with claims as the bridge sent them."""

    devices: Devices = field(default_factory=Devices)
    sent: dict[str, Pod] = field(default_factory=dict)  # pod key -> as sent (pods with claims)
    users: dict[str, str] = field(default_factory=dict)  # "<ns>/<claim>" -> pod key

    def node(self, node: Node) -> Node:
        """``node`` with at least as many GPUs allocatable as the GPU driver publishes,
        less those partitioned now, and its other devices by DeviceClass (``DEVICES``)."""
        devices = self.devices
        published = devices.node_gpus(node.name)
        if not published:
            return node
        broken, parts = devices.gpus_broken(node.name), devices.class_devices(node.name)
        gpus = max(published, node.allocatable.get(GPU, 0)) - broken
        if gpus == node.allocatable.get(GPU, 0) and not parts:
            return node
        return msgspec.structs.replace(node, allocatable={**node.allocatable, GPU: gpus, **parts})

    def pod(self, pod: Pod) -> Pod:
        """``pod`` (as the bridge sent it) asking the GPUs its claims ask beside its own,
        and its other devices (MIG devices, NICs) by DeviceClass."""
        if not pod.claims:
            self.sent.pop(pod.key, None)
            return pod
        self.sent[pod.key] = pod
        for entry in pod.claims:
            if entry.claim:
                self.users[f"{pod.namespace}/{entry.claim}"] = pod.key
        claimed = self.devices.claimed(pod)
        if not claimed:
            return pod
        requests = dict(pod.requests)
        for key, count in claimed.items():
            name = GPU if key == "gpu" else key
            requests[name] = requests.get(name, 0) + count
        return msgspec.structs.replace(pod, requests=requests)

    def ready(self, pod: Pod) -> bool:
        """Every claim the pod names is made and seen (a pod without claims: True)."""
        return not pod.claims or not isinstance(self.devices.claims_of(pod), str)

    def forget(self, pod: Pod) -> None:
        self.sent.pop(pod.key, None)
        self.devices.release(pod.key)
        for entry in pod.claims:
            self.users.pop(f"{pod.namespace}/{entry.claim}", None)

    def apply(self, event: DeviceEvent) -> list[Pod]:
        """A driver's slice, a class or a claim changed: the pods whose count may have
        changed, counted again (a slice's node: pass it through ``node`` again)."""
        seen = self.devices.kinds_changed
        self.devices.apply(event)
        match event:
            case ResourceClaimEvent(resource_claim=claim):
                key = self.users.get(claim.key)
                keys = [key] if key is not None else []
            case DeviceClassEvent():
                keys = list(self.sent)
            case ResourceSliceEvent(resource_slice=piece) if piece.node:
                self.devices.on_node(piece.node)  # a new kind of node may change what classes are
                keys = list(self.sent) if self.devices.kinds_changed != seen else []
            case _:
                keys = []
        return [self.pod(self.sent[k]) for k in keys if k in self.sent]
