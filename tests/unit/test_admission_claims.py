"""Quotas in device terms: GPUs a gang's members ask through DRA claims count against
its team as ``nvidia.com/gpu`` requests do; a member whose claims are not made yet is
not counted (nor admitted for fewer GPUs than it gets); other devices (MIG) count
against a team's caps by DeviceClass."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from baton.proto import keys
from baton.proto.admission import GangAdmitted, GangQueued
from baton.proto.dra import PodClaim
from baton.proto.k8s import DeviceClassEvent, Pod, PodEvent, ResourceClaimEvent, ResourceSliceEvent
from baton.proto.runner import Tick
from baton.services.admission import core
from tests.support.dra import (
    GPU_DRIVER,
    NIC_DRIVER,
    device_class,
    paired,
    published_classes,
    published_slices,
    request,
)
from tests.support.dra import claim as claim_of
from tests.unit.test_admission_members import QUOTA_8, feed, group, member, of, start

pytestmark = pytest.mark.unit


def classes() -> list[Any]:
    return [DeviceClassEvent(op="upsert", at=1.0, device_class=device_class(d))
            for d in (GPU_DRIVER, NIC_DRIVER)]  # fmt: skip


def claiming(gang: str, name: str, *, made: bool = True) -> list[Any]:
    """A member asking no nvidia.com/gpu, its 8 GPUs through a claim of 8 GPU+NIC pairs
    (``made``: the claim exists and the pod names it; else not generated yet)."""
    claim = paired(f"{name}-devices", 8)
    claim = msgspec.structs.replace(claim, namespace="ml")
    entry = PodClaim(name="devices", claim=claim.name if made else "", template="paired")
    event = member(gang, name, 0)
    pod = msgspec.structs.replace(event.pod, claims=(entry,))
    made_claim = [ResourceClaimEvent(op="upsert", at=1.0, resource_claim=claim)] if made else []
    return [*made_claim, msgspec.structs.replace(event, pod=pod)]


def test_claimed_gpus_count_against_the_team_quota() -> None:
    """Team a's quota is 8: a gang claiming 8 GPUs is admitted for 8; a second one waits."""
    state = start(QUOTA_8, {"n1": "pa", "n2": "pa"})
    out = feed(state, *classes(), group("one", 1), *claiming("one", "one-0"))
    assert [(a.gang, a.gpus) for a in of(out, GangAdmitted)] == [("ml/one", 8)]
    out = feed(state, group("two", 1), *claiming("two", "two-0"))
    assert not of(out, GangAdmitted)
    assert any(q.gang == "ml/two" for q in of(out, GangQueued))


def test_a_member_is_counted_once_its_claims_are_made() -> None:
    """Before its claim exists a claiming member is not counted (not "Admitted: 0
    GPUs"); when the claim comes, it arrives with its 8 GPUs."""
    state = start(QUOTA_8, {"n1": "pa", "n2": "pa"})
    out = feed(state, *classes(), group("one", 1), *claiming("one", "one-0", made=False))
    assert not of(out, GangAdmitted)
    out = feed(state, *claiming("one", "one-0"))
    assert [(a.gang, a.gpus) for a in of(out, GangAdmitted)] == [("ml/one", 8)]


def test_a_claim_seen_after_its_pod_names_it_counts_the_pod_again() -> None:
    """The pod names its claim before admission has seen the claim (two watches): the
    claim's own event counts the pod."""
    state = start(QUOTA_8, {"n1": "pa", "n2": "pa"})
    claim_event, pod_event = claiming("one", "one-0")
    out = feed(state, *classes(), group("one", 1), pod_event)
    assert not of(out, GangAdmitted)
    out = feed(state, claim_event)
    assert [(a.gang, a.gpus) for a in of(out, GangAdmitted)] == [("ml/one", 8)]


MIG_CAP = {
    "teams": [
        {"name": "a", "namespaces": ["ml"], "pools": ["pa"], "quota": {"gpus": 8},
         "devices": {"mig.nvidia.com": 7}},
        {"name": "b", "namespaces": ["other"], "pools": ["pb"]},
    ]
}  # fmt: skip


def mig_job(name: str, *, phase: str = "Pending", count: int = 1, gang: str = "") -> list[Any]:
    """A pod claiming ``count`` 1g.10gb MIG devices: alone (schedulerName baton, no
    PodGroup), or a member of PodGroup ``gang``."""
    mig = request("mig", "mig.nvidia.com", count)
    claim = msgspec.structs.replace(claim_of(f"{name}-mig", mig), namespace="ml")
    labels = {keys.POD_GROUP: gang} if gang else {}
    pod = Pod(namespace="ml", name=name, uid=f"uid-{name}", phase=phase,  # type: ignore[arg-type]
              scheduler_name="baton", labels=labels,
              claims=(PodClaim(name="mig", claim=claim.name),))  # fmt: skip
    return [ResourceClaimEvent(op="upsert", at=1.0, resource_claim=claim),
            PodEvent(op="upsert", at=1.0, pod=pod)]  # fmt: skip


