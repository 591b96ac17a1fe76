"""The gang core with DRA: GPUs counted from claims, devices allocated per member when a
placement is committed, held until written, and a node whose devices cannot satisfy a
member's claims kept from the gang."""

from __future__ import annotations

import msgspec
import pytest

from baton.proto.actions import ActionResult, BindGang
from baton.proto.dra import DeviceRequest, PodClaim, ResourceClaim
from baton.proto.k8s import (
    GPU,
    DeviceClassEvent,
    Node,
    Pod,
    ResourceClaimEvent,
    ResourceSliceEvent,
)
from baton.services.gang import core
from tests.support.builders import node, pod, pod_group
from tests.support.dra import GPU_DRIVER, NIC_DRIVER, ROOT, device_class, node_slices, paired
from tests.unit.gang_helpers import binds, feed, tick, verdicts

pytestmark = pytest.mark.unit
NICS = f"{NIC_DRIVER}.deviceclass.resource.k8s.io/devices"


def drivers(state: core.State, nodes: dict[str, int]) -> None:
    """The GPU and NIC drivers publish ``nodes`` (name -> NICs) and their classes."""
    for cls in (device_class(GPU_DRIVER), device_class(NIC_DRIVER)):
        core.step(state, DeviceClassEvent(op="upsert", at=0.0, device_class=cls), 0.0)
    for name, nics in nodes.items():
        for piece in node_slices(name, nics=nics):
            core.step(state, ResourceSliceEvent(op="upsert", at=0.0, resource_slice=piece), 0.0)


def claim_made(state: core.State, claim: ResourceClaim) -> None:
    core.step(state, ResourceClaimEvent(op="upsert", at=0.0, resource_claim=claim), 0.0)


def member(name: str, claim: str) -> Pod:
    """A member of gang ``job`` asking no ``nvidia.com/gpu``: its GPUs come from its claim
    ("" while not generated)."""
    entry = PodClaim(name="devices", claim=claim, template="paired")
    return msgspec.structs.replace(pod(name, group="job", gpus=0), claims=(entry,))


def cluster(nodes: dict[str, int], *, plugin_gpus: int = 0) -> core.State:
    """DRA nodes (name -> NICs) with ``plugin_gpus`` counted GPUs beside their devices."""
    state = core.initial()
    built: list[Node] = [node(n, gpus=plugin_gpus).build() for n in nodes]
    feed(state, built)
    drivers(state, nodes)
    return state


def gang_of(state: core.State, size: int, *, pairs: int, made: bool = True) -> None:
    feed(state, [pod_group("job", min_member=size)])
    for i in range(size):
        claim = paired(f"job-{i}-devices", pairs)
        if made:
            claim_made(state, claim)
        feed(state, [member(f"job-{i}", claim.name if made else "")])


def devices_of(bind: BindGang) -> dict[str, list[tuple[str, str]]]:
    """node -> (driver, device) given there, over every member's claims."""
    out: dict[str, list[tuple[str, str]]] = {}
    for b in bind.bindings:
        for allocation in b.claims:
            out.setdefault(b.node, []).extend((r.driver, r.device) for r in allocation.results)
    return out


def test_a_node_with_only_dra_devices_counts_its_gpus_and_members_their_claims() -> None:
    state = cluster({"n1": 8})
    gang_of(state, 1, pairs=4)
    assert state.cluster.nodes["n1"].node.allocatable[GPU] == 8
    assert state.cluster.pods["default/job-0"].requests[GPU] == 4


def test_members_sharing_a_node_get_different_devices_each_paired_by_root() -> None:
    """Two members of 4 GPU+NIC pairs fill one 8-GPU node: each claim is sent with the
    bind, and no device is given twice."""
    state = cluster({"n1": 8, "n2": 8})
    gang_of(state, 2, pairs=4)
    (bind,) = binds(tick(state))
    given = devices_of(bind)
    assert all(len(b.claims) == 1 and len(b.claims[0].results) == 8 for b in bind.bindings)
    for node_name, found in given.items():
        assert len(found) == len(set(found)), f"{node_name}: a device given twice: {found}"
    for b in bind.bindings:
        results = {r.request: r.device for r in b.claims[0].results}
        for i in range(4):  # gpu-i and nic-i under one root: simcluster's gpu-k / nic-k
            assert results[f"gpu-{i}"].split("-")[1] == results[f"nic-{i}"].split("-")[1]


