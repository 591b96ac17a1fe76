"""Dynamic Resource Allocation (``resource.k8s.io/v1``) as the bridge publishes it.

Only what placement reads: the devices drivers publish per node (``ResourceSlice``),
the DeviceClasses that name them, and the claims pods make (``ResourceClaim``, with
what is already allocated and reserved). Attribute names are fully qualified
(``gpu.nvidia.com/productName``, ``resource.kubernetes.io/pcieRoot``): a slice's
unqualified name takes its driver as domain, as the API defines.
"""

from __future__ import annotations

import msgspec

AttributeValue = str | int | bool  # the API's string, int, bool and version (as str)


Counters = dict[str, dict[str, int]]  # counter set -> counter -> amount (quantities' base units)


class Device(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """``consumes``: the shared counters it uses when allocated (``consumesCounters``),
    by counter set of its pool: a MIG device takes some of its GPU's memory slices,
    the whole GPU takes all of them, so neither can be given while the other is."""

    name: str
    attributes: dict[str, AttributeValue] = {}
    consumes: Counters = {}


class ResourceSlice(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One driver's devices on one node (``spec.nodeName``; slices of network-attached
    devices, with no node, are not read). The bridge publishes those with ``node`` ""."""

    name: str
    uid: str
    resource_version: str = ""
    driver: str
    node: str
    pool: str
    devices: tuple[Device, ...] = ()
    counters: Counters = {}  # ``sharedCounters``: what its pool's devices consume (a slice
    # holds either devices or counters)

    @property
    def key(self) -> str:
        return self.name


class DeviceClass(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """``selectors``: the class's CEL expressions, all of which a device must meet."""

    name: str
    uid: str
    resource_version: str = ""
    selectors: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return self.name


class DeviceRequest(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """``spec.devices.requests[].exactly``: ``count`` devices of ``device_class`` that meet
    every selector (allocationMode ExactCount; All is ``count`` 0). A request Baton cannot
    read (``firstAvailable``, no ``exactly``) has ``device_class`` "": nothing can meet it."""

    name: str
    device_class: str
    count: int = 1
    selectors: tuple[str, ...] = ()


class DeviceConstraint(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """``matchAttribute``: every device allocated for ``requests`` (all when empty) has the
    same value of this fully qualified attribute."""

    requests: tuple[str, ...] = ()
    match_attribute: str


class DeviceResult(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """One allocated device: ``status.allocation.devices.results[]``. Encoded as an
    array (``["gpu3", "gpu.nvidia.com", "node-7", "gpu-3"]``): a 1,024-pod gang's bind
    names ~16,000 of them and must fit in one NATS message."""

    request: str
    driver: str
    pool: str
    device: str


class ResourceClaim(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A claim, what it asks and what it holds. ``pod_claim``: the pod's
    ``resourceClaims[].name`` it was generated for (annotation
    ``resource.kubernetes.io/pod-claim-name``; "" for a user's own claim). ``node``: the
    node its allocation is for ("" when not allocated); ``reserved_for``: the uids of the
    pods it is reserved for."""

    namespace: str
    name: str
    uid: str
    resource_version: str = ""
    pod_claim: str = ""
    owner: str = ""  # the uid of the pod that owns it (a generated claim), else ""
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[DeviceConstraint, ...] = ()
    allocated: tuple[DeviceResult, ...] = ()
    node: str = ""
    reserved_for: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class PodClaim(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One ``spec.resourceClaims`` entry of a pod: ``claim`` the ResourceClaim it uses
    (its ``resourceClaimName``, or the one generated from ``template``, as
    ``status.resourceClaimStatuses`` names it; "" while not generated yet)."""

    name: str
    claim: str = ""
    template: str = ""


class ClaimAllocation(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What the actuator writes to one claim before it binds its pod: the devices
    (``status.allocation``, for the pod's node) and the pod it is reserved for."""

    name: str
    uid: str = ""  # when set, refused if the claim was replaced
    results: tuple[DeviceResult, ...]
    # The claim's resourceVersion when the decision found it unallocated: the actuator
    # writes from it without reading the claim first (a 409 if it changed since).
    resource_version: str = ""
