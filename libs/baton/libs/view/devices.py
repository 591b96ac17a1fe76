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
- shared counters (``libs.view.counters``): a device is given only while what it
  consumes of its pool's counter sets is left; a MIG device and its whole GPU exclude
  each other;
- the search tries devices in slice order, slices in name order, and backtracks; a
  value fixed by an earlier pick narrows later picks to the devices that have it. On a
  node with shared counters, devices of the counter sets most used come first, so MIG
  devices fill a GPU already partitioned before they break a whole one.

What a pod counts as (``Claimed``): a request of a DeviceClass of whole GPUs counts as
``nvidia.com/gpu``; one of any other class (MIG devices, NICs) as
``<class>.deviceclass.resource.k8s.io/devices`` (``DEVICES``: the name Kubernetes'
ResourceQuota gives devices of a class), of which a node has the devices of the class
it publishes, less, for partitions (MIG devices: they consume counters and are not
whole GPUs), those of GPUs given whole. A GPU with a partition given is not whole: the
node's ``nvidia.com/gpu`` counts it out.

Selectors are CEL; Baton evaluates a subset (``selectors.SUPPORTED``). Where CEL would fail at
run time (an attribute the device lacks, ``<`` between a string and an int), the device
does not meet the selector (Kubernetes fails the whole allocation instead).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from baton.libs.view.allocating import DeviceId, NodeDevice, Search
from baton.libs.view.counters import Budget, Cost, SetKey, cost_of
from baton.libs.view.selectors import SelectorError, compiled
from baton.proto.dra import (
    AttributeValue,
    ClaimAllocation,
    DeviceClass,
    DeviceResult,
    ResourceClaim,
    ResourceSlice,
)
from baton.proto.k8s import DeviceClassEvent, Pod, ResourceClaimEvent, ResourceSliceEvent

