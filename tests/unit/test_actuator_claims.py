"""A gang's DRA claims: what is written to each before the bind, what is undone when the
gang is rolled back (only what this action wrote), and what the result says."""

from __future__ import annotations

import time

import msgspec
import pytest

from baton.proto.actions import BindGang, Binding
from baton.proto.dra import ClaimAllocation, DeviceResult
from baton.services.actuator import claiming
from baton.services.actuator.core import claims, cost_of
from baton.services.actuator.core.claims import (
    MAX_RESERVED,
    Claimed,
    Consumer,
    Held,
    Release,
    Write,
    judge,
    plan_release,
    released,
)

pytestmark = pytest.mark.unit

POD = Consumer(name="p0", uid="u-p0")
OTHER = Consumer(name="stranger", uid="u-x")


def devices(node: str = "n1", *names: str) -> tuple[DeviceResult, ...]:
    return tuple(
        DeviceResult(request="gpus", driver="gpu.nvidia.com", pool=node, device=name)
        for name in names or ("gpu-0", "gpu-1")
    )


WANT = ClaimAllocation(name="c0", uid="u-c0", results=devices())


def held(
    *, allocated: bool = False, node: str = "n1", uid: str = "u-c0",
    results: tuple[DeviceResult, ...] | None = None, reserved_for: tuple[Consumer, ...] = (),
) -> Held:  # fmt: skip
    """A claim as read: allocated (``results``, default gpu-0 and gpu-1 of ``node``) or not."""
    if results is None:
        results = devices(node or "n1") if allocated else ()
    return Held(uid=uid, resource_version="7", allocated=allocated, results=results,
                node=node if allocated else "", reserved_for=reserved_for)  # fmt: skip


@pytest.mark.parametrize(
    ("found", "state", "kind", "error"),
    [
        (None, "failed", None, "not found"),
        (held(uid="u-new"), "failed", None, "claim was replaced (uid u-new, not u-c0)"),
        (msgspec.structs.replace(held(), deleting=True), "failed", None, "claim is being deleted"),
        (held(), "allocated", "allocate", ""),
        (held(allocated=True, reserved_for=(POD,)), "already", None, ""),
        (held(allocated=True, node="", reserved_for=(POD,)), "already", None, ""),  # any node
        (held(allocated=True, reserved_for=(OTHER,)), "reserved", "reserve", ""),
        (held(allocated=True), "reserved", "reserve", ""),
        (
            held(allocated=True, node="n2", reserved_for=(OTHER,)),
            "failed", None,
            "already allocated otherwise (gpu-0, gpu-1 on n2), held by pods/stranger",
        ),
        (
            held(allocated=True, results=devices("n1", "gpu-6", "gpu-7")),
            "failed", None,
            "already allocated otherwise (gpu-6, gpu-7 on n1), reserved for nobody",
        ),
        (
            held(allocated=True, reserved_for=(OTHER,) * MAX_RESERVED),
            "failed", None, "already reserved for 256 consumers, the most",
        ),
    ],
)  # fmt: skip
def test_judge(found: Held | None, state: str, kind: str | None, error: str) -> None:
    got_state, write, got_error = judge(found, WANT, pod=POD, node="n1")
    assert (got_state, write.kind if write else None, got_error) == (state, kind, error)


def test_allocating_writes_the_devices_on_the_node_reserved_for_the_pod() -> None:
    _, write, _ = judge(held(), WANT, pod=POD, node="n1")
    assert write == Write(kind="allocate", results=WANT.results, node="n1", reserved_for=(POD,))
    _, write, _ = judge(held(allocated=True, reserved_for=(OTHER,)), WANT, pod=POD, node="n1")
    assert write == Write(kind="reserve", reserved_for=(OTHER, POD))


def test_a_claim_without_a_uid_in_the_action_is_not_checked_for_replacement() -> None:
    want = ClaimAllocation(name="c0", results=devices())
    assert judge(held(uid="anything"), want, pod=POD, node="n1")[0] == "allocated"


def test_the_same_devices_in_another_order_are_the_same_allocation() -> None:
    found = held(allocated=True, results=tuple(reversed(devices())), reserved_for=(POD,))
    assert judge(found, WANT, pod=POD, node="n1")[0] == "already"


def claimed(state: str, *, pod: str = "p0", claim: str = "c0", node: str = "n1") -> Claimed:
    b = Binding(namespace="a", pod=pod, uid=f"u-{pod}", node=node)
    want = ClaimAllocation(name=claim, uid=f"u-{claim}", results=devices(node))
    return Claimed(binding=b, claim=want, state=state,  # type: ignore[arg-type]
                   error="not found" if state == "failed" else "",
                   pod=Consumer(name=pod, uid=f"u-{pod}"), uid=f"u-{claim}")  # fmt: skip


