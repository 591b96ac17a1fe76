"""Dynamic Resource Allocation in gang placement: GPUs a pod claims, devices per member.

Claimed GPUs count like ``nvidia.com/gpu`` requests (``libs.view.claimed``): every pod
and node goes through it, so the search, the view's totals and topology see them as
counted ones.

The devices themselves are chosen when a placement is committed: each member's claims
are allocated on its node (``Devices.allocate``: counts, selectors, ``matchAttribute``),
held until their claims show the allocation, and sent with the bind, which the actuator
writes claims first, then binds, all or nothing. A member whose claims cannot be
allocated on its node undoes the placement; that node is kept from the gang for
``verdict_refresh_s`` and the gang is told why.

A member that shares a claim with a pod placed before it (several pods naming one
ResourceClaim: time-slicing a GPU) asks nothing more for it and goes where the claim
is allocated: a gang whose members' claims are allocated already uses only those
nodes (``pinned``); one whose shared claim is not allocated yet waits for the pod it
is counted on (``libs.view.claimed``).

A gang asking partitions (MIG devices) is tried first on the nodes whose GPUs are
partitioned already (``partitioned_only``), then anywhere: small jobs fill GPUs that
are broken up before they break whole ones, and whole nodes stay whole for gangs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from baton.libs.view import Shape
from baton.libs.view.claimed import Claimed, DeviceEvent
from baton.libs.view.devices import Devices, class_of
from baton.proto.dra import ClaimAllocation
from baton.proto.k8s import Node, Pod, ResourceSliceEvent
from baton.proto.placement import GangUnschedulable, Need
from baton.services.gang.core.gangs import Cluster


@dataclass(slots=True)
class Claims:
    """Claimed GPUs (``libs.view.claimed``) and what placement adds: nodes kept from a
    gang whose claims could not be allocated there."""

    claimed: Claimed = field(default_factory=Claimed)
    # gang key -> (nodes its members' claims could not be allocated on, until)
    misfits: dict[str, tuple[frozenset[str], float]] = field(default_factory=dict)
    partitioned: set[str] = field(default_factory=set)  # nodes with a GPU partitioned now

    @property
    def devices(self) -> Devices:
        return self.claimed.devices

    def node(self, node: Node) -> Node:
        return self.claimed.node(node)

    def pod(self, pod: Pod) -> Pod:
        return self.claimed.pod(pod)

    def forget_pod(self, cl: Cluster, pod: Pod) -> None:
        self.claimed.forget(pod)
        self.recount(cl)

    def on_event(self, cl: Cluster, event: DeviceEvent) -> list[Pod]:
        """A driver's slice, a class or a claim changed: the nodes and pods it counts in
        are counted again. Returns the pods counted again."""
        pods = self.claimed.apply(event)
        node = event.resource_slice.node if isinstance(event, ResourceSliceEvent) else ""
        if (state := cl.nodes.get(node)) is not None:
            cl.upsert_node(self.node(state.node))
        self.recount(cl)
        pods = [p for p in pods if p.key in cl.pods]
        for pod in pods:
            cl.upsert_pod(pod)
        return pods

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
            if why := self.devices.unreadable(pod) or self.claimed.waits(pod):
                return f"{pod.name}: {why}"
        return ""

    def pinned(self, cl: Cluster, keys: Iterable[str]) -> frozenset[str]:
        """Nodes the members' claims are allocated on (a claim shared with a pod placed
        before): the only nodes the gang can use when there are any."""
        nodes: set[str] = set()
        for key in keys:
            pod = cl.pods.get(key)
            if pod is not None and pod.claims:
                nodes |= self.claimed.pinned(pod)
        return frozenset(nodes)

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
                self.release(list(out), cl)
                return {}, (node, f"{pod.name} on {node}: {found}")
            self.devices.hold(key, node, found)
            out[key] = found
        self.recount(cl)
        return out, ("", "")

    def release(self, keys: list[str], cl: Cluster) -> None:
        for key in keys:
            self.devices.release(key)
        self.recount(cl)

    def recount(self, cl: Cluster) -> None:
        """Nodes whose partitions were given or freed: their whole GPUs and partitions
        counted again (a MIG device taken makes its GPU not whole)."""
        for name in self.devices.drain_touched():
            if (state := cl.nodes.get(name)) is not None:
                cl.upsert_node(self.node(state.node))
            if state is not None and self.devices.gpus_broken(name):
                self.partitioned.add(name)
            else:
                self.partitioned.discard(name)

    def partitioned_only(
        self, cl: Cluster, shapes: Iterable[Shape], excluded: frozenset[str]
    ) -> frozenset[str] | None:
        """For a gang asking partitions (MIG devices), the nodes to leave out so that it
        is first tried where GPUs are partitioned already: whole GPUs stay whole for
        gangs. None when it asks none, or no GPU is partitioned."""
        kind = self.devices.kind_of
        if not self.partitioned or not any(
            kind(cls) == "partition"
            for shape in shapes
            for res, _ in shape.requests
            if (cls := class_of(res))
        ):
            return None
        return excluded | (cl.nodes.keys() - self.partitioned)

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


# -- what a gang is told ------------------------------------------------------------------


def _told(gang: str, members: int, reason: str, now: float) -> GangUnschedulable:
    return GangUnschedulable(gang=gang, at=now, reason=reason, need=Need(nodes=0), members=members)


def waiting(gang: str, members: int, why: str, *, now: float) -> GangUnschedulable:
    """Its members' claims are not all made, or ask what Baton cannot read."""
    reason = f"waiting for its members' ResourceClaims ({why}): placed once they can be met"
    return _told(gang, members, reason, now)


def no_devices(gang: str, members: int, why: str, *, now: float) -> GangUnschedulable:
    """A member's claims cannot be allocated on the node it was placed on."""
    reason = (f"placed, but a member's ResourceClaims cannot be allocated there ({why}): "
              "placed again without that node")  # fmt: skip
    return _told(gang, members, reason, now)


def too_many_devices(
    gang: str, members: int, size: int, limit: int, *, now: float
) -> GangUnschedulable:
    """Its bind, with every member's devices, would not fit in one NATS message."""
    reason = (f"its bind would name every member's devices in {size:,} bytes, more than one "
              f"NATS message holds ({limit:,}): split the job into gangs of fewer "
              "members, or claim fewer devices a member")  # fmt: skip
    return _told(gang, members, reason, now)