GPU_DRIVER = "gpu.nvidia.com"
GPU_TYPE = f"{GPU_DRIVER}/type"  # "gpu", or "mig" for a MIG device of NVIDIA's driver
DEVICES = "{}.deviceclass.resource.k8s.io/devices"  # a pod's and node's count of a class
_DEVICES_SUFFIX = DEVICES.format("")
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
    # Nodes alike (same drivers, devices, attributes but their UUIDs, in order) share a
    # layout number; an allocation found for claims asking the same on a layout with the
    # same devices taken is the same, by position: a gang's members (one template) on a
    # uniform cluster are searched once, not once each (``allocate``). A selector that
    # names a UUID is searched on its own node (``_identity``).
    _layouts: dict[tuple[object, ...], int] = field(default_factory=dict)
    _layout_of: dict[str, int] = field(default_factory=dict)
    _picks: dict[tuple[object, ...], tuple[tuple[tuple[str, int], ...], ...]] = field(
        default_factory=dict
    )
    _layout_devices: dict[int, tuple[NodeDevice, ...]] = field(default_factory=dict)
    _kinds: dict[str, str] = field(default_factory=dict)  # class -> its kind (``kind_of``)
    _kind_sets: dict[str, set[str]] = field(default_factory=dict)  # class -> kinds it selects
    _own: dict[tuple[object, ...], bool] = field(default_factory=dict)  # asks naming a UUID
    _class_counts: dict[tuple[object, frozenset[int]], dict[str, int]] = field(default_factory=dict)
    # shared counters: node -> its pools' counter sets; per node, each device's cost
    _sets: dict[str, dict[SetKey, dict[str, int]]] = field(default_factory=dict)
    _costs: dict[str, list[Cost]] = field(default_factory=dict)
    # nodes whose counts (whole GPUs, devices by class) may have changed since the last
    # ``drain_touched``: partitions given, held or freed; classes changed
    touched: set[str] = field(default_factory=set)
    kinds_changed: int = 0  # times what a class counts as changed: pods are counted again

    def apply(self, event: ResourceSliceEvent | DeviceClassEvent | ResourceClaimEvent) -> None:
        match event:
            case ResourceSliceEvent(op=op, resource_slice=piece):
                self._slice(piece, deleted=op == "delete")
            case DeviceClassEvent(op="delete", device_class=cls):
                self.classes.pop(cls.name, None)
                self._classes_changed()
            case DeviceClassEvent(device_class=cls):
                self.classes[cls.name] = cls
                self._classes_changed()
            case ResourceClaimEvent(op=op, resource_claim=claim):
                self._claim(claim, deleted=op == "delete")

    def _classes_changed(self) -> None:
        """Classes (or what they select) changed: every node's counts by class may have."""
        self._picks.clear()
        self._own.clear()
        self._kinds.clear()
        self._kind_sets.clear()
        self._class_counts.clear()
        self.touched.update(self.nodes)

    def _slice(self, piece: ResourceSlice, *, deleted: bool) -> None:
        old = self._slice_node.pop(piece.name, None)
        if old is not None:
            self.nodes[old].pop(piece.name, None)
            if not self.nodes[old]:
                del self.nodes[old]
            self._forget_layout(old)
        if not deleted and piece.node:  # network-attached devices (no node) are not read
            self._slice_node[piece.name] = piece.node
            self.nodes.setdefault(piece.node, {})[piece.name] = piece
            self._forget_layout(piece.node)

    def _forget_layout(self, node: str) -> None:
        self._on_node.pop(node, None)
        self._sets.pop(node, None)
        self._costs.pop(node, None)

    def _claim(self, claim: ResourceClaim, *, deleted: bool) -> None:
        old = self.claims.pop(claim.key, None)
        for device in _ids(old.allocated if old is not None else ()):
            if self.owners.get(device) == claim.key:
                del self.owners[device]
        if not deleted:
            self.claims[claim.key] = claim
            self.owners.update(dict.fromkeys(_ids(claim.allocated), claim.key))
        for node in {old.node if old is not None else "", "" if deleted else claim.node}:
            if self._sets.get(node):
                self.touched.add(node)
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
            layout: tuple[object, ...] = tuple(
                (d.id[0], d.device.name, _alike(d.device.attributes),
                 tuple(sorted((k, tuple(sorted(v.items()))) for k, v in d.device.consumes.items())))
                for d in found
            )  # fmt: skip
            pieces = self.nodes.get(node, {}).values()
            self._sets[node] = {
                (p.driver, p.pool, name): counters
                for p in pieces
                for name, counters in p.counters.items()
            }
            layout += tuple(  # its counter sets, as alike nodes have them
                (key[0], key[2], tuple(sorted(counters.items())))
                for key, counters in sorted(self._sets[node].items())
            )
            number = self._layouts.setdefault(layout, len(self._layouts))
            if number not in self._layout_devices:
                self._layout_devices[number] = found
                self._new_layout(found)
            self._layout_of[node] = number
            self._costs[node] = (
                [cost_of(d.id[0], d.id[1], d.device) for d in found] if self._sets[node] else []
            )
        return found

    def node_gpus(self, node: str) -> int:
        """The node's devices of GPU_DRIVER that are whole GPUs (type "gpu", or none)."""
        return sum(1 for d in self.on_node(node) if _whole_gpu(d))

    def _given(self, d: NodeDevice) -> bool:
        """Allocated to a claim, or held for a placement in flight."""
        return d.id in self.owners or d.id in self.held

    def gpus_broken(self, node: str) -> int:
        """The node's whole GPUs that are not whole now: a partition of theirs (a MIG
        device) is allocated or held."""
        self.on_node(node)
        if not self._sets.get(node):
            return 0
        devices, costs = self._on_node[node], self._costs[node]
        broken: set[SetKey] = set()
        for d, cost in zip(devices, costs, strict=True):
            if cost and not _whole_gpu(d) and self._given(d):
                broken.update(key for key, _, _ in cost)
        return sum(
            1
            for d, cost in zip(devices, costs, strict=True)
            if _whole_gpu(d) and any(key in broken for key, _, _ in cost)
        )

    def class_devices(self, node: str) -> dict[str, int]:
        """Per DeviceClass other than whole GPUs (``DEVICES`` names the resource), the
        node's devices of it; of partitions, those whose GPU is not given whole."""
        devices = self.on_node(node)
        costs = self._costs[node] or [()] * len(devices)
        given = frozenset(  # whole GPUs given that consume counters: by position
            i for i, (d, cost) in enumerate(zip(devices, costs, strict=True))
            if cost and _whole_gpu(d) and self._given(d)
        )  # fmt: skip
        memo: tuple[object, frozenset[int]] = (
            self._layout_of[node],
            given,
        )  # alike nodes count alike
        if any(_identity(e) for c in self.classes.values() for e in c.selectors):
            memo = (node, given)  # a class naming a UUID: this node's own
        if (found := self._class_counts.get(memo)) is not None:
            return found
        whole = {key for i in given for key, _, _ in costs[i]}  # sets they consume
        out: dict[str, int] = {}
        for name, cls in self.classes.items():
            kind = self.kind_of(name)
            if kind not in ("partition", "device"):
                continue
            count = sum(
                1
                for d, cost in zip(devices, costs, strict=True)
                if not _whole_gpu(d) and not any(k in whole for k, _, _ in cost)
                and _meets(cls, d)
            )  # fmt: skip
            if count:
                out[DEVICES.format(name)] = count
        if len(self._class_counts) >= MEMO_MAX:
            self._class_counts.clear()
        self._class_counts[memo] = out
        return out

    def kind_of(self, name: str) -> str:
        """What a DeviceClass's devices count as: "gpu" (whole GPUs), "partition" (devices
        that consume shared counters, not whole GPUs: MIG), "device" (others: NICs), ""
        (no such class). Read from the devices it selects on every kind of node seen;
        before any, a class requiring GPU_DRIVER counts as GPUs, another as devices."""
        found = self._kinds.get(name)
        if found is None:
            for node in list(self.nodes):
                self.on_node(node)  # every kind of node known
            cls = self.classes.get(name)
            if cls is None:
                return ""
            self._kind_sets[name] = {
                _kind(d) for devices in self._layout_devices.values() for d in devices
                if _meets(cls, d)
            }  # fmt: skip
            found = self._kinds[name] = self._resolve(cls)
        return found

    def _resolve(self, cls: DeviceClass) -> str:
        kinds = self._kind_sets[cls.name]
        if not kinds:
            return "gpu" if _requires_driver(cls, GPU_DRIVER) else "device"
        return next(k for k in ("partition", "gpu", "device") if k in kinds)

    def _new_layout(self, devices: tuple[NodeDevice, ...]) -> None:
        """A new kind of node: the classes already read may select devices of a new kind;
        if what one counts as changes, every node and pod is counted again."""
        changed = False
        for name, kinds in self._kind_sets.items():
            cls = self.classes[name]
            kinds.update(_kind(d) for d in devices if _meets(cls, d))
            if (now := self._resolve(cls)) != self._kinds[name]:
                self._kinds[name], changed = now, True
        if changed:
            self.kinds_changed += 1
            self._class_counts.clear()
            self.touched.update(self.nodes)

    def drain_touched(self) -> set[str]:
        touched, self.touched = self.touched, set()
        return touched

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
        """GPUs the pod's claims ask: the counts of requests of a DeviceClass of whole
        GPUs (``kind_of``; All: the devices it was allocated, else 1); 0 while the claims
        are not all there."""
        return self.claimed(pod).get("gpu", 0)

    def claimed(self, pod: Pod, *, shared: Iterable[str] = ()) -> dict[str, int]:
        """What the pod's claims ask, counted: "gpu" the whole GPUs, and per other
        DeviceClass its ``DEVICES`` resource; {} while the claims are not all there.
        ``shared``: claims (by key) counted on another pod that shares them."""
        found = self.claims_of(pod)
        if isinstance(found, str):
            return {}
        out: dict[str, int] = {}
        skip = frozenset(shared)
        for claim in _unique(found):
            if claim.key in skip:
                continue
            for r in claim.requests:
                kind = self.kind_of(r.device_class)
                if not kind:
                    continue
                key = "gpu" if kind == "gpu" else DEVICES.format(r.device_class)
                allocated = sum(1 for x in claim.allocated if x.request == r.name)
                out[key] = out.get(key, 0) + (r.count or max(1, allocated))
        return out

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
            if self._sets.get(node):
                self.touched.add(node)

    def release(self, pod_key: str) -> None:
        hold = self.holds.pop(pod_key, None)
        if hold is not None and self._sets.get(hold.node):
            self.touched.add(hold.node)
        for key, devices in hold.parts.items() if hold is not None else ():
            if self.held_by.get(key) == pod_key:
                del self.held_by[key]
            for device in devices:
                if self.held.get(device) == pod_key:
                    del self.held[device]

    def taken(self, node: str, pod_key: str = "") -> dict[DeviceId, str]:
        """The node's devices not free for ``pod_key``: device -> who has it (a device
        whose shared counters are spent: who has what it shares)."""
        return self._state(node, pod_key)[0]

    def _state(self, node: str, pod_key: str) -> tuple[dict[DeviceId, str], Budget | None]:
        """The devices not free for ``pod_key``, and what is left of the node's shared
        counters (None: it has none)."""
        out: dict[DeviceId, str] = {}
        devices = self.on_node(node)
        for d in devices:
            if (claim := self.owners.get(d.id)) is not None:
                out[d.id] = f"ResourceClaim {claim}"
            elif (pod := self.held.get(d.id, pod_key)) != pod_key:
                out[d.id] = f"held for pod {pod}"
        sets = self._sets.get(node)
        if not sets:
            return out, None
        costs = self._costs[node]
        budget = Budget.of(sets, (cost for d, cost in zip(devices, costs, strict=True)
                                  if cost and d.id in out))  # fmt: skip
        users = {key: out[d.id] for d, cost in zip(devices, costs, strict=True)
                 if d.id in out for key, _, _ in cost}  # fmt: skip
        for d, cost in zip(devices, costs, strict=True):
            if cost and d.id not in out and not budget.fits(cost):
                spent = next((key for key, _, _ in cost if key in users), cost[0][0])
                out[d.id] = f"{users.get(spent, 'nothing published')} (counter set {spent[2]})"
        return out, budget

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
        devices = self.on_node(node)
        taken, budget = self._state(node, pod.key)
        asked = tuple((c.requests, c.constraints) for c in todo)
        if (own := self._own.get(asked)) is None:  # a selector naming a UUID: this node's
            if len(self._own) >= MEMO_MAX:
                self._own.clear()
            own = self._own[asked] = any(
                _identity(e)
                for c in todo for r in c.requests
                for e in (*r.selectors, *getattr(self.classes.get(r.device_class), "selectors", ()))
            )  # fmt: skip
        memo = (
            node if own else self._layout_of[node],
            asked,
            frozenset(i for i, d in enumerate(devices) if d.id in taken),
            budget.snapshot() if budget is not None else (),
        )
        picks = self._picks.get(memo)
        if picks is None:
            order, costs = devices, self._costs[node]
            if budget is not None:  # partly used counter sets first: fill, do not break
                sets = self._sets[node]
                ranks = sorted(
                    range(len(devices)),
                    key=lambda i: (-max((budget.used(sets, k) for k, _, _ in costs[i]),
                                        default=0.0), i),
                )  # fmt: skip
                order = tuple(devices[i] for i in ranks)
                costs = [costs[i] for i in ranks]
            search = Search(node=node, devices=order, taken=taken, budget=budget, costs=costs)
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
                self._own.clear()
            self._picks[memo] = picks
        made = {
            c.key: ClaimAllocation(
                name=c.name,
                uid=c.uid,
                results=_results(devices, chosen),
                resource_version=c.resource_version,
            )
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


def class_of(resource: str) -> str:
    """The DeviceClass a ``DEVICES`` resource counts ("" for another resource)."""
    return resource.removesuffix(_DEVICES_SUFFIX) if resource.endswith(_DEVICES_SUFFIX) else ""


def _alike(attributes: dict[str, AttributeValue]) -> tuple[tuple[str, AttributeValue], ...]:
    """A device's attributes as nodes alike share them: all but its UUIDs (``uuid``,
    ``parentUUID``), which name the one device."""
    return tuple(sorted((k, v) for k, v in attributes.items() if not _identity(k)))


def _identity(text: str) -> bool:
    return "uuid" in text.lower()


def _kind(d: NodeDevice) -> str:
    return (
        "partition"
        if d.device.consumes and not _whole_gpu(d)
        else ("gpu" if _whole_gpu(d) else "device")
    )


def _whole_gpu(d: NodeDevice) -> bool:
    """A device of GPU_DRIVER that is a whole GPU (type "gpu", or none given)."""
    return d.driver == GPU_DRIVER and d.device.attributes.get(GPU_TYPE, "gpu") == "gpu"


def _meets(cls: DeviceClass, d: NodeDevice) -> bool:
    """The device meets every selector of the class (one Baton cannot read: no)."""
    for expression in cls.selectors:
        found = compiled(expression)
        if isinstance(found, SelectorError):
            return False
        if (found.drivers and found.drivers != {d.driver}) or not found.test(d.device, d.driver):
            return False
    return True


def _requires_driver(cls: DeviceClass, driver: str) -> bool:
    for expression in cls.selectors:
        found = compiled(expression)
        if not isinstance(found, SelectorError) and driver in found.drivers:
            return True
    return False
