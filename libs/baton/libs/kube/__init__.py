"""Kubernetes list+watch with slim decoding: what the bridge (the one watcher) uses.

``Reflector(api, PODS).events()`` yields ``proto.k8s`` object events; ``kinds`` has the
table of watched kinds and pure decoders; ``diffing`` the cache and relist diff;
``quantities`` canonical resource quantities.
"""

from baton.libs.kube.client import api_client
from baton.libs.kube.kinds import (
    ENDPOINT_SLICES,
    KINDS,
    NODES,
    POD_GROUPS,
    PODS,
    UPSTREAM_POD_GROUPS,
    VOLCANO_POD_GROUPS,
    Kind,
    obj_of,
)
from baton.libs.kube.quantities import (
    InvalidQuantity,
    canonical,
    canonical_resources,
    parse_quantity,
)
from baton.libs.kube.watching import ApiError, Expired, NullObserver, Observer, Options, Reflector

__all__ = [
    "ENDPOINT_SLICES",
    "KINDS",
    "NODES",
    "PODS",
    "POD_GROUPS",
    "UPSTREAM_POD_GROUPS",
    "VOLCANO_POD_GROUPS",
    "ApiError",
    "Expired",
    "InvalidQuantity",
    "Kind",
    "NullObserver",
    "Observer",
    "Options",
    "Reflector",
    "api_client",
    "canonical",
    "canonical_resources",
    "obj_of",
    "parse_quantity",
]
