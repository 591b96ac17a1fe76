"""Dynamic Resource Allocation (``resource.k8s.io/v1``): the subset of its JSON Baton reads,
and its slimming into ``proto.dra``.

Wire structs as in ``wire.py`` (unknown fields skipped, camelCase via ``rename``), then
pure slimming functions as in ``slimming.py``:

- an attribute's name is fully qualified: one without ``/`` takes its slice's driver as
  domain (``productName`` of ``gpu.nvidia.com``: ``gpu.nvidia.com/productName``), as
  the API defines; an attribute with none of string/int/bool/version is dropped;
- a request's ``allocationMode: All`` is ``count`` 0, ExactCount's count defaults to 1;
  a request Baton cannot read (``firstAvailable``, no ``exactly``) keeps its name with
  ``device_class`` "";
- a constraint other than ``matchAttribute`` (``distinctAttribute``) is not carried;
- a claim's node is its allocation's node selector: ``matchFields`` ``metadata.name In
  [node]`` (what the scheduler writes), else ``matchExpressions``
  ``kubernetes.io/hostname In [node]``;
- a slice of network-attached devices (no ``nodeName``) is published with node "";
- shared counters (``sharedCounters``, ``consumesCounters``: partitionable devices such
  as MIG) are carried as integers in the quantity's base unit, rounded up.
"""

from __future__ import annotations

import math

import msgspec

from baton.libs.kube import wire
from baton.libs.kube.quantities import InvalidQuantity, parse_quantity
from baton.proto import dra

POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"  # a generated claim's pod entry
HOSTNAME = "kubernetes.io/hostname"
NODE_NAME_FIELD = "metadata.name"
ALL = "All"  # allocationMode: every matching device
UNUSABLE = 2**62  # a device's use of a counter whose quantity is malformed


class _Wire(msgspec.Struct, rename="camel", kw_only=True):
    pass


class WireAttribute(_Wire):
    """Exactly one of its fields is set (``int`` and ``bool`` renamed off the builtins)."""

    string: str | None = None
    int_: int | None = msgspec.field(default=None, name="int")
    bool_: bool | None = msgspec.field(default=None, name="bool")
    version: str | None = None


class Counter(_Wire):
    value: str = "0"


class CounterSet(_Wire):
    name: str = ""
    counters: dict[str, Counter] | None = None


class CounterUse(_Wire):
    counter_set: str = ""
    counters: dict[str, Counter] | None = None


class WireDevice(_Wire):
    name: str = ""
    attributes: dict[str, WireAttribute] | None = None
    consumes_counters: list[CounterUse] | None = None


class Pool(_Wire):
    name: str = ""


class ResourceSliceSpec(_Wire):
    driver: str = ""
    node_name: str | None = None
    pool: Pool = msgspec.field(default_factory=Pool)
    devices: list[WireDevice] | None = None
    shared_counters: list[CounterSet] | None = None


class WireResourceSlice(_Wire):
    metadata: wire.ObjectMeta = msgspec.field(default_factory=wire.ObjectMeta)
    spec: ResourceSliceSpec = msgspec.field(default_factory=ResourceSliceSpec)


class Cel(_Wire):
    expression: str = ""


class Selector(_Wire):
    cel: Cel | None = None


class DeviceClassSpec(_Wire):
    selectors: list[Selector] | None = None


class WireDeviceClass(_Wire):
    metadata: wire.ObjectMeta = msgspec.field(default_factory=wire.ObjectMeta)
    spec: DeviceClassSpec = msgspec.field(default_factory=DeviceClassSpec)


class ExactRequest(_Wire):
    device_class_name: str = ""
    allocation_mode: str = "ExactCount"
    count: int | None = None
    selectors: list[Selector] | None = None


class WireRequest(_Wire):
    name: str = ""
    exactly: ExactRequest | None = None  # None: firstAvailable, which Baton does not read


class WireConstraint(_Wire):
    requests: list[str] | None = None
    match_attribute: str | None = None


class DeviceClaim(_Wire):
    requests: list[WireRequest] | None = None
    constraints: list[WireConstraint] | None = None


class ResourceClaimSpec(_Wire):
    devices: DeviceClaim = msgspec.field(default_factory=DeviceClaim)


class WireResult(_Wire):
    request: str = ""
    driver: str = ""
    pool: str = ""
    device: str = ""


class AllocatedDevices(_Wire):
    results: list[WireResult] | None = None


class SelectorTerm(_Wire):
    match_expressions: list[wire.WireRequirement] | None = None
    match_fields: list[wire.WireRequirement] | None = None


class AllocationNodeSelector(_Wire):
    node_selector_terms: list[SelectorTerm] | None = None


class Allocation(_Wire):
    devices: AllocatedDevices | None = None
    node_selector: AllocationNodeSelector | None = None


class Consumer(_Wire):
    """One ``status.reservedFor`` entry (the slim claim keeps its uid; the actuator, which
    writes the list back, all of it)."""

    uid: str = ""
    name: str = ""
    resource: str = ""
    api_group: str = ""


class ResourceClaimStatus(_Wire):
    allocation: Allocation | None = None
    reserved_for: list[Consumer] | None = None


class WireResourceClaim(_Wire):
    metadata: wire.ObjectMeta = msgspec.field(default_factory=wire.ObjectMeta)
    spec: ResourceClaimSpec = msgspec.field(default_factory=ResourceClaimSpec)
    status: ResourceClaimStatus = msgspec.field(default_factory=ResourceClaimStatus)


# --- slimming -----------------------------------------------------------------


