"""Cluster spec validation, topology labels, nodes, MachineDeployments, faults, quantities."""

from __future__ import annotations

from pathlib import Path

import pytest

from baton.services.simcluster.world import conditions, quantities, spec, topology

pytestmark = pytest.mark.unit


def test_default_spec_is_one_pool_of_hgx_nodes() -> None:
    s = spec.default_spec(12)
    assert [(p.name, p.count, p.gpus) for p in s.pools] == [("gpu", 12, 8)]


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"pools": [{"count": -1}]}, "pools[0].count"),
        ({"pools": [{"name": "ok"}, {"name": "Bad_Name"}]}, "pools[1].name"),
        ({"pools": [{"gpus": "eight"}]}, "pools[0].gpus"),
        ({"pools": [{"cpu": "lots"}]}, "pools[0].cpu"),
        ({"pools": [{"colour": "red"}]}, "pools[0]"),
        ({"topology": {"nodes_per_rack": 0}}, "topology.nodes_per_rack"),
        ({"topology": {"rack_key": "baton.io/block"}}, "topology"),
        ({"delays": {"pod_start_s": -1}}, "delays.pod_start_s"),
        ({"pools": [{"name": "a"}, {"name": "a"}]}, "pools[1].name"),
        ({"pools": []}, "pools"),
    ],
)
def test_invalid_spec_names_the_key(raw: dict[str, object], key: str) -> None:
    with pytest.raises(spec.SpecError) as info:
        spec.from_dict(raw)
    assert str(info.value).startswith(f"{key}:"), str(info.value)


def test_spec_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "topology: {nodes_per_rack: 4, racks_per_block: 2, rack_key: example.com/rack}\n"
        "pools:\n"
        "  - {name: h100, count: 3}\n"
        "  - {name: a100, count: 2, gpus: 4, gpu_product: NVIDIA-A100-SXM4-80GB, zone: zone-b}\n"
    )
    s = spec.load(path)
    assert [p.name for p in s.pools] == ["h100", "a100"]
    assert s.topology.rack_key == "example.com/rack"
    path.write_text("pools: [{count: x}]\n")
    with pytest.raises(spec.SpecError, match=r"cluster.yaml: pools\[0\].count"):
        spec.load(path)


def test_topology_labels_fill_racks_then_blocks() -> None:
    s = spec.from_dict({"topology": {"nodes_per_rack": 32, "racks_per_block": 8}})
    pool = s.pools[0]
    first = topology.place(s, pool, 0)
    assert first == {
        "topology.kubernetes.io/zone": "zone-a",
        "baton.io/block": "gpu-block-00",
        "baton.io/rack": "gpu-rack-000",
    }
    assert topology.place(s, pool, 31)["baton.io/rack"] == "gpu-rack-000"
    assert topology.place(s, pool, 32)["baton.io/rack"] == "gpu-rack-001"
    assert topology.place(s, pool, 255)["baton.io/block"] == "gpu-block-00"
    assert topology.place(s, pool, 256)["baton.io/block"] == "gpu-block-01"


def test_node_object_reports_gpus_labels_and_ready() -> None:
    s = spec.default_spec(1, gpu_product="NVIDIA-H200", rdma=4)
    node = topology.node_object(s, pool=s.pools[0], slot=40, ordinal=12)
    assert node["metadata"]["name"] == "gpu-00012"
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert labels["baton.io/pool"] == "gpu"
    assert labels["baton.io/rack"] == "gpu-rack-001"
    alloc = quantities.parse_all(node["status"]["allocatable"])
    assert alloc["nvidia.com/gpu"] == 8
    assert alloc["rdma/ib"] == 4
    assert alloc["cpu"] == 192_000
    assert conditions.is_ready(node)


def test_machine_deployment_per_pool() -> None:
    s = spec.from_dict({"pools": [{"name": "h100", "count": 5}]})
    md = topology.machine_deployment(s, s.pools[0])
    assert md["metadata"]["namespace"] == "default"
    assert md["spec"]["replicas"] == 5
    assert md["status"]["phase"] == "ScalingUp"
    assert "cluster.x-k8s.io/deployment-name=h100" in md["status"]["selector"]


def test_faults_set_and_heal_conditions_and_annotations() -> None:
    s = spec.default_spec(1)
    node = topology.node_object(s, pool=s.pools[0], slot=0, ordinal=1)
    conditions.apply(node, conditions.not_ready())
    assert not conditions.is_ready(node)
    conditions.apply(node, conditions.gpu_fault(xid=79, gpu=3))
    gpu = next(c for c in node["status"]["conditions"] if c["type"] == "GPUHealthy")
    assert (gpu["status"], gpu["reason"]) == ("False", "Xid79")
    assert gpu["message"] == "GPU 3: Xid 79: GPU has fallen off the bus"
    assert node["metadata"]["annotations"]["sim.baton.io/gpu-fault"] == "xid=79,gpu=3"
    conditions.apply(node, conditions.ready())
    conditions.apply(node, conditions.gpu_heal())
    assert conditions.is_ready(node)
    assert "sim.baton.io/gpu-fault" not in node["metadata"]["annotations"]
    assert len([c for c in node["status"]["conditions"] if c["type"] == "Ready"]) == 1
    with pytest.raises(ValueError, match="xid"):
        conditions.gpu_fault(xid=12345)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("cpu", "500m", 500),
        ("cpu", "2", 2000),
        ("cpu", 1.5, 1500),
        ("memory", "1Gi", 2**30),
        ("memory", "1G", 10**9),
        ("nvidia.com/gpu", "8", 8),
        ("memory", "1e3", 1000),  # the forms the old simcluster-only parser refused
        ("memory", "1.5Ki", 1536),
        ("cpu", "100n", 1),  # rounded up, as the API server's MilliValue does
    ],
)
def test_quantities(name: str, value: str, expected: int) -> None:
    assert quantities.parse(name, value) == expected


def test_a_bad_quantity_names_the_resource() -> None:
    from baton.libs.kube.quantities import InvalidQuantity

    with pytest.raises(InvalidQuantity, match="memory: '1Zi' is not a Kubernetes quantity"):
        quantities.parse("memory", "1Zi")


def test_pod_requests_take_limits_for_missing_requests() -> None:
    pod = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}},
                {"resources": {"requests": {"cpu": "500m", "nvidia.com/gpu": "1"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "4"}}}],
        }
    }
    assert quantities.pod_requests(pod) == {"cpu": 4000, "nvidia.com/gpu": 3}