def test_only_what_this_action_wrote_is_released() -> None:
    done = (
        claimed("allocated", pod="p0", claim="c0"),
        claimed("already", pod="p1", claim="c1"),  # allocated before: never touched
        claimed("reserved", pod="p2", claim="c2"),
        claimed("failed", pod="p3", claim="c3"),
        claimed("skipped", pod="p4", claim="c4"),
    )
    assert plan_release(done) == (
        Release(namespace="a", name="c0", uid="u-c0", results=devices(), node="n1",
                pods=frozenset({"u-p0"}), deallocate=True),
        Release(namespace="a", name="c2", uid="u-c2", results=devices(), node="n1",
                pods=frozenset({"u-p2"}), deallocate=False),
    )  # fmt: skip


def test_a_claim_two_members_share_is_released_once_for_both() -> None:
    done = (claimed("allocated", pod="p0"), claimed("reserved", pod="p1"))
    (step,) = plan_release(done)
    assert step.pods == {"u-p0", "u-p1"} and step.deallocate


STEP = Release(namespace="a", name="c0", uid="u-c0", results=devices(), node="n1",
               pods=frozenset({"u-p0"}), deallocate=True)  # fmt: skip


@pytest.mark.parametrize(
    ("now", "step", "write"),
    [
        (held(allocated=True, reserved_for=(POD,)), STEP, Write(kind="clear")),
        (None, STEP, None),  # gone (deleted with its pod)
        (held(allocated=True, uid="u-new", reserved_for=(POD,)), STEP, None),  # replaced
        (held(), STEP, None),  # someone cleared it already
        (held(allocated=True, node="n2", reserved_for=(POD,)), STEP, None),  # reallocated
        (held(allocated=True, reserved_for=(POD, OTHER)), STEP,  # shared since: keep it
         Write(kind="unreserve", reserved_for=(OTHER,))),
        (held(allocated=True, reserved_for=(OTHER, POD)),
         msgspec.structs.replace(STEP, deallocate=False),
         Write(kind="unreserve", reserved_for=(OTHER,))),
        (held(allocated=True, reserved_for=(OTHER,)),
         msgspec.structs.replace(STEP, deallocate=False),
         None),  # our reservation is gone already
    ],
)  # fmt: skip
def test_released_undoes_only_what_is_still_ours(
    now: Held | None, step: Release, write: Write | None
) -> None:
    assert released(now, step) == write


@pytest.mark.parametrize(
    ("gang", "states", "outcome"),
    [
        ("applied", ("allocated",), "applied"),
        ("already", ("already", "already"), "already"),
        ("already", ("already", "reserved"), "applied"),  # pods bound before, claims now
        ("already", ("allocated", "failed", "skipped"), "rolled-back"),
        ("rolled-back", ("allocated",), "rolled-back"),
        ("already", (), "already"),
    ],
)
def test_outcome(gang: str, states: tuple[str, ...], outcome: str) -> None:
    done = tuple(claimed(s, claim=f"c{i}") for i, s in enumerate(states))
    assert claims.outcome(gang, done) == outcome  # type: ignore[arg-type]


def test_the_error_names_the_claim_its_pod_and_node_and_what_was_released() -> None:
    done = (claimed("allocated"), claimed("failed", pod="p1", claim="c1", node="n2"),
            claimed("failed", pod="p2", claim="c2"))  # fmt: skip
    assert claims.claims_error(done, undone=1) == (
        "claim a/c1 of a/p1 -> n2 failed: not found (and 1 more); "
        "released 1 claims written, bound nothing"
    )
    assert claims.claims_error((claimed("allocated"),), undone=0) == ""
    assert claims.released_note(2) == "; released 2 claims written"
    assert claims.released_note(0) == ""


def test_what_is_written_reads_back_as_the_same_allocation() -> None:
    write = Write(kind="allocate", results=WANT.results, node="n1", reserved_for=(POD,))
    status = claiming.status_of(write)
    assert status["allocation"]["nodeSelector"] == {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}  # fmt: skip
    assert status["reservedFor"] == [{"resource": "pods", "name": "p0", "uid": "u-p0"}]
    back = claiming.held_of({"metadata": {"uid": "u-c0", "resourceVersion": "9"},
                             "status": status})  # fmt: skip
    assert back == Held(uid="u-c0", resource_version="9", allocated=True,
                        results=WANT.results, node="n1", reserved_for=(POD,))  # fmt: skip
    assert claiming.status_of(Write(kind="clear")) == {"allocation": None, "reservedFor": None}
    assert claiming.status_of(Write(kind="unreserve")) == {"reservedFor": None}


def test_a_hostname_selector_names_the_node_too() -> None:
    allocation = {"devices": {"results": []}, "nodeSelector": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                               "values": ["n3"]}]}]}}  # fmt: skip
    assert claiming.held_of({"status": {"allocation": allocation}}).node == "n3"


def test_a_bind_is_charged_for_its_claims_too() -> None:
    claim = ClaimAllocation(name="c", results=devices())
    bindings = (Binding(namespace="a", pod="p0", node="n1", claims=(claim, claim)),
                Binding(namespace="a", pod="p1", node="n1"))  # fmt: skip
    action = BindGang(id="g", by="gang", at=time.time(), gang="a/g", bindings=bindings)
    assert cost_of(action) == 4