def test_a_gang_waits_for_its_members_claims_and_says_so() -> None:
    state = cluster({"n1": 8})
    gang_of(state, 1, pairs=2, made=False)
    out = tick(state)
    assert not binds(out)
    (told,) = verdicts(out)
    assert "waiting for its members' ResourceClaims" in told.reason
    assert "not generated yet" in told.reason
    claim = paired("job-0-devices", 2)
    claim_made(state, claim)
    feed(state, [member("job-0", claim.name)], at=2.0)
    (bind,) = binds(tick(state, at=3.0))
    assert len(bind.bindings[0].claims[0].results) == 4


def test_a_node_without_the_nics_a_member_claims_is_not_chosen() -> None:
    """NICs count by DeviceClass (``dra.net.deviceclass.resource.k8s.io/devices``) like
    GPUs: n1, first by name, has GPUs but no NICs, so the member goes to n2 at once."""
    state = cluster({"n1": 0, "n2": 8})
    gang_of(state, 1, pairs=4)
    assert state.cluster.pods["default/job-0"].requests[NICS] == 4
    (bind,) = binds(tick(state))
    assert [b.node for b in bind.bindings] == ["n2"]


def test_a_node_whose_devices_cannot_be_aligned_is_kept_from_the_gang() -> None:
    """n1 has the GPUs and NICs a member counts, but its NICs name no PCIe root: the
    member placed there cannot be allocated; the gang is told why and placed on n2."""
    state = cluster({"n1": 8, "n2": 8})
    _, nics = node_slices("n1")
    rootless = tuple(
        msgspec.structs.replace(d, attributes={k: v for k, v in d.attributes.items() if k != ROOT})
        for d in nics.devices
    )
    nics = msgspec.structs.replace(nics, devices=rootless)
    core.step(state, ResourceSliceEvent(op="upsert", at=0.0, resource_slice=nics), 0.0)
    gang_of(state, 1, pairs=4)
    first = tick(state)
    told = [v.reason for v in verdicts(first)]
    if binds(first):  # the search chose n2 at once: nothing more to see
        pytest.fail(f"expected n1 (name order) first, got {binds(first)[0].bindings}")
    assert any("cannot be allocated there" in r and "n1" in r for r in told), told
    (bind,) = binds(tick(state, at=2.0))
    assert [b.node for b in bind.bindings] == ["n2"]


def test_a_rolled_back_bind_frees_the_devices_it_held() -> None:
    """Devices held for a placement in flight are not given to another gang; once the
    bind is rolled back they are free again."""
    state = cluster({"n1": 8})
    gang_of(state, 1, pairs=8)
    (bind,) = binds(tick(state))
    assert state.claims.devices.holds
    result = ActionResult(action_id=bind.id, action_type="action.bind-gang.v1", by="actuator",
                          at=2.0, outcome="rolled-back", error="claim refused")  # fmt: skip
    core.step(state, result, 2.0)
    assert not state.claims.devices.holds


def test_a_claim_no_node_could_meet_as_baton_reads_it_waits_without_trying_nodes() -> None:
    """A request of a DeviceClass that does not exist: the gang is told so and tries no
    node (a node-by-node misfit would walk the whole cluster)."""
    state = cluster({"n1": 8, "n2": 8})
    feed(state, [pod_group("job", min_member=1)])
    odd = msgspec.structs.replace(
        paired("job-0-devices", 1),
        requests=(*paired("job-0-devices", 1).requests[:1],
                  DeviceRequest(name="nic-0", device_class="rdma.example.com")),
    )  # fmt: skip
    claim_made(state, odd)
    feed(state, [member("job-0", odd.name)])
    out = tick(state)
    assert not binds(out)
    assert not state.claims.misfits
    (told,) = verdicts(out)
    assert "DeviceClass 'rdma.example.com' does not exist" in told.reason
    core.step(state, DeviceClassEvent(op="upsert", at=2.0,
                                      device_class=device_class(NIC_DRIVER, "rdma.example.com")),
              2.0)  # fmt: skip
    (bind,) = binds(tick(state, at=3.0))
    assert len(bind.bindings[0].claims[0].results) == 2


def test_a_bind_too_large_for_one_nats_message_is_not_sent_and_the_gang_is_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bind is one action, one message: a gang whose members' devices would not fit
    in it is told so (here with a 1 KB limit) rather than sending what cannot arrive."""
    monkeypatch.setattr(core, "MAX_ACTION_BYTES", 1024)
    state = cluster({"n1": 8, "n2": 8})
    gang_of(state, 2, pairs=8)
    out = tick(state)
    assert not binds(out)
    (told,) = verdicts(out)
    assert "more than one NATS message holds (1,024)" in told.reason
    assert not state.claims.devices.holds  # nothing held for a bind never sent
