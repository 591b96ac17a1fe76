"""The simulated cluster's shape: node pools, topology, delays.

A spec comes from flags (``--nodes N``: one pool of N HGX-like nodes) or from a YAML
file. It is validated once, at start-up; a bad value raises :class:`SpecError` that
names the key, e.g. ``pools[1].count: expected >= 0``.

Example file::

    topology: {nodes_per_rack: 32, racks_per_block: 8}
    delays: {pod_start_s: 2, provisioning_s: 60}
    pools:
      - {name: h100, count: 512, gpu_product: NVIDIA-H100-80GB-HBM3}
      - {name: a100, count: 64, gpus: 8, gpu_product: NVIDIA-A100-SXM4-80GB, zone: zone-b}
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import yaml

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_LABEL_KEY = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
_QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$"

Count = Annotated[int, msgspec.Meta(ge=0)]
Positive = Annotated[int, msgspec.Meta(ge=1)]
Seconds = Annotated[float, msgspec.Meta(ge=0)]
Share = Annotated[float, msgspec.Meta(ge=0, le=1)]
Name = Annotated[str, msgspec.Meta(pattern=_DNS_LABEL, max_length=40)]
LabelKey = Annotated[str, msgspec.Meta(pattern=_LABEL_KEY, max_length=253)]
Quantity = Annotated[str, msgspec.Meta(pattern=_QUANTITY)]
# kubelet's --register-with-taints form: ``<key>[=<value>]:<effect>``
TAINT = _LABEL_KEY[:-1] + r"(=[A-Za-z0-9_.-]*)?:(NoSchedule|PreferNoSchedule|NoExecute)$"
Taint = Annotated[str, msgspec.Meta(pattern=TAINT)]


class SpecError(ValueError):
    """The cluster spec is invalid; the message names the key."""


class Pool(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A group of identical nodes, one Cluster API MachineDeployment."""

    name: Name = "gpu"
    count: Count = 8
    gpus: Count = 8
    cpu: Quantity = "192"
    memory: Quantity = "2048Gi"
    rdma: Count = 8  # rdma/ib: one InfiniBand NIC per GPU, as on an HGX H100
    pods: Positive = 110
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    # MIG-capable GPUs (with devices: dra): each GPU is also published as seven
    # 1g.10gb MIG devices, sharing its memory slices (world/dra.py)
    mig: bool = False
    instance_type: str = "hgx-h100-8"
    zone: Name = "zone-a"
    # Cluster API autoscaler bounds, written as the MachineDeployment's
    # cluster-api-autoscaler-node-group-{min,max}-size annotations (max: count if unset)
    min_size: Count = 0
    max_size: Count | None = None
    # the cloud behind the pool: provisioning takes provisioning_s (else delays') plus or
    # minus up to provisioning_spread_s, uniformly; a share of new machines never joins,
    # a share joins NotReady; beyond quota machines (not nodes) wait, pending
    provisioning_s: Seconds | None = None
    provisioning_spread_s: Seconds = 0.0
    join_failure_share: Share = 0.0
    not_ready_share: Share = 0.0
    quota: Count | None = None
    # taints each node registers with, as kubelet's --register-with-taints: ``baton up``
    # registers ``baton.io/preflight=:NoSchedule`` so no work lands before a preflight
    register_with_taints: tuple[Taint, ...] = ()

    @property
    def max_nodes(self) -> int:
        return self.count if self.max_size is None else self.max_size


class Topology(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """zone -> block -> rack -> node, written as node labels under these keys."""

    zone_key: LabelKey = "topology.kubernetes.io/zone"
    block_key: LabelKey = "baton.io/block"
    rack_key: LabelKey = "baton.io/rack"
    nodes_per_rack: Positive = 32
    racks_per_block: Positive = 8


class Delays(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Simulated seconds (see ``Clock.speed``)."""

    pod_start_s: Seconds = 1.0
    termination_s: Seconds = 1.0
    provisioning_s: Seconds = 30.0
    preflight_s: Seconds = 5.0  # a baton.io/preflight pod runs this long, then passes or fails


class ClusterSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pools: tuple[Pool, ...] = (Pool(),)
    topology: Topology = Topology()
    delays: Delays = Delays()
    cluster_name: Name = "sim"
    node_prefix: Name = "gpu"
    seed: int = 1  # the cloud's randomness (provisioning spread, failures)
    # how nodes show their GPUs and NICs: "plugin" (the device plugins' counts,
    # nvidia.com/gpu and rdma/ib) or "dra" (those counts and, beside them, the DRA
    # drivers' ResourceSlices: world/dra.py)
    devices: Literal["plugin", "dra"] = "plugin"


def default_spec(nodes: int, **pool: Any) -> ClusterSpec:
    """One pool of ``nodes`` HGX-like nodes (8 GPUs each unless ``pool`` says otherwise)."""
    return from_dict({"pools": [{"name": "gpu", "count": nodes, **pool}]})


def from_dict(raw: Any) -> ClusterSpec:
    try:
        spec = msgspec.convert(raw, ClusterSpec)
    except msgspec.ValidationError as exc:
        raise SpecError(_readable(str(exc))) from None
    _check(spec)
    return spec


def with_pools(spec: ClusterSpec, **fields: Any) -> ClusterSpec:
    """``spec`` with ``fields`` set on every pool (CLI flags), validated like a file."""
    raw = msgspec.to_builtins(spec)
    for pool in raw["pools"]:
        pool.update(fields)
    return from_dict(raw)


def taints(pool: Pool) -> list[dict[str, str]]:
    """The pool's ``register_with_taints`` as a node's ``spec.taints``."""
    found = []
    for text in pool.register_with_taints:
        head, _, effect = text.rpartition(":")
        key, _, value = head.partition("=")
        found.append({"key": key, "effect": effect} | ({"value": value} if value else {}))
    return found


def load(path: Path) -> ClusterSpec:
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"{path}: {exc}") from None
    try:
        return from_dict(raw)
    except SpecError as exc:
        raise SpecError(f"{path}: {exc}") from None


def _check(spec: ClusterSpec) -> None:
    if not spec.pools:
        raise SpecError("pools: expected at least one pool")
    seen: set[str] = set()
    for i, pool in enumerate(spec.pools):
        if pool.name in seen:
            raise SpecError(f"pools[{i}].name: duplicate pool {pool.name!r}")
        seen.add(pool.name)
        if pool.min_size > pool.max_nodes:
            raise SpecError(f"pools[{i}].min_size: {pool.min_size} > max_size {pool.max_nodes}")
    keys = (spec.topology.zone_key, spec.topology.block_key, spec.topology.rack_key)
    if len(set(keys)) != len(keys):
        raise SpecError("topology: zone_key, block_key and rack_key must differ")


def _readable(message: str) -> str:
    """msgspec says ``Expected `int` >= 0 - at `$.pools[0].count```; put the key first."""
    match = re.search(r" - at `\$\.?(.*)`$", message)
    if match is None:
        return message
    return f"{match.group(1) or '<root>'}: {message[: match.start()]}"
