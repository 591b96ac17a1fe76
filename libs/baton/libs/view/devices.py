"""The cluster's DRA devices, and allocating a pod's ResourceClaims on one node.

``Devices`` keeps, from the bridge's events, the devices drivers publish per node
(ResourceSlices), the DeviceClasses and the claims with what they hold. ``allocate``
chooses devices for every claim of a pod on a node as Kubernetes' structured-parameters
allocator does, for what Baton reads:

- a request takes ``count`` devices (``count`` 0 is allocationMode All: every device of
  the node that matches, all of them free, and at least one) meeting its DeviceClass's
  selectors and its own;
- a ``matchAttribute`` constraint: the devices of its requests (all the claim's when it
  names none) share one value of the attribute; a device without it cannot take part;
- a device goes to one claim: ones allocated to claims (their own events) or held for
  another pod (``hold``: a decision made, not yet written) are not used;
- the search tries devices in slice order, slices in name order, and backtracks; a
  value fixed by an earlier pick narrows later picks to the devices that have it.

Selectors are CEL; Baton evaluates a subset (``selectors.SUPPORTED``). Where CEL would fail at
run time (an attribute the device lacks, ``<`` between a string and an int), the device
does not meet the selector (Kubernetes fails the whole allocation instead).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from baton.libs.view.allocating import DeviceId, NodeDevice, Search
from baton.libs.view.selectors import SelectorError, compiled
from baton.proto.dra import (
    ClaimAllocation,
    DeviceClass,
    DeviceResult,
    ResourceClaim,
    ResourceSlice,
)
from baton.proto.k8s import DeviceClassEvent, Pod, ResourceClaimEvent, ResourceSliceEvent

GPU_DRIVER = "gpu.nvidia.com"
GPU_TYPE = f"{GPU_DRIVER}/type"  # "gpu", or "mig" for a MIG device of NVIDIA's driver
MEMO_MAX = 4096  # allocations remembered by layout (``Devices._picks``)


@dataclass(slots=True)
class Hold:
    """Devices held for a pod's claims on ``node``: claim key -> devices."""

    node: str
    parts: dict[str, frozenset[DeviceId]]


