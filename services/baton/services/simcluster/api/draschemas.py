"""Structural schemas of Dynamic Resource Allocation's kinds (``resource.k8s.io/v1``,
Kubernetes 1.34): DeviceClass, ResourceSlice, ResourceClaim, ResourceClaimTemplate.

The fields a request or a device has are named down to the levels simcluster reads
(world/dra.py); CEL selectors, configs and counters are left open.
"""

from __future__ import annotations

from baton.services.simcluster.api.schemas import (
    BOOL,
    INT,
    OBJECT_META,
    OPEN,
    STRING,
    STRINGS,
    Obj,
    array,
    described,
    kind,
    obj,
    opened,
)

_EXACTLY = opened(
    "adminAccess capacity selectors tolerations",
    "Devices of one class.",
    deviceClassName=STRING,
    allocationMode=described(STRING, "ExactCount (default) or All."),
    count=INT,
)
_REQUEST = obj("A request for devices.", name=STRING, exactly=_EXACTLY, firstAvailable=array(OPEN))
_CONSTRAINT = obj(
    "A constraint across requests.",
    requests=STRINGS,
    matchAttribute=described(STRING, "Every device has the same value of it."),
    distinctAttribute=STRING,
)
CLAIM_SPEC = obj(
    devices=obj(requests=array(_REQUEST), constraints=array(_CONSTRAINT), config=array(OPEN))
)
_RESULT = opened(
    "adminAccess bindingConditions bindingFailureConditions consumedCapacity shareID tolerations",
    request=STRING,
    driver=STRING,
    pool=described(STRING, "The pool; a node's drivers name theirs after the node."),
    device=STRING,
)
_CONSUMER = obj(apiGroup=STRING, resource=STRING, name=STRING, uid=STRING)
CLAIM = kind(
    "A claim for devices.",
    spec=CLAIM_SPEC,
    status=opened(
        "devices",
        allocation=opened(
            "allocationTimestamp config nodeSelector",
            devices=opened("config", results=array(_RESULT)),
        ),
        reservedFor=array(_CONSUMER, "The pods that may use the allocated devices."),
    ),
)
CLAIM_TEMPLATE = kind(
    "A template for the claims of pods.",
    spec=obj(metadata=OBJECT_META, spec=CLAIM_SPEC),
)
_DEVICE = opened(
    "allowMultipleAllocations bindingConditions bindingFailureConditions "
    "bindsToNode consumesCounters nodeName nodeSelector allNodes taints",
    name=STRING,
    attributes=OPEN,
    capacity=OPEN,
)
SLICE = kind(
    "The devices one driver publishes for one pool.",
    spec=opened(
        "nodeSelector perDeviceNodeSelection sharedCounters",
        driver=STRING,
        nodeName=STRING,
        allNodes=BOOL,
        pool=obj(name=STRING, generation=INT, resourceSliceCount=INT),
        devices=array(_DEVICE),
    ),
)
DEVICE_CLASS = kind(
    "A class of devices (a selector over drivers' devices).",
    spec=opened("config extendedResourceName", selectors=array(OPEN)),
)

SCHEMAS: dict[tuple[str, str], Obj] = {
    ("resource.k8s.io", "DeviceClass"): DEVICE_CLASS,
    ("resource.k8s.io", "ResourceSlice"): SLICE,
    ("resource.k8s.io", "ResourceClaim"): CLAIM,
    ("resource.k8s.io", "ResourceClaimTemplate"): CLAIM_TEMPLATE,
}
