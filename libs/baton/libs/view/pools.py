"""Which node pool (Cluster API MachineDeployment) a node belongs to.

A node belongs to the pool whose ``spec.selector.matchLabels`` it carries (Cluster API
labels its Machines so; simcluster and clusters that propagate the labels put them on
nodes too), else to the pool named by its ``baton.io/pool`` label.
"""

from __future__ import annotations

from collections.abc import Mapping

from baton.proto import keys
from baton.proto.k8s import MachineDeployment, Node


def owns(md: MachineDeployment, node: Node) -> bool:
    if md.selector:
        return all(node.labels.get(k) == v for k, v in md.selector.items())
    return node.labels.get(keys.POOL) == md.name


def pool_of(pools: Mapping[str, MachineDeployment], node: Node) -> str:
    """The key (``<namespace>/<name>``) of the first pool, by key, that owns ``node``; ''."""
    for key in sorted(pools):
        if owns(pools[key], node):
            return key
    return ""
