"""simcluster's structural schemas: what they refuse, and that nothing real is refused
(everything Baton and the simulation write decodes without a problem)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from baton.proto.actions import PodTemplate
from baton.proto.k8s import Toleration
from baton.services.actuator import podspec
from baton.services.admission.registration import configurations
from baton.services.simcluster.api import kinds, validation
from baton.services.simcluster.api.objects import ApiError
from baton.services.simcluster.api.resources import RESOURCES, resource
from baton.services.simcluster.world import controlled, dra, topology
from baton.services.simcluster.world.spec import default_spec
from baton.services.simcluster.world.workload import Job, job_objects

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
POD = resource("pods")


def problems(group: str, kind: str, obj: dict[str, Any]) -> validation.Problems:
    found = validation.Problems()
    schema = kinds.schema_of(group, kind)
    assert schema is not None
    validation.prune(schema, obj, "", found)
    return found


def pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}], **spec}}


@pytest.mark.parametrize(
    ("spec", "unknown"),
    [
        ({"schedulerNmae": "x"}, ["spec.schedulerNmae"]),
        ({"containers": [{"name": "c"}, {"name": "d", "imagee": "x"}]},
         ["spec.containers[1].imagee"]),
        ({"affinity": {"anything": {"goes": 1}}}, []),  # not modelled: kept as sent
        ({"tolerations": [{"key": "k", "operater": "Exists"}]}, ["spec.tolerations[0].operater"]),
    ],
)  # fmt: skip
def test_unknown_fields_are_named_by_path(spec: dict[str, Any], unknown: list[str]) -> None:
    assert problems("", "Pod", pod(**spec)).unknown == unknown


def test_strict_refuses_warn_drops_ignore_is_silent() -> None:
    with pytest.raises(ApiError) as refused:
        validation.decode(POD, pod(schedulerNmae="x", priorityy=1), mode="Strict")
    assert refused.value.code == 400
    assert refused.value.message == (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
        'unknown field "spec.schedulerNmae", unknown field "spec.priorityy"'
    )
    kept, warnings = validation.decode(POD, pod(schedulerNmae="x"), mode="Warn")
    assert "schedulerNmae" not in kept["spec"]
    assert warnings == ['unknown field "spec.schedulerNmae"']
    assert validation.decode(POD, pod(schedulerNmae="x"), mode="Ignore")[1] == []
    with pytest.raises(ApiError, match='fieldValidation: Unsupported value: "strict"'):
        validation.decode(POD, pod(), mode="strict")


@pytest.mark.parametrize(
    ("value", "ok"),
    [(8, True), ("8", True), ("500m", True), (True, False), ({"n": 1}, False)],
)
def test_quantities_are_int_or_string(value: Any, ok: bool) -> None:
    spec = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": value}}}]}
    assert (problems("", "Pod", pod(**spec)).invalid == []) is ok


def test_podgroup_schema_is_the_crd_in_deploy() -> None:
    crd = yaml.safe_load((ROOT / "deploy/crds/scheduling.x-k8s.io_podgroups.yaml").read_text())
    want = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    have = kinds.schema_of("scheduling.x-k8s.io", "PodGroup")
    assert have is not None
    assert set(have["properties"]) == set(want)
    for part in ("spec", "status"):
        assert _fields(have["properties"][part]) == _fields(want[part])


def test_team_schema_is_the_crd_in_deploy() -> None:
    crd = yaml.safe_load((ROOT / "deploy/crds/baton.io_teams.yaml").read_text())
    version = crd["spec"]["versions"][0]
    want = version["schema"]["openAPIV3Schema"]["properties"]
    have = kinds.schema_of("baton.io", "Team")
    assert have is not None
    assert set(have["properties"]) == set(want)
    for part in ("spec", "status"):
        assert _fields(have["properties"][part]) == _fields(want[part])
    served = resource("teams")
    assert (served.group, served.version, served.kind) == (
        crd["spec"]["group"], version["name"], crd["spec"]["names"]["kind"]
    )  # fmt: skip
    assert not served.namespaced and crd["spec"]["scope"] == "Cluster"
    assert "status" in served.subresources and "status" in version["subresources"]


def _fields(schema: dict[str, Any], prefix: str = "") -> set[str]:
    out = set()
    for key, sub in (schema.get("properties") or {}).items():
        out |= {prefix + key} | _fields(sub.get("items", sub), f"{prefix}{key}.")
    return out


def test_what_baton_and_the_simulation_write_decodes_cleanly() -> None:
    spec = default_spec(2)
    pool = spec.pools[0]
    group, pods = job_objects(Job(job_id="j", submit_s=0, gpus=16, duration_s=60, team="a"))
    balloon = PodTemplate(
        namespace="a", generate_name="balloon-", requests={"cpu": 500, "nvidia.com/gpu": 8},
        priority=-10, tolerations=(Toleration(key="k", operator="Exists"),),
    )  # fmt: skip
    preflight = PodTemplate(
        namespace="baton-system", name="preflight-n1", image="dcgm", command=("dcgmi", "diag"),
        restart_policy="Never", node_name="n1",
    )  # fmt: skip
    webhooks = configurations("https://x", ca_pem=b"")
    written = [
        ("scheduling.x-k8s.io", "PodGroup", group),
        *[("", "Pod", p) for p in pods],
        ("", "Pod", podspec.from_template(balloon)),
        ("", "Pod", podspec.from_template(preflight)),
        ("", "Node", topology.node_object(spec, pool=pool, slot=0, ordinal=1)),
        ("cluster.x-k8s.io", "MachineDeployment", topology.machine_deployment(spec, pool)),
        *[("admissionregistration.k8s.io", o["kind"], o) for _, o in webhooks],
    ]  # fmt: skip
    for group_name, kind, obj in written:
        found = problems(group_name, kind, obj)
        assert (found.unknown, found.invalid) == ([], []), (kind, obj)


def test_every_schema_names_a_served_kind() -> None:
    served = {(r.group, r.kind) for r in RESOURCES}
    assert set(kinds.SCHEMAS) <= served


def test_the_workload_kinds_the_simulation_writes_decode_cleanly() -> None:
    """Jobs, JobSets and MPIJobs as `baton up --submit controllers` writes them, and the
    DRA objects simcluster's drivers publish."""
    written = []
    for gpus, job_id in ((8, "small"), (64, "a"), (64, "b"), (64, "c")):  # every kind
        job = Job(job_id=job_id, submit_s=0, gpus=gpus, duration_s=60, team="a")
        written += controlled.controlled_objects(job)
    written += [("deviceclasses", c) for c in dra.device_classes()]
    slices = dra.node_slices("n1", gpus=8, nics=8, product="H100", memory="80Gi")
    written += [("resourceslices", s) for s in slices]
    kinds_written = set()
    for res, obj in written:
        r = resource(res)
        found = problems(r.group, r.kind, obj)
        assert (found.unknown, found.invalid) == ([], []), (r.kind, found)
        kinds_written.add(r.kind)
    assert kinds_written >= {"Job", "JobSet", "MPIJob", "DeviceClass", "ResourceSlice"}


@pytest.mark.parametrize(
    ("group", "kind", "body", "unknown"),
    [
        ("batch", "Job", {"spec": {"paralelism": 2}}, ["spec.paralelism"]),
        ("jobset.x-k8s.io", "JobSet", {"spec": {"replicatedJobs": [{"replica": 2}]}},
         ["spec.replicatedJobs[0].replica"]),
        ("kubeflow.org", "MPIJob", {"spec": {"mpiReplicaSpecs": {"Workers": {}}}},
         ["spec.mpiReplicaSpecs.Workers"]),
        ("resource.k8s.io", "ResourceClaim",
         {"spec": {"devices": {"constraints": [{"matchAtribute": "x"}]}}},
         ["spec.devices.constraints[0].matchAtribute"]),
    ],
)  # fmt: skip
def test_a_typo_in_a_workload_or_dra_kind_is_an_unknown_field(
    group: str, kind: str, body: dict[str, Any], unknown: list[str]
) -> None:
    assert problems(group, kind, {"metadata": {"name": "x"}, **body}).unknown == unknown
