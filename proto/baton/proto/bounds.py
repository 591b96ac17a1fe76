"""What an object on the bus can say: values no real object has are refused.

The bridge refuses them before it publishes (to the dead-letter subject, with the
reason), and every consumer refuses them again when it decodes (``proto.codec``):
a message on ``baton.<c>.k8s.>`` may come from anyone holding the bridge's rights,
so no consumer believes a node of 1,000 GPUs (gang bound 25 more pods to an 8-GPU
node, and admission's team quota grew by 992) because the bridge would not have
sent it. Deletions always pass (a tombstone must reach consumers whatever the object
said).

| what | bound |
|---|---|
| a node's allocatable ``nvidia.com/gpu`` | its instance type's (``INSTANCE_GPUS``), else 64 |
| a pod's ``nvidia.com/gpu`` request | ``MAX_NODE_GPUS``, as the admission webhook |
| a gang's ``minMember`` | 0 .. ``MAX_MEMBERS`` (100,000), as the admission webhook |
| any allocatable, request or minResources | not negative |
"""

from __future__ import annotations

import msgspec

from baton.proto import k8s
from baton.proto.k8s import MAX_MEMBERS, MAX_NODE_GPUS

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# GPUs per machine of the GPU instance types clouds sell (a node of one of these that
# claims more is refused); other types are bounded by MAX_NODE_GPUS only.
INSTANCE_GPUS: dict[str, int] = {
    "p4d.24xlarge": 8,
    "p4de.24xlarge": 8,
    "p5.48xlarge": 8,
    "p5e.48xlarge": 8,
    "p5en.48xlarge": 8,
    "Standard_ND96asr_v4": 8,
    "Standard_ND96amsr_A100_v4": 8,
    "Standard_ND96isr_H100_v5": 8,
    "a2-highgpu-8g": 8,
    "a2-megagpu-16g": 16,
    "a3-highgpu-8g": 8,
    "a3-megagpu-8g": 8,
}


class Bounds(msgspec.Struct, frozen=True, kw_only=True):
    max_node_gpus: int = MAX_NODE_GPUS
    max_members: int = MAX_MEMBERS
    setting: str = "proto.k8s.MAX_NODE_GPUS"  # where max_node_gpus comes from, for reasons


HARD = Bounds()  # what every consumer applies


def impossible(event: k8s.K8sEvent, bounds: Bounds = HARD) -> str:
    """Why ``event``'s object cannot be real ("" when it can)."""
    if event.op == "delete":
        return ""
    obj = k8s.object_of(event)
    match obj:
        case k8s.Node():
            return _node(obj, bounds)
        case k8s.Pod():
            what = f"pod {obj.namespace}/{obj.name}"
            gpus = obj.requests.get(k8s.GPU, 0)
            if gpus > bounds.max_node_gpus:
                return (
                    f"{what} requests {gpus} {k8s.GPU}; no node has more than "
                    f"{bounds.max_node_gpus} ({bounds.setting})"
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


def _node(node: k8s.Node, bounds: Bounds) -> str:
    what = f"node {node.name}"
    gpus = node.allocatable.get(k8s.GPU, 0)
    kind = node.labels.get(INSTANCE_TYPE_LABEL, "")
    holds = INSTANCE_GPUS.get(kind)
    if holds is not None and gpus > holds:
        return f"{what} claims {gpus} {k8s.GPU} allocatable; its instance type {kind} has {holds}"
    if gpus > bounds.max_node_gpus:
        return (
            f"{what} claims {gpus} {k8s.GPU} allocatable; at most "
            f"{bounds.max_node_gpus} per node ({bounds.setting})"
        )
    return _negative(what, "allocatable", node.allocatable)


def _negative(what: str, field: str, resources: k8s.Resources) -> str:
    bad = sorted(name for name, value in resources.items() if value < 0)
    if bad:
        return f"{what} has a negative {field} {bad[0]}: {resources[bad[0]]}"
    return ""


def _members(what: str, count: int, bounds: Bounds) -> str:
    return f"{what} has minMember {count}; expected 0..{bounds.max_members}"
