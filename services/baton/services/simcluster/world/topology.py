"""Nodes and MachineDeployments as Kubernetes JSON, laid out on the spec's topology.

A pool's nodes fill slots 0, 1, 2...; slot ``s`` sits in rack ``s // nodes_per_rack``
of that pool and block ``rack // racks_per_block``. Names count across the whole
cluster (``gpu-00001``, ``gpu-00002``...) and are never reused, as cloud instances'.
"""

from __future__ import annotations

from typing import Any

from baton.services.simcluster.clock import timestamp
from baton.services.simcluster.world.spec import ClusterSpec, Pool, taints

POOL_LABEL = "baton.io/pool"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"  # GPU feature discovery's
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
MACHINE_ANNOTATION = "cluster.x-k8s.io/machine"
CLUSTER_LABEL = "cluster.x-k8s.io/cluster-name"
DEPLOYMENT_LABEL = "cluster.x-k8s.io/deployment-name"
MD_NAMESPACE = "default"
GPU_HEALTHY = "GPUHealthy"
MIN_SIZE = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
MAX_SIZE = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"

Obj = dict[str, Any]


def node_name(spec: ClusterSpec, ordinal: int) -> str:
    return f"{spec.node_prefix}-{ordinal:05d}"


def place(spec: ClusterSpec, pool: Pool, slot: int) -> dict[str, str]:
    """The topology labels of slot ``slot`` of ``pool``."""
    rack = slot // spec.topology.nodes_per_rack
    block = rack // spec.topology.racks_per_block
    return {
        spec.topology.zone_key: pool.zone,
        spec.topology.block_key: f"{pool.name}-block-{block:02d}",
        spec.topology.rack_key: f"{pool.name}-rack-{rack:03d}",
    }


def node_object(spec: ClusterSpec, *, pool: Pool, slot: int, ordinal: int) -> Obj:
    """A Ready node of ``pool`` in ``slot``, named by its cluster-wide ``ordinal``."""
    name = node_name(spec, ordinal)
    capacity = {
        "cpu": pool.cpu,
        "memory": pool.memory,
        "pods": str(pool.pods),
        "ephemeral-storage": "3840Gi",
    }
    if pool.gpus:
        capacity["nvidia.com/gpu"] = str(pool.gpus)
    if pool.rdma:
        capacity["rdma/ib"] = str(pool.rdma)
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": pool.instance_type,
        POOL_LABEL: pool.name,
        CLUSTER_LABEL: spec.cluster_name,
        DEPLOYMENT_LABEL: pool.name,
        **place(spec, pool, slot),
    }
    if pool.gpus:
        labels[GPU_PRODUCT_LABEL] = pool.gpu_product
        labels[GPU_COUNT_LABEL] = str(pool.gpus)
    if pool.gpus and pool.mig:
        labels[MIG_CAPABLE_LABEL] = "true"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {MACHINE_ANNOTATION: f"{pool.name}-{ordinal:05d}"},
        },
        "spec": {"providerID": f"sim://{spec.cluster_name}/{pool.name}/{name}"}
        | ({"taints": taints(pool)} if pool.register_with_taints else {}),
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": healthy_conditions(pool.gpus > 0),
            "addresses": [
                {"type": "InternalIP", "address": node_ip(ordinal)},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": node_info(ordinal),
        },
    }


def node_info(ordinal: int) -> Obj:
    """Every field NodeSystemInfo requires (clients validate them)."""
    ident = f"{ordinal:032x}"
    return {
        "machineID": ident,
        "systemUUID": f"{ident[:8]}-{ident[8:12]}-{ident[12:16]}-{ident[16:20]}-{ident[20:]}",
        "bootID": ident,
        "kernelVersion": "6.8.0-sim",
        "osImage": "simcluster",
        "containerRuntimeVersion": "containerd://1.7.0-sim",
        "kubeletVersion": "v1.31.0-sim",
        "kubeProxyVersion": "v1.31.0-sim",
        "operatingSystem": "linux",
        "architecture": "amd64",
    }


def healthy_conditions(gpus: bool) -> list[Obj]:
    conditions = [
        condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
        condition("PIDPressure", "False", "KubeletHasSufficientPID"),
    ]
    if gpus:
        conditions.append(condition(GPU_HEALTHY, "True", "GPUsHealthy", "all GPUs healthy"))
    return conditions


def condition(type_: str, status: str, reason: str, message: str = "") -> Obj:
    now = timestamp()
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def node_ip(ordinal: int) -> str:
    return f"10.{(ordinal >> 16) & 255}.{(ordinal >> 8) & 255}.{ordinal & 255}"


def machine_deployment(spec: ClusterSpec, pool: Pool) -> Obj:
    """The Cluster API MachineDeployment that owns ``pool``; ``spec.replicas`` is its size."""
    selector = {CLUSTER_LABEL: spec.cluster_name, DEPLOYMENT_LABEL: pool.name}
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineDeployment",
        "metadata": {
            "name": pool.name,
            "namespace": MD_NAMESPACE,
            "labels": {CLUSTER_LABEL: spec.cluster_name, POOL_LABEL: pool.name},
            "annotations": {MIN_SIZE: str(pool.min_size), MAX_SIZE: str(pool.max_nodes)},
        },
        "spec": {
            "clusterName": spec.cluster_name,
            "replicas": pool.count,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "clusterName": spec.cluster_name,
                    "version": "v1.31.0",
                    "bootstrap": {"dataSecretName": f"{pool.name}-bootstrap"},
                    "infrastructureRef": {
                        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                        "kind": "SimMachineTemplate",
                        "name": pool.name,
                    },
                },
            },
        },
        "status": deployment_status(spec, pool.name, replicas=0, ready=0, desired=pool.count),
    }


def deployment_status(
    spec: ClusterSpec,
    pool: str,
    *,
    replicas: int,
    ready: int,
    desired: int,
    pending: int = 0,
    quota: int | None = None,
) -> Obj:
    """MachineDeployment status; ``pending`` machines wait for cloud quota."""
    if ready < desired:
        phase = "ScalingUp"
    elif replicas > desired:
        phase = "ScalingDown"
    else:
        phase = "Running"
    if pending:
        reason = "QuotaExceeded"
        message = (
            f"{pending} of {desired} machines cannot be created: cloud quota of {quota} "
            f"machines for pool {pool} reached"
        )
    elif ready < desired:
        reason, message = "WaitingForMachines", f"{desired - ready} of {desired} machines not ready"
    else:
        reason, message = "", ""
    ready_condition = {"type": "Ready", "status": "False" if reason else "True"}
    if reason:
        ready_condition.update(reason=reason, severity="Warning", message=message)
    return {
        "selector": f"{CLUSTER_LABEL}={spec.cluster_name},{DEPLOYMENT_LABEL}={pool}",
        "replicas": replicas,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "updatedReplicas": replicas,
        "unavailableReplicas": max(0, desired - ready),
        "phase": phase,
        "conditions": [ready_condition],
    }