def resource_slice(raw: WireResourceSlice) -> dra.ResourceSlice:
    meta, spec = raw.metadata, raw.spec
    return dra.ResourceSlice(
        name=meta.name,
        uid=meta.uid,
        resource_version=meta.resource_version,
        driver=spec.driver,
        node=spec.node_name or "",
        pool=spec.pool.name,
        devices=tuple(_device(d, spec.driver) for d in spec.devices or ()),
        counters={s.name: _amounts(s.counters, bad=0) for s in spec.shared_counters or ()},
    )


def _device(raw: WireDevice, driver: str) -> dra.Device:
    attributes: dict[str, dra.AttributeValue] = {}
    for name, attribute in (raw.attributes or {}).items():
        value = attribute_value(attribute)
        if value is not None:
            attributes[qualified(name, driver)] = value
    consumes = {
        c.counter_set: _amounts(c.counters, bad=UNUSABLE) for c in raw.consumes_counters or ()
    }
    return dra.Device(name=raw.name, attributes=attributes, consumes=consumes)


def _amounts(counters: dict[str, Counter] | None, *, bad: int) -> dict[str, int]:
    """Counter -> its quantity in base units, rounded up; a malformed one (the API server
    refuses them) is ``bad``: a shared counter of 0, a device using more than any has,
    so the device is never given rather than given twice."""
    out: dict[str, int] = {}
    for name, counter in (counters or {}).items():
        try:
            out[name] = math.ceil(parse_quantity(counter.value))
        except InvalidQuantity:
            out[name] = bad
    return out


def qualified(name: str, driver: str) -> str:
    """An attribute's fully qualified name: the driver is the domain of a bare one."""
    return name if "/" in name else f"{driver}/{name}"


def attribute_value(raw: WireAttribute) -> dra.AttributeValue | None:
    """The one value an attribute holds (a version as its string); None when none is set."""
    for value in (raw.string, raw.int_, raw.bool_, raw.version):
        if value is not None:
            return value
    return None


def device_class(raw: WireDeviceClass) -> dra.DeviceClass:
    meta = raw.metadata
    return dra.DeviceClass(
        name=meta.name,
        uid=meta.uid,
        resource_version=meta.resource_version,
        selectors=_expressions(raw.spec.selectors),
    )


def _expressions(selectors: list[Selector] | None) -> tuple[str, ...]:
    return tuple(s.cel.expression for s in selectors or () if s.cel is not None)


def resource_claim(raw: WireResourceClaim) -> dra.ResourceClaim:
    meta, devices, status = raw.metadata, raw.spec.devices, raw.status
    allocation = status.allocation
    results = allocation.devices.results if allocation and allocation.devices else None
    return dra.ResourceClaim(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        resource_version=meta.resource_version,
        pod_claim=(meta.annotations or {}).get(POD_CLAIM_NAME, ""),
        owner=_pod_owner(meta),
        requests=tuple(_request(r) for r in devices.requests or ()),
        constraints=tuple(
            dra.DeviceConstraint(requests=tuple(c.requests or ()), match_attribute=attribute)
            for c in devices.constraints or ()
            if (attribute := c.match_attribute)
        ),
        allocated=tuple(
            dra.DeviceResult(request=r.request, driver=r.driver, pool=r.pool, device=r.device)
            for r in results or ()
        ),
        node=allocation_node(allocation.node_selector) if allocation else "",
        reserved_for=tuple(c.uid for c in status.reserved_for or () if c.uid),
    )


def _pod_owner(meta: wire.ObjectMeta) -> str:
    """The uid of the Pod controlling the claim (a generated claim), else ""."""
    refs = meta.owner_references or ()
    return next((r.uid for r in refs if r.controller and r.kind == "Pod"), "")


def _request(raw: WireRequest) -> dra.DeviceRequest:
    exactly = raw.exactly
    if exactly is None:
        return dra.DeviceRequest(name=raw.name, device_class="")
    if exactly.allocation_mode == ALL:
        count = 0
    else:
        count = exactly.count if exactly.count is not None and exactly.count > 0 else 1
    return dra.DeviceRequest(
        name=raw.name,
        device_class=exactly.device_class_name,
        count=count,
        selectors=_expressions(exactly.selectors),
    )


def allocation_node(selector: AllocationNodeSelector | None) -> str:
    """The one node an allocation is for ("" when its selector names none)."""
    terms = (selector.node_selector_terms or ()) if selector is not None else ()
    by_field = (_single(r, NODE_NAME_FIELD) for t in terms for r in t.match_fields or ())
    by_label = (_single(r, HOSTNAME) for t in terms for r in t.match_expressions or ())
    return next((node for node in (*by_field, *by_label) if node), "")


def _single(requirement: wire.WireRequirement, key: str) -> str:
    """The value of ``key In [value]``; "" for any other requirement."""
    values = requirement.values or []
    if requirement.key != key or requirement.operator != "In" or len(values) != 1:
        return ""
    return values[0]


def pod_claims(spec: wire.PodSpec, status: wire.PodStatus) -> tuple[dra.PodClaim, ...]:
    """A pod's ``spec.resourceClaims`` with the claim each uses: its own
    ``resourceClaimName``, or the one generated from its template as
    ``status.resourceClaimStatuses`` names it ("" until the controller made it)."""
    generated = {s.name: s.resource_claim_name or "" for s in status.resource_claim_statuses or ()}
    return tuple(
        dra.PodClaim(
            name=entry.name,
            claim=entry.resource_claim_name or generated.get(entry.name, ""),
            template=entry.resource_claim_template_name or "",
        )
        for entry in spec.resource_claims or ()
    )
