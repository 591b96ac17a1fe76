"""Values no real object has: the bridge refuses them (to the dead-letter subject, with
the reason) instead of letting one bad object mislead every consumer.

A node claiming 1,000 GPUs would have gang bind 14 pods to an 8-GPU node; a negative
request or ``minMember`` of 10^9 would make capacity sums and gang waits nonsense.
Deletions always pass (a tombstone must reach consumers whatever the object said).
"""

from __future__ import annotations

import msgspec

from baton.proto import k8s
from baton.proto.k8s import MAX_MEMBERS, MAX_NODE_GPUS


class Bounds(msgspec.Struct, frozen=True, kw_only=True):
    max_node_gpus: int = MAX_NODE_GPUS
    max_members: int = MAX_MEMBERS


def impossible(event: k8s.K8sEvent, bounds: Bounds) -> str:
    """Why ``event``'s object cannot be real ("" when it can)."""
    if event.op == "delete":
        return ""
    obj = k8s.object_of(event)
    match obj:
        case k8s.Node():
            what = f"node {obj.name}"
            gpus = obj.allocatable.get(k8s.GPU, 0)
            if gpus > bounds.max_node_gpus:
                return (
                    f"{what} claims {gpus} {k8s.GPU} allocatable; at most "
                    f"{bounds.max_node_gpus} per node (BATON_BRIDGE_MAX_NODE_GPUS)"
                )
            return _negative(what, "allocatable", obj.allocatable)
        case k8s.Pod():
            what = f"pod {obj.namespace}/{obj.name}"
            gpus = obj.requests.get(k8s.GPU, 0)
            if gpus > bounds.max_node_gpus:
                return (
                    f"{what} requests {gpus} {k8s.GPU}; no node has more than "
                    f"{bounds.max_node_gpus} (BATON_BRIDGE_MAX_NODE_GPUS)"
                )
            if obj.group is not None and not 0 <= obj.group.min_member <= bounds.max_members:
                return _members(what, obj.group.min_member, bounds)
            return _negative(what, "requests", obj.requests)
        case k8s.PodGroup():
            what = f"podgroup {obj.namespace}/{obj.name}"
            if not 0 <= obj.min_member <= bounds.max_members:
                return _members(what, obj.min_member, bounds)
            return _negative(what, "minResources", obj.min_resources)
    return ""


def _negative(what: str, field: str, resources: k8s.Resources) -> str:
    bad = sorted(name for name, value in resources.items() if value < 0)
    if bad:
        return f"{what} has a negative {field} {bad[0]}: {resources[bad[0]]}"
    return ""


def _members(what: str, count: int, bounds: Bounds) -> str:
    return f"{what} has minMember {count}; expected 0..{bounds.max_members}"
