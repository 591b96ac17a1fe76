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

A claim several pods name (``resourceClaimName``: time-slicing one GPU among small
jobs, as Kubernetes shares a claim) is counted once, on one of them (``charged``):
the first pod it is reserved for, else the first pod seen naming it. The others ask
nothing for it; they follow the claim to its node once it is allocated
(``pinned``), and wait until then (``waits``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from baton.libs.view.devices import Devices
from baton.proto.dra import ResourceClaim
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
    # "<ns>/<claim>" -> the pods naming it, in the order first seen
    users: dict[str, dict[str, None]] = field(default_factory=dict)

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
                self.users.setdefault(f"{pod.namespace}/{entry.claim}", {})[pod.key] = None
        claimed = self.devices.claimed(pod, shared=self._shared(pod))
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

    def charged(self, claim: ResourceClaim) -> str:
        """The pod a claim's devices are counted on ("" when no pod names it): of the
        pods naming it, the first it is reserved for, else the first seen."""
        users = self.users.get(claim.key)
        if not users:
            return ""
        first = next(iter(users))
        if len(users) == 1 or not claim.reserved_for:
            return first
        uids = {self.sent[k].uid: k for k in users if k in self.sent}
        return next((uids[u] for u in claim.reserved_for if u in uids), first)

    def _shared(self, pod: Pod) -> list[str]:
        """Keys of the pod's claims counted on another pod."""
        out = []
        for entry in pod.claims:
            key = f"{pod.namespace}/{entry.claim}"
            users = self.users.get(key)
            if users is not None and len(users) > 1:
                claim = self.devices.claims.get(key)
                if claim is not None and self.charged(claim) != pod.key:
                    out.append(key)
        return out

    def pinned(self, pod: Pod) -> set[str]:
        """Nodes the pod's claims are allocated on: where it can run."""
        found = self.devices.claims_of(pod) if pod.claims else ()
        return set() if isinstance(found, str) else {c.node for c in found if c.node}

    def waits(self, pod: Pod) -> str:
        """Why the pod waits for a claim it shares ("" when it does not): the pod the
        claim is counted on is placed first, and allocates it."""
        for key in self._shared(pod):
            claim = self.devices.claims[key]
            if not claim.allocated:
                leader = self.charged(claim).partition("/")[2]
                return (f"shares ResourceClaim {key} with pod {leader}, placed first: it "
                        "follows the claim to its node once allocated")  # fmt: skip
        return ""

    def forget(self, pod: Pod) -> None:
        self.sent.pop(pod.key, None)
        self.devices.release(pod.key)
        for entry in pod.claims:
            key = f"{pod.namespace}/{entry.claim}"
            users = self.users.get(key)
            if users is not None:
                users.pop(pod.key, None)
                if not users:
                    del self.users[key]

    def apply(self, event: DeviceEvent) -> list[Pod]:
        """A driver's slice, a class or a claim changed: the pods whose count may have
        changed, counted again (a slice's node: pass it through ``node`` again)."""
        seen = self.devices.kinds_changed
        self.devices.apply(event)
        match event:
            case ResourceClaimEvent(resource_claim=claim):  # every pod sharing it
                keys = list(self.users.get(claim.key, ()))
            case DeviceClassEvent():
                keys = list(self.sent)
            case ResourceSliceEvent(resource_slice=piece) if piece.node:
                self.devices.on_node(piece.node)  # a new kind of node may change what classes are
                keys = list(self.sent) if self.devices.kinds_changed != seen else []
            case _:
                keys = []
        return [self.pod(self.sent[k]) for k in keys if k in self.sent]