@dataclass(slots=True)
class Devices:
    """The devices of the cluster's nodes, the DeviceClasses and the claims, kept from events."""

    classes: dict[str, DeviceClass] = field(default_factory=dict)
    claims: dict[str, ResourceClaim] = field(default_factory=dict)  # by "<ns>/<name>"
    nodes: dict[str, dict[str, ResourceSlice]] = field(default_factory=dict)  # node -> name ->
    owners: dict[DeviceId, str] = field(default_factory=dict)  # allocated -> its claim's key
    holds: dict[str, Hold] = field(default_factory=dict)  # by pod key
    held: dict[DeviceId, str] = field(default_factory=dict)  # held device -> pod key
    held_by: dict[str, str] = field(default_factory=dict)  # claim key -> pod key holding
    _slice_node: dict[str, str] = field(default_factory=dict)
    _on_node: dict[str, tuple[NodeDevice, ...]] = field(default_factory=dict)
    # Nodes alike (same drivers, devices, attributes, in order) share a layout number;
    # an allocation found for claims asking the same on a layout with the same devices
    # taken is the same, by position: a gang's members (one template) on a uniform
    # cluster are searched once, not once each (``allocate``).
    _layouts: dict[tuple[object, ...], int] = field(default_factory=dict)
    _layout_of: dict[str, int] = field(default_factory=dict)
    _picks: dict[tuple[object, ...], tuple[tuple[tuple[str, int], ...], ...]] = field(
        default_factory=dict
    )

    def apply(self, event: ResourceSliceEvent | DeviceClassEvent | ResourceClaimEvent) -> None:
        match event:
            case ResourceSliceEvent(op=op, resource_slice=piece):
                self._slice(piece, deleted=op == "delete")
            case DeviceClassEvent(op="delete", device_class=cls):
                self.classes.pop(cls.name, None)
                self._picks.clear()
            case DeviceClassEvent(device_class=cls):
                self.classes[cls.name] = cls
                self._picks.clear()
            case ResourceClaimEvent(op=op, resource_claim=claim):
                self._claim(claim, deleted=op == "delete")

    def _slice(self, piece: ResourceSlice, *, deleted: bool) -> None:
        old = self._slice_node.pop(piece.name, None)
        if old is not None:
            self.nodes[old].pop(piece.name, None)
            if not self.nodes[old]:
                del self.nodes[old]
            self._on_node.pop(old, None)
        if not deleted and piece.node:  # network-attached devices (no node) are not read
            self._slice_node[piece.name] = piece.node
            self.nodes.setdefault(piece.node, {})[piece.name] = piece
            self._on_node.pop(piece.node, None)

    def _claim(self, claim: ResourceClaim, *, deleted: bool) -> None:
        old = self.claims.pop(claim.key, None)
        for device in _ids(old.allocated if old is not None else ()):
            if self.owners.get(device) == claim.key:
                del self.owners[device]
        if not deleted:
            self.claims[claim.key] = claim
            self.owners.update(dict.fromkeys(_ids(claim.allocated), claim.key))
        if (deleted or claim.allocated) and (pod := self.held_by.pop(claim.key, None)):
            hold = self.holds[pod]  # the claim's own event shows it: its hold is redundant
            for device in hold.parts.pop(claim.key, frozenset()):
                self.held.pop(device, None)
            if not hold.parts:
                del self.holds[pod]

    def on_node(self, node: str) -> tuple[NodeDevice, ...]:
        """The node's devices: slices in name order, each's devices in its order."""
        found = self._on_node.get(node)
        if found is None:
            slices = self.nodes.get(node, {})
            found = tuple(
                NodeDevice(id=(s.driver, s.pool, d.name), device=d)
                for s in (slices[name] for name in sorted(slices))
                for d in s.devices
            )
            self._on_node[node] = found
            layout = tuple(
                (d.id[0], d.device.name, tuple(sorted(d.device.attributes.items()))) for d in found
            )
            self._layout_of[node] = self._layouts.setdefault(layout, len(self._layouts))
        return found

    def node_gpus(self, node: str) -> int:
        """The node's devices of GPU_DRIVER that are whole GPUs (type "gpu", or none)."""
        return sum(
            1
            for d in self.on_node(node)
            if d.driver == GPU_DRIVER and d.device.attributes.get(GPU_TYPE, "gpu") == "gpu"
        )

    def claims_of(self, pod: Pod) -> tuple[ResourceClaim, ...] | str:
        """The pod's claims in its ``claims`` order, or why they are not all there yet."""
        out: list[ResourceClaim] = []
        for entry in pod.claims:
            if not entry.claim:
                return f"claim {entry.name!r} not generated yet"
            claim = self.claims.get(f"{pod.namespace}/{entry.claim}")
            if claim is None:
                return f"ResourceClaim {pod.namespace}/{entry.claim} not seen yet"
            out.append(claim)
        return tuple(out)

    def unreadable(self, pod: Pod) -> str:
        """Why no node could ever satisfy the pod's claims as Baton reads them, whatever
        its devices: a request of a DeviceClass that does not exist, one Baton cannot read
        (``firstAvailable``), a selector outside the CEL subset ("" when none)."""
        found = self.claims_of(pod)
        if isinstance(found, str):
            return ""
        for claim in found:
            for r in claim.requests:
                where = f"request {r.name!r} of ResourceClaim {claim.key}"
                cls = self.classes.get(r.device_class)
                if not r.device_class:
                    return f"{where}: Baton reads only requests of one DeviceClass (`exactly`)"
                if cls is None:
                    return f"{where}: DeviceClass {r.device_class!r} does not exist"
                for expression in (*cls.selectors, *r.selectors):
                    if isinstance(err := compiled(expression), SelectorError):
                        return f"{where}: {err}"
        return ""

    def gpus_claimed(self, pod: Pod) -> int:
        """GPUs the pod's claims ask: the counts of requests of a DeviceClass that selects
        GPU_DRIVER's devices (All: the devices it was allocated, else 1); 0 while the
        claims are not all there."""
        found = self.claims_of(pod)
        if isinstance(found, str):
            return 0
        total = 0
        for claim in _unique(found):
            for r in claim.requests:
                cls = self.classes.get(r.device_class)
                if cls is not None and _requires_driver(cls, GPU_DRIVER):
                    allocated = sum(1 for x in claim.allocated if x.request == r.name)
                    total += r.count or max(1, allocated)
        return total

    def hold(self, pod_key: str, node: str, allocations: tuple[ClaimAllocation, ...]) -> None:
        """Count these devices as taken until ``release(pod_key)`` or until each claim's
        own event shows it allocated. Replaces what ``pod_key`` held."""
        self.release(pod_key)
        namespace = pod_key.partition("/")[0]
        parts: dict[str, frozenset[DeviceId]] = {}
        for allocation in allocations:
            key = f"{namespace}/{allocation.name}"
            claim = self.claims.get(key)
            if claim is None or not claim.allocated:
                parts[key] = frozenset(_ids(allocation.results))
                self.held_by[key] = pod_key
                self.held.update(dict.fromkeys(parts[key], pod_key))
        if parts:
            self.holds[pod_key] = Hold(node=node, parts=parts)

    def release(self, pod_key: str) -> None:
        hold = self.holds.pop(pod_key, None)
        for key, devices in hold.parts.items() if hold is not None else ():
            if self.held_by.get(key) == pod_key:
                del self.held_by[key]
            for device in devices:
                if self.held.get(device) == pod_key:
                    del self.held[device]

    def taken(self, node: str, pod_key: str = "") -> dict[DeviceId, str]:
        """The node's devices not free for ``pod_key``: device -> who has it."""
        out: dict[DeviceId, str] = {}
        for d in self.on_node(node):
            if (claim := self.owners.get(d.id)) is not None:
                out[d.id] = f"ResourceClaim {claim}"
            elif (pod := self.held.get(d.id, pod_key)) != pod_key:
                out[d.id] = f"held for pod {pod}"
        return out

    def allocate(self, node: str, pod: Pod) -> tuple[ClaimAllocation, ...] | str:
        """An allocation of every claim of ``pod`` on ``node`` (claims already allocated
        there as they are), or why none exists."""
        found = self.claims_of(pod)
        if isinstance(found, str):
            return found
        claims = _unique(found)
        done: dict[str, ClaimAllocation] = {}
        for claim in claims:
            if claim.allocated:
                if claim.node not in ("", node):
                    return f"ResourceClaim {claim.key} is already allocated on {claim.node}"
                done[claim.key] = ClaimAllocation(
                    name=claim.name, uid=claim.uid, results=claim.allocated
                )
        todo = [c for c in claims if c.key not in done]
        if not todo:
            return tuple(done[c.key] for c in claims)
        devices, taken = self.on_node(node), self.taken(node, pod.key)
        memo = (
            self._layout_of[node],
            tuple((c.requests, c.constraints) for c in todo),
            frozenset(i for i, d in enumerate(devices) if d.id in taken),
        )
        picks = self._picks.get(memo)
        if picks is None:
            search = Search(node=node, devices=devices, taken=taken)
            for claim in todo:
                if why := search.add(claim, self.classes):
                    return why
            if why := search.enough():
                return why
            picked = search.run()
            if isinstance(picked, str):
                return picked
            picks = _positions(devices, [picked.get(c.key, []) for c in todo])
            if len(self._picks) >= MEMO_MAX:
                self._picks.clear()
            self._picks[memo] = picks
        made = {
            c.key: ClaimAllocation(name=c.name, uid=c.uid, results=_results(devices, chosen))
            for c, chosen in zip(todo, picks, strict=True)
        }
        return tuple(done.get(c.key) or made[c.key] for c in claims)


def _positions(
    devices: tuple[NodeDevice, ...], picked: list[list[DeviceResult]]
) -> tuple[tuple[tuple[str, int], ...], ...]:
    """Per claim, (request, position of the device in the node's devices)."""
    where = {d.id: i for i, d in enumerate(devices)}
    return tuple(
        tuple((r.request, where[(r.driver, r.pool, r.device)]) for r in results)
        for results in picked
    )


def _results(
    devices: tuple[NodeDevice, ...], chosen: tuple[tuple[str, int], ...]
) -> tuple[DeviceResult, ...]:
    return tuple(
        DeviceResult(request=request, driver=devices[i].id[0], pool=devices[i].id[1],
                     device=devices[i].id[2])
        for request, i in chosen
    )  # fmt: skip


def _ids(results: Iterable[DeviceResult]) -> list[DeviceId]:
    return [(r.driver, r.pool, r.device) for r in results]


def _unique(claims: Iterable[ResourceClaim]) -> list[ResourceClaim]:
    return list({c.key: c for c in claims}.values())


def _requires_driver(cls: DeviceClass, driver: str) -> bool:
    for expression in cls.selectors:
        found = compiled(expression)
        if not isinstance(found, SelectorError) and driver in found.drivers:
            return True
    return False
