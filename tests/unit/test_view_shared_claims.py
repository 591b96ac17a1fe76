"""A claim several pods name (time-slicing one GPU among small jobs, as Kubernetes shares a
ResourceClaim): counted once, on one pod; the others ask nothing for it, wait until it is
allocated, then follow it to its node. The slices are simcluster's, slimmed by the
bridge's code."""

from __future__ import annotations

import msgspec
import pytest

from baton.libs.view.claimed import Claimed
from baton.proto.dra import DeviceResult, ResourceClaim
from baton.proto.k8s import GPU, DeviceClassEvent, ResourceClaimEvent, ResourceSliceEvent
from tests.support.dra import claim, claiming, published_classes, published_slices, request

pytestmark = pytest.mark.unit

SHARED = claim("shared-gpu", request("gpu"))
GIVEN = (DeviceResult(request="gpu", driver="gpu.nvidia.com", pool="n2", device="gpu-5"),)


def cluster() -> Claimed:
    out = Claimed()
    for name in ("n1", "n2"):
        for piece in published_slices(name, mig=False):
            out.apply(ResourceSliceEvent(op="upsert", at=0.0, resource_slice=piece))
    for cls in published_classes():
        out.apply(DeviceClassEvent(op="upsert", at=0.0, device_class=cls))
    out.apply(ResourceClaimEvent(op="upsert", at=0.0, resource_claim=SHARED))
    return out


def written(c: Claimed, *reserved: str) -> dict[str, int]:
    """The claim allocated on n2 and reserved for ``reserved`` (pod names): the GPUs
    each pod naming it counts now."""
    uids = tuple(f"uid-pod-default-{p}" for p in reserved)
    done = msgspec.structs.replace(SHARED, allocated=GIVEN, node="n2", reserved_for=uids)
    event = ResourceClaimEvent(op="upsert", at=1.0, resource_claim=done)
    return {p.name: p.requests.get(GPU, 0) for p in c.apply(event)}


def test_a_shared_claim_counts_once_and_its_followers_wait_then_follow_it() -> None:
    c = cluster()
    a, b, d = (claiming(name, SHARED) for name in ("a", "b", "d"))
    counted = [c.pod(p).requests.get(GPU, 0) for p in (a, b, d)]
    assert counted == [1, 0, 0]  # the first seen is charged; one GPU for three pods
    assert c.waits(a) == "" and c.pinned(a) == set()
    assert c.waits(b) == (
        "shares ResourceClaim default/shared-gpu with pod a, placed first: it follows the "
        "claim to its node once allocated"
    )
    assert written(c, "a") == {"a": 1, "b": 0, "d": 0}  # every pod sharing it recounted
    assert c.waits(b) == "" and c.pinned(b) == {"n2"}


def test_the_charge_moves_to_the_first_pod_the_claim_is_still_reserved_for() -> None:
    c = cluster()
    a, b = claiming("a", SHARED), claiming("b", SHARED)
    c.pod(a), c.pod(b)
    assert written(c, "a", "b") == {"a": 1, "b": 0}
    c.forget(a)  # a ended; the resourceclaim controller takes it off reservedFor
    assert written(c, "b") == {"b": 1}


def test_a_claim_one_pod_names_is_that_pods_whatever_it_is_reserved_for() -> None:
    c = cluster()
    own: ResourceClaim = claim("own", request("gpu", count=2))
    c.apply(ResourceClaimEvent(op="upsert", at=0.0, resource_claim=own))
    assert c.pod(claiming("solo", own)).requests.get(GPU, 0) == 2
    assert c.waits(claiming("solo", own)) == ""