def mig_cluster() -> core.State:
    """Team a's pool of one MIG-capable node, its slices and NVIDIA's classes seen."""
    state = start(MIG_CAP, {"n1": "pa"})
    feed(state, *(DeviceClassEvent(op="upsert", at=1.0, device_class=c)
                  for c in published_classes()))  # fmt: skip
    feed(state, *(ResourceSliceEvent(op="upsert", at=1.0, resource_slice=s)
                  for s in published_slices("n1")))  # fmt: skip
    return state


def test_a_team_s_cap_on_mig_devices_holds_and_frees_as_jobs_end() -> None:
    """Kubernetes' ResourceQuota counts ``mig.nvidia.com.deviceclass.resource.k8s.io/
    devices``; team a may hold 7: the eighth 1g.10gb job waits, saying why, and is
    admitted once one of the seven ends. MIG devices take nothing of the GPU quota."""
    state = mig_cluster()
    out = feed(state, *(e for i in range(8) for e in mig_job(f"eval-{i}")))
    admitted = [a.gang for a in of(out, GangAdmitted)]
    assert admitted == [f"ml/eval-{i}" for i in range(7)]
    assert all(a.gpus == 0 for a in of(out, GangAdmitted))
    (waits,) = [q for q in of(out, GangQueued) if q.gang == "ml/eval-7" and "devices" in q.reason]
    assert "holds 7 of its 7 mig.nvidia.com devices for other gangs" in waits.reason
    assert state.devices_used["a"] == {"mig.nvidia.com.deviceclass.resource.k8s.io/devices": 7}
    out = feed(state, *mig_job("eval-0", phase="Succeeded"), Tick(at=2.0), now=2.0)
    assert [a.gang for a in of(out, GangAdmitted)] == ["ml/eval-7"]


def test_a_member_joining_an_admitted_gang_past_the_cap_pauses_it() -> None:
    """A gang admitted with 4 MIG devices under a cap of 7: a second member asking 4
    more takes its marks back, told the cap, as a member past the GPU quota would."""
    state = mig_cluster()
    out = feed(state, group("evals", 1), *mig_job("evals-0", count=4, gang="evals"))
    assert [a.gang for a in of(out, GangAdmitted)] == ["ml/evals"]
    out = feed(state, *mig_job("evals-1", count=4, gang="evals"))
    (told,) = [q for q in of(out, GangQueued) if "devices" in q.reason]
    assert "holds 0 of its 7 mig.nvidia.com devices for other gangs" in told.reason
    assert "ask 8" in told.reason
    assert state.gangs["ml/evals"].paused


def notebook(name: str) -> PodEvent:
    """A lone pod naming the shared claim ``single-gpu`` (time-slicing one GPU)."""
    pod = Pod(namespace="ml", name=name, uid=f"uid-{name}", scheduler_name="baton",
              claims=(PodClaim(name="gpu", claim="single-gpu"),))  # fmt: skip
    return PodEvent(op="upsert", at=1.0, pod=pod)


def test_pods_sharing_one_claim_take_its_gpu_of_the_quota_once() -> None:
    """Team a's quota is 8 and a gang holds 7 of it: four pods time-slicing one GPU
    through one claim are all admitted, for 1 GPU in all; a second 1-GPU claim waits."""
    state = start(QUOTA_8, {"n1": "pa", "n2": "pa"})
    shared = msgspec.structs.replace(claim_of("single-gpu", request("gpu")), namespace="ml")
    seven = msgspec.structs.replace(claim_of("seven", request("gpu", count=7)), namespace="ml")
    big = msgspec.structs.replace(member("big", "big-0", 0).pod,
                                  claims=(PodClaim(name="gpus", claim="seven"),))  # fmt: skip
    out = feed(state, *classes(), ResourceClaimEvent(op="upsert", at=1.0, resource_claim=seven),
               group("big", 1), PodEvent(op="upsert", at=1.0, pod=big),
               ResourceClaimEvent(op="upsert", at=1.0, resource_claim=shared),
               *(notebook(f"nb-{i}") for i in range(4)))  # fmt: skip
    admitted = {a.gang: a.gpus for a in of(out, GangAdmitted)}
    assert admitted == {"ml/big": 7, "ml/nb-0": 1, "ml/nb-1": 0, "ml/nb-2": 0, "ml/nb-3": 0}
    other = msgspec.structs.replace(claim_of("other-gpu", request("gpu")), namespace="ml")
    lone = Pod(namespace="ml", name="solo", uid="uid-solo", scheduler_name="baton",
               claims=(PodClaim(name="gpu", claim="other-gpu"),))  # fmt: skip
    out = feed(state, ResourceClaimEvent(op="upsert", at=1.0, resource_claim=other),
               PodEvent(op="upsert", at=1.0, pod=lone))  # fmt: skip
    assert not of(out, GangAdmitted)  # 8 of 8 used: 7 + the shared 1
