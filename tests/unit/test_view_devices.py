"""DRA devices: allocating a pod's claims on a node (counts, selectors, matchAttribute,
All), what is taken (other claims, holds), the CEL subset and its refusals, and a
property: every allocation meets its claims, and a refusal on a small node is right
(a brute-force search finds none either)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from baton.libs.view import allocating
from baton.libs.view.devices import GPU_DRIVER, Devices
from baton.libs.view.selectors import SelectorError, selects
from baton.proto.dra import (
    AttributeValue,
    ClaimAllocation,
    Device,
    DeviceClass,
    DeviceConstraint,
    DeviceRequest,
    DeviceResult,
    ResourceClaim,
    ResourceSlice,
)
from baton.proto.k8s import DeviceClassEvent, Pod, ResourceClaimEvent, ResourceSliceEvent
from baton.services.simcluster.world import hardware
from tests.support.dra import (
    H100,
    NIC_DRIVER,
    ROOT,
    claim,
    claiming,
    device,
    device_class,
    node_slices,
    paired,
    request,
)

pytestmark = pytest.mark.unit

# --- builders ------------------------------------------------------------------------------


def devices(*, nodes: Iterable[str] = ("n1",), claims: Iterable[ResourceClaim] = (),
            classes: Iterable[DeviceClass] = (), **shape: int) -> Devices:  # fmt: skip
    out = Devices()
    for node in nodes:
        for piece in node_slices(node, **shape):
            out.apply(ResourceSliceEvent(op="upsert", at=0.0, resource_slice=piece))
    for cls in (device_class(GPU_DRIVER), device_class(NIC_DRIVER), *classes):
        out.apply(DeviceClassEvent(op="upsert", at=0.0, device_class=cls))
    for c in claims:
        out.apply(ResourceClaimEvent(op="upsert", at=0.0, resource_claim=c))
    return out


def results(found: tuple[ClaimAllocation, ...] | str) -> dict[str, str]:
    """request -> device, across the allocations."""
    assert not isinstance(found, str), found
    return {r.request: r.device for a in found for r in a.results}


def allocated(
    c: ResourceClaim, found: tuple[ClaimAllocation, ...] | str, node: str
) -> ResourceClaim:
    """``c`` as its event shows it once the actuator wrote ``found`` for it."""
    assert not isinstance(found, str), found
    mine = next(a for a in found if a.name == c.name)
    return msgspec.structs.replace(c, allocated=mine.results, node=node)


# --- allocation ----------------------------------------------------------------------------


@pytest.mark.parametrize("interleaved", [False, True])
def test_each_gpu_gets_the_nic_of_its_pcie_root(interleaved: bool) -> None:
    c = paired("a-devices", interleaved=interleaved)
    cluster = devices(claims=[c])
    found = cluster.allocate("n1", claiming("a", c))
    assert not isinstance(found, str), found
    (allocation,) = found
    assert (allocation.name, allocation.uid) == ("a-devices", "uid-a-devices")
    assert [r.request for r in allocation.results] == [r.name for r in c.requests]
    assert {(r.driver, r.pool) for r in allocation.results} == {
        (GPU_DRIVER, "n1"),
        (NIC_DRIVER, "n1"),
    }
    got = results(found)
    assert got == {
        **{f"gpu-{i}": f"gpu-{i}" for i in range(8)},
        **{f"nic-{i}": f"nic-{i}" for i in range(8)},
    }


@pytest.mark.parametrize("interleaved", [False, True])
def test_pairs_skip_a_root_whose_nics_are_taken(interleaved: bool) -> None:
    nics = tuple(
        DeviceResult(request="nic", driver=NIC_DRIVER, pool="n1", device=f"nic-{i}") for i in (0, 1)
    )
    other = claim("other", request("nic", NIC_DRIVER, 2), allocated=nics, node="n1")
    c = paired("a-devices", 2, interleaved=interleaved)
    found = devices(claims=[c, other]).allocate("n1", claiming("a", c))
    assert results(found) == {
        "gpu-0": "gpu-2",
        "gpu-1": "gpu-3",
        "nic-0": "nic-2",
        "nic-1": "nic-3",
    }


def test_a_held_node_gives_the_next_pod_nothing_until_released() -> None:
    a, b = paired("a-devices"), paired("b-devices")
    cluster = devices(claims=[a, b])
    found = cluster.allocate("n1", claiming("a", a))
    assert not isinstance(found, str)
    cluster.hold("default/a", "n1", found)
    why = cluster.allocate("n1", claiming("b", b))
    assert why == (
        "request 'gpu-0' of ResourceClaim default/b-devices wants 1 devices of DeviceClass "
        "gpu.nvidia.com: n1 has 8, 0 free (8 taken: held for pod default/a)"
    )
    assert results(cluster.allocate("n1", claiming("a", a))) == results(found)  # its own hold
    cluster.release("default/a")
    assert results(cluster.allocate("n1", claiming("b", b))) == results(found)


def test_a_hold_gives_way_to_the_claims_own_allocation() -> None:
    a, b = paired("a-devices", 4), paired("b-devices", 8)
    cluster = devices(claims=[a, b])
    found = cluster.allocate("n1", claiming("a", a))
    assert not isinstance(found, str)
    cluster.hold("default/a", "n1", found)
    cluster.apply(ResourceClaimEvent(op="upsert", at=1.0, resource_claim=allocated(a, found, "n1")))
    assert not cluster.holds and not cluster.held and not cluster.held_by
    assert cluster.allocate("n1", claiming("b", b)) == (
        "requests 'gpu-0', 'gpu-1', 'gpu-2' and 5 more of ResourceClaims default/b-devices want "
        "8 devices of DeviceClass gpu.nvidia.com together: n1 has 8, 4 free (4 taken: "
        "ResourceClaim default/a-devices)"
    )
    assert cluster.allocate("n1", claiming("a", a)) == found  # as its claim holds it
    cluster.apply(ResourceClaimEvent(op="delete", at=2.0, resource_claim=a))
    assert not isinstance(cluster.allocate("n1", claiming("b", b)), str)


def test_holds_of_pods_on_one_node_add_up() -> None:
    cs = [paired(f"p{i}-devices", 2) for i in range(5)]
    cluster = devices(claims=cs)
    for i, c in enumerate(cs[:4]):
        found = cluster.allocate("n1", claiming(f"p{i}", c))
        assert not isinstance(found, str), found
        assert results(found) == {"gpu-0": f"gpu-{2 * i}", "gpu-1": f"gpu-{2 * i + 1}",
                                  "nic-0": f"nic-{2 * i}", "nic-1": f"nic-{2 * i + 1}"}  # fmt: skip
        cluster.hold(f"default/p{i}", "n1", found)
    assert isinstance(cluster.allocate("n1", claiming("p4", cs[4])), str)
    cluster.release("default/p2")
    assert results(cluster.allocate("n1", claiming("p4", cs[4])))["gpu-0"] == "gpu-4"


def test_a_claim_allocated_elsewhere_is_refused_and_one_here_kept() -> None:
    there = (DeviceResult(request="gpu", driver=GPU_DRIVER, pool="n2", device="gpu-3"),)
    c = claim("a-gpu", request("gpu"), allocated=there, node="n2")
    cluster = devices(nodes=["n1", "n2"], claims=[c])
    assert (
        cluster.allocate("n1", claiming("a", c))
        == "ResourceClaim default/a-gpu is already allocated on n2"
    )
    assert cluster.allocate("n2", claiming("a", c)) == (
        ClaimAllocation(name="a-gpu", uid="uid-a-gpu", results=there),
    )  # allocated before: no resourceVersion, the actuator reads it

    # a second claim of the pod gets other devices than the first holds
    more = claim("a-more", request("gpu", count=8))
    cluster.apply(ResourceClaimEvent(op="upsert", at=0.0, resource_claim=more))
    why = cluster.allocate("n2", claiming("a", c, more))
    assert why == (
        "request 'gpu' of ResourceClaim default/a-more wants 8 devices of DeviceClass "
        "gpu.nvidia.com: n2 has 8, 7 free (1 taken: ResourceClaim default/a-gpu)"
    )


def test_an_unallocated_claims_allocation_carries_the_version_it_was_found_at() -> None:
    c = msgspec.structs.replace(claim("fresh", request("gpu")), resource_version="41")
    cluster = devices(claims=[c])
    found = cluster.allocate("n1", claiming("a", c))
    assert not isinstance(found, str), found
    assert [(a.name, a.resource_version) for a in found] == [("fresh", "41")]


def test_claims_of_one_pod_never_share_a_device() -> None:
    one, two = claim("x", request("gpu", count=3)), claim("y", request("gpu", count=5))
    found = devices(claims=[one, two]).allocate("n1", claiming("a", one, two))
    assert not isinstance(found, str)
    assert [[r.device for r in a.results] for a in found] == [
        ["gpu-0", "gpu-1", "gpu-2"], ["gpu-3", "gpu-4", "gpu-5", "gpu-6", "gpu-7"]
    ]  # fmt: skip
    three = claim("z", request("gpu"))
    cluster = devices(claims=[one, two, three])
    assert cluster.allocate("n1", claiming("a", one, two, three)) == (
        "requests 'gpu', 'gpu', 'gpu' of ResourceClaims default/x, default/y, default/z want 9 "
        "devices of DeviceClass gpu.nvidia.com together: n1 has 8, 8 free"
    )


ALL_GPUS = claim("all", request("gpus", count=0))


@pytest.mark.parametrize(
    ("gpus", "taken", "want"),
    [
        (8, 0, [f"gpu-{i}" for i in range(8)]),
        (2, 0, ["gpu-0", "gpu-1"]),
        (0, 0, "request 'gpus' of ResourceClaim default/all wants all devices of DeviceClass "
               "gpu.nvidia.com: n1 has none"),
        (8, 1, "request 'gpus' of ResourceClaim default/all wants all devices of DeviceClass "
               "gpu.nvidia.com: n1 has 8, 7 free (1 taken: ResourceClaim default/other)"),
    ],
)  # fmt: skip
def test_all_mode_takes_every_matching_device(gpus: int, taken: int, want: list[str] | str) -> None:
    gpu5 = DeviceResult(request="gpu", driver=GPU_DRIVER, pool="n1", device="gpu-5")
    other = claim("other", request("gpu"), node="n1", allocated=(gpu5,))
    cluster = devices(claims=[ALL_GPUS, *([other] if taken else [])], gpus=gpus)
    found = cluster.allocate("n1", claiming("a", ALL_GPUS))
    if isinstance(want, str):
        assert found == want
    else:
        assert not isinstance(found, str)
        assert [r.device for r in found[0].results] == want


PRODUCT = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'
UPPER = 'device.attributes["gpu.nvidia.com"].index >= 6'


@pytest.mark.parametrize(
    ("req", "classes", "want"),
    [
        (request("gpu", GPU_DRIVER, 2, PRODUCT), [], ["gpu-0", "gpu-1"]),
        (request("gpu", GPU_DRIVER, 2, UPPER), [], ["gpu-6", "gpu-7"]),
        (request("gpu", GPU_DRIVER, 3, UPPER), [],
         "request 'gpu' of ResourceClaim default/c wants 3 devices of DeviceClass "
         "gpu.nvidia.com meeting its selectors: n1 has 2, 2 free"),
        (request("gpu", GPU_DRIVER, 1, PRODUCT.replace("H100", "H200")), [],
         "request 'gpu' of ResourceClaim default/c wants 1 devices of DeviceClass "
         "gpu.nvidia.com meeting its selectors: n1 has none"),
        (request("gpu", "h100"), [DeviceClass(name="h100", uid="u", selectors=(
            'device.driver == "gpu.nvidia.com"', PRODUCT))], ["gpu-0"]),
        (request("gpu", "upper"), [DeviceClass(name="upper", uid="u", selectors=(UPPER,))],
         ["gpu-6"]),
        (request("nic", "rdma"), [DeviceClass(name="rdma", uid="u", selectors=(
            'device.attributes["dra.net"].rdma && device.attributes["dra.net"].rail > 4',))],
         ["nic-5"]),
        (request("gpu", "nowhere"), [],
         "request 'gpu' of ResourceClaim default/c: DeviceClass 'nowhere' does not exist"),
        (DeviceRequest(name="any", device_class=""), [],
         "request 'any' of ResourceClaim default/c: Baton reads only requests of one "
         "DeviceClass (`exactly`)"),
    ],
)  # fmt: skip
def test_selectors_of_class_and_request(
    req: DeviceRequest, classes: list[DeviceClass], want: list[str] | str
) -> None:
    c = claim("c", req)
    found = devices(claims=[c], classes=classes).allocate("n1", claiming("a", c))
    if isinstance(want, str):
        assert found == want
    else:
        assert not isinstance(found, str), found
        assert [r.device for r in found[0].results] == want


def test_unsupported_cel_names_the_expression() -> None:
    expression = 'device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA")'
    odd = DeviceClass(name="odd", uid="u", selectors=(expression,))
    c = claim("c", request("gpu", "odd"))
    why = devices(claims=[c], classes=[odd]).allocate("n1", claiming("a", c))
    assert isinstance(why, str)
    assert why.startswith(f"selector {expression!r} of DeviceClass odd: Baton understands only")
    assert "(unexpected '.startsWith(\"NVIDIA\"' at 47)" in why
    c = claim("c", request("gpu", GPU_DRIVER, 1, "device.capacity['x'].memory > 1"))
    why = devices(claims=[c]).allocate("n1", claiming("a", c))
    assert isinstance(why, str)
    assert why.startswith(
        "selector \"device.capacity['x'].memory > 1\" of request 'gpu' of ResourceClaim "
        "default/c: Baton understands only"
    )


@pytest.mark.parametrize(
    ("constraints", "want"),
    [
        ((DeviceConstraint(requests=("gpu", "nic"), match_attribute="gpu.nvidia.com/uuid"),),
         "request 'nic' of ResourceClaim default/c wants 1 devices with attribute "
         "gpu.nvidia.com/uuid (a matchAttribute constraint): n1 has 0 free"),
        ((DeviceConstraint(match_attribute="gpu.nvidia.com/numa"),),
         "request 'nic' of ResourceClaim default/c wants 1 devices with attribute "
         "gpu.nvidia.com/numa (a matchAttribute constraint): n1 has 0 free"),
        ((DeviceConstraint(requests=("gpu",), match_attribute="gpu.nvidia.com/numa"),), None),
        ((DeviceConstraint(requests=("gpu", "nic"), match_attribute=ROOT),), None),
    ],
)  # fmt: skip
def test_a_device_without_the_attribute_cannot_meet_a_constraint(
    constraints: tuple[DeviceConstraint, ...], want: str | None
) -> None:
    c = claim("c", request("gpu", count=5), request("nic", NIC_DRIVER), constraints=constraints)
    found = devices(claims=[c]).allocate("n1", claiming("a", c))
    if want is not None:
        assert found == want
    elif constraints[0].requests == ("gpu",):  # five GPUs of one NUMA node: none has 5
        assert found == (
            "constraint matchAttribute gpu.nvidia.com/numa of ResourceClaim default/c: no value "
            "of it is shared by enough free devices on n1 for requests 'gpu'"
        )
    else:
        assert found == (
            "constraint matchAttribute resource.kubernetes.io/pcieRoot of ResourceClaim "
            "default/c: no value of it is shared by enough free devices on n1 for requests "
            "'gpu', 'nic'"
        )


def test_when_only_the_search_finds_no_choice_it_says_so() -> None:
    # every root keeps one free GPU: each request alone fits a root, both together none
    others = claim("other", request("gpu", count=4), node="n1", allocated=tuple(
        DeviceResult(request="gpu", driver=GPU_DRIVER, pool="n1", device=f"gpu-{i}")
        for i in (0, 2, 4, 6)))  # fmt: skip
    c = claim("c", request("a"), request("b"),
              constraints=(DeviceConstraint(match_attribute=ROOT),))  # fmt: skip
    assert devices(claims=[c, others]).allocate("n1", claiming("a", c)) == (
        "no choice of free devices on n1 meets every request and constraint of ResourceClaims "
        "default/c at once (matchAttribute resource.kubernetes.io/pcieRoot of ResourceClaim "
        "default/c; 4 devices there taken: ResourceClaim default/other)"
    )
    cluster = devices(claims=[c])
    assert results(cluster.allocate("n1", claiming("a", c))) == {"a": "gpu-0", "b": "gpu-1"}


def test_a_search_that_runs_long_gives_up_saying_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocating, "MAX_STEPS", 3)
    pair = DeviceConstraint(requests=("g3", "n"), match_attribute=ROOT)
    gpus = [request(f"g{i}") for i in range(4)]
    c = claim("c", *gpus, request("n", NIC_DRIVER), constraints=(pair,))
    nics = tuple(
        DeviceResult(request="n", driver=NIC_DRIVER, pool="n1", device=f"nic-{i}") for i in range(4)
    )
    other = claim("other", request("n", NIC_DRIVER, 4), allocated=nics, node="n1")
    assert devices(claims=[c, other]).allocate("n1", claiming("a", c)) == (
        "gave up after 3 tries to find devices on n1 for default/c"
    )
    monkeypatch.setattr(allocating, "MAX_STEPS", 100)
    assert results(devices(claims=[c, other]).allocate("n1", claiming("a", c)))["g3"] == "gpu-4"


# --- what the gang service reads -------------------------------------------------------------


def test_node_gpus_counts_whole_gpus_of_the_gpu_driver() -> None:
    cluster = devices(nodes=["n1", "n2"])
    assert [cluster.node_gpus(n) for n in ("n1", "n2", "n3")] == [8, 8, 0]
    gpu, nic = node_slices("n2")
    mig = Device(name="gpu-0-mig-1", attributes={f"{GPU_DRIVER}/type": "mig"})
    bare = Device(name="gpu-9")
    gpu = msgspec.structs.replace(gpu, devices=(*gpu.devices[:2], mig, bare))
    cluster.apply(ResourceSliceEvent(op="upsert", at=1.0, resource_slice=gpu))
    assert cluster.node_gpus("n2") == 3
    cluster.apply(ResourceSliceEvent(op="delete", at=2.0, resource_slice=gpu))
    assert cluster.node_gpus("n2") == 0 and len(cluster.on_node("n2")) == 8
    moved = msgspec.structs.replace(nic, node="n1", name="elsewhere")
    cluster.apply(ResourceSliceEvent(op="upsert", at=3.0, resource_slice=moved))
    assert len(cluster.on_node("n1")) == 24


def test_gpus_claimed_counts_requests_of_classes_that_select_whole_gpus() -> None:
    """What a class counts as is read from the devices it selects: "loose" names no
    driver but selects H100s, so it asks GPUs; "gone" does not exist."""
    other = DeviceClass(
        name="h100", uid="u", selectors=(PRODUCT, 'device.driver == "gpu.nvidia.com"')
    )
    loose = DeviceClass(name="loose", uid="u", selectors=(PRODUCT,))
    mixed = claim("h", request("a", "h100", 2), request("b", "loose", 3), request("c", "gone"))
    cs = [paired("p"), claim("n", request("nic", NIC_DRIVER, 4)), ALL_GPUS, mixed]
    cluster = devices(claims=cs, classes=[other, loose])
    assert [cluster.gpus_claimed(claiming("a", c)) for c in cs] == [8, 0, 1, 5]
    assert cluster.gpus_claimed(claiming("a", cs[0], cs[3])) == 13
    assert cluster.gpus_claimed(claiming("a", cs[0], "later")) == 0
    found = cluster.allocate("n1", claiming("a", ALL_GPUS))
    cluster.apply(
        ResourceClaimEvent(op="upsert", at=1.0, resource_claim=allocated(ALL_GPUS, found, "n1"))
    )
    assert cluster.gpus_claimed(claiming("a", ALL_GPUS)) == 8


def test_claims_of_says_which_claim_is_missing() -> None:
    a, b = claim("a-1", request("gpu")), claim("a-2", request("gpu"))
    cluster = devices(claims=[a, b])
    assert cluster.claims_of(claiming("a", b, a)) == (b, a)
    assert cluster.claims_of(claiming("a", a, "gpus")) == "claim 'gpus' not generated yet"
    assert (
        cluster.claims_of(claiming("a", a, claim("gone")))
        == "ResourceClaim default/gone not seen yet"
    )
    assert cluster.allocate("n1", claiming("a", "gpus")) == "claim 'gpus' not generated yet"
    assert cluster.claims_of(claiming("a")) == () and cluster.allocate("n1", claiming("a")) == ()


def test_hand_built_slices_match_simcluster_slimmed() -> None:
    from baton.libs.kube import dra as kube_dra
    from baton.services.simcluster.world import dra as world

    raw = world.node_slices("n1", gpus=8, nics=8, product=H100, memory="80Gi")
    slim = [kube_dra.resource_slice(msgspec.convert(r, kube_dra.WireResourceSlice)) for r in raw]
    mine = node_slices("n1")
    assert [s.devices for s in slim] == [s.devices for s in mine]
    assert [(s.name, s.driver, s.pool, s.node) for s in slim] == [
        (s.name, s.driver, s.pool, s.node) for s in mine
    ]


# --- the CEL subset --------------------------------------------------------------------------

GPU3 = device(GPU_DRIVER, "gpu-3", 3, type="gpu", productName=H100)
A = 'device.attributes["gpu.nvidia.com"]'


@pytest.mark.parametrize(
    ("expression", "want"),
    [
        ('device.driver == "gpu.nvidia.com"', True),
        ("device.driver == 'dra.net'", False),
        ('"gpu.nvidia.com" == device.driver', True),
        (f'{A}.productName == "{H100}"', True),
        (f'{A}["productName"] != "{H100}"', False),
        (f"{A}.index >= 3 && {A}.index < 4", True),
        (f"{A}.index > 3 || {A}.numa <= 0", True),
        (f"!({A}.index == 3)", False),
        (f'device.attributes["{ROOT.split("/")[0]}"].pcieRoot == "pci0000:20"', True),
        (f"{A}.index == -1", False),
        ("true", True),
        (f"{A}.missing == 1", False),  # CEL: no such key, an error: not selected
        (f"!({A}.missing == 1)", False),
        (f"{A}.missing == 1 || true", True),  # true wins over an error
        (f"false && {A}.missing", False),
        (f'{A}.index == "3"', False),  # == across types is false
        (f'{A}.index != "3"', True),
        (f'{A}.index < "3"', False),  # < across types is an error
        (f"{A}.index == true", False),  # a bool is not an int
        (f"{A}.productName", False),  # a string is not a condition at run time
    ],
)
def test_selects(expression: str, want: bool) -> None:
    assert selects(expression, GPU3, GPU_DRIVER) is want


@pytest.mark.parametrize(
    ("expression", "detail"),
    [
        ('"x" in device.attributes["d"]', "unexpected 'in' at 4"),
        ("has(device.attributes.d)", "unexpected 'has(device.attribute' at 0"),
        ("device.driver", "'device.driver' alone is not a condition"),
        ('device.driver.matches("x")', "unexpected '.matches(\"x\")' at 13"),
        ('device.attributes["d"].x == 1.5', "unexpected '1.5' at 28"),
        ('device.attributes["d"].x == 1u', "unexpected '1u'"),
        ('(device.driver == "x"', "unexpected the end at 21"),
        ('device.driver == "x" &&', "unexpected the end at 23"),
        ('device.attributes["d"].x + 1 > 2', "unexpected '+'"),
        ("device.attributes[d].x", "unexpected 'd].x' at 18"),
        (r'device.driver == "a\tb"', "escape \\t"),
        ("", "unexpected the end at 0"),
    ],
)
def test_unsupported_cel_raises_naming_it(expression: str, detail: str) -> None:
    with pytest.raises(SelectorError) as raised:
        selects(expression, GPU3, GPU_DRIVER)
    assert str(raised.value).startswith(f"selector {expression!r}: Baton understands only")
    assert detail in str(raised.value)


# --- the property: allocations are right, refusals are right -----------------------------------

DOMAIN = "x.io"
SELECTORS = [
    "",
    f'device.attributes["{DOMAIN}"].idx >= 2',
    f'device.attributes["{DOMAIN}"].idx == 1',
]
CLASSES = [device_class(GPU_DRIVER, "gpu"), device_class(NIC_DRIVER, "nic"),
           DeviceClass(name="any", uid="u")]  # fmt: skip

devices_st = st.lists(
    st.tuples(
        st.sampled_from([GPU_DRIVER, NIC_DRIVER]),
        st.sampled_from(["a", "b", "c", None]),  # root
        st.integers(0, 3),  # idx
        st.sampled_from(["free"] * 6 + ["claimed", "held"]),
    ),
    min_size=1,
    max_size=5,
)
requests_st = st.lists(
    st.tuples(
        st.sampled_from(["gpu", "nic", "any", "any"]),
        st.sampled_from([1, 1, 1, 2, 0]),  # 0: All
        st.sampled_from([*SELECTORS[:1] * 4, *SELECTORS[1:]]),
    ),
    min_size=1,
    max_size=2,
)
constraints_st = st.lists(
    st.tuples(st.sampled_from([f"{DOMAIN}/root", f"{DOMAIN}/idx"]), st.sets(st.integers(0, 2))),
    max_size=2,
)
claims_st = st.lists(st.tuples(requests_st, constraints_st), min_size=1, max_size=2)


DeviceSpec = list[tuple[str, str | None, int, str]]  # (driver, root, idx, state)
ClaimSpec = list[tuple[list[tuple[str, int, str]], list[tuple[str, set[int]]]]]


def build(
    spec: DeviceSpec, claims_spec: ClaimSpec
) -> tuple[Devices, Pod, set[tuple[str, str]], list[ResourceClaim]]:
    """A node of ``spec``'s devices (some claimed by another claim, some held for another
    pod) and a pod with ``claims_spec``'s claims; the taken devices; the claims."""
    by_driver: dict[str, list[Device]] = {}
    taken: set[tuple[str, str]] = set()
    other: list[DeviceResult] = []
    held: list[DeviceResult] = []
    for i, (driver, root, idx, state) in enumerate(spec):
        attributes: dict[str, AttributeValue] = {f"{DOMAIN}/idx": idx}
        if root is not None:
            attributes[f"{DOMAIN}/root"] = root
        by_driver.setdefault(driver, []).append(Device(name=f"d{i}", attributes=attributes))
        result = DeviceResult(request="r", driver=driver, pool="n1", device=f"d{i}")
        if state != "free":
            taken.add((driver, f"d{i}"))
            (other if state == "claimed" else held).append(result)
    cluster = Devices()
    for driver, ds in sorted(by_driver.items()):
        piece = ResourceSlice(name=f"n1-{driver}", uid="u", driver=driver, node="n1", pool="n1",
                              devices=tuple(ds))  # fmt: skip
        cluster.apply(ResourceSliceEvent(op="upsert", at=0.0, resource_slice=piece))
    for cls in CLASSES:
        cluster.apply(DeviceClassEvent(op="upsert", at=0.0, device_class=cls))
    occupied = claim("other", request("r"), allocated=tuple(other), node="n1")
    cluster.apply(ResourceClaimEvent(op="upsert", at=0.0, resource_claim=occupied))
    cluster.hold("default/h", "n1", (ClaimAllocation(name="held", results=tuple(held)),))
    claims = []
    for k, (reqs, cons) in enumerate(claims_spec):
        rs = [DeviceRequest(name=f"r{j}", device_class=cls, count=n, selectors=(s,) if s else ())
              for j, (cls, n, s) in enumerate(reqs)]  # fmt: skip
        cs = tuple(
            DeviceConstraint(
                requests=tuple(f"r{j}" for j in sorted(js) if j < len(rs)), match_attribute=a
            )
            for a, js in cons
        )
        claims.append(claim(f"c{k}", *rs, constraints=cs))
    for c in claims:
        cluster.apply(ResourceClaimEvent(op="upsert", at=0.0, resource_claim=c))
    return cluster, claiming("p", *claims), taken, claims


def meets(cls: DeviceClass, r: DeviceRequest, driver: str, device: Device) -> bool:
    return all(selects(e, device, driver) for e in (*cls.selectors, *r.selectors))


def check(claims: list[ResourceClaim], picks: dict[tuple[str, str], list[tuple[str, Device]]],
          every: list[tuple[str, Device]]) -> bool:  # fmt: skip
    """Whether ``picks`` ((claim, request) -> devices) meets the claims' requests and
    constraints (every device at most once)."""
    seen = [(d, x.name) for ds in picks.values() for d, x in ds]
    if len(seen) != len(set(seen)):
        return False
    classes = {c.name: c for c in CLASSES}
    for c in claims:
        for r in c.requests:
            got = picks[c.name, r.name]
            matching = [(d, x) for d, x in every if meets(classes[r.device_class], r, d, x)]
            if not all(meets(classes[r.device_class], r, d, x) for d, x in got):
                return False
            if r.count and len(got) != r.count:
                return False
            if not r.count and (not got or len(got) != len(matching)):
                return False
        for con in c.constraints:
            chosen = [x for r in c.requests if not con.requests or r.name in con.requests
                      for _, x in picks[c.name, r.name]]  # fmt: skip
            values = [
                (type(v), v)
                for x in chosen
                if (v := x.attributes.get(con.match_attribute)) is not None
            ]
            if len(values) != len(chosen) or len(set(values)) > 1:
                return False
    return True


def brute_force(
    claims: list[ResourceClaim], every: list[tuple[str, Device]], free: list[tuple[str, Device]]
) -> bool:
    """Whether any allocation of ``claims`` out of ``free`` exists."""
    slots = [(c, r) for c in claims for r in c.requests]
    classes = {c.name: c for c in CLASSES}

    def options(c: ResourceClaim, r: DeviceRequest) -> list[tuple[tuple[str, Device], ...]]:
        matching = [(d, x) for d, x in every if meets(classes[r.device_class], r, d, x)]
        if r.count == 0:
            return [tuple(matching)] if matching and all(m in free for m in matching) else []
        return list(itertools.combinations([m for m in matching if m in free], r.count))

    for choice in itertools.product(*(options(c, r) for c, r in slots)):
        picks = {(c.name, r.name): list(ds) for (c, r), ds in zip(slots, choice, strict=True)}
        if check(claims, picks, every):
            return True
    return False


TWO_CONSTRAINTS: ClaimSpec = [
    ([("any", 1, ""), ("any", 1, "")], [(f"{DOMAIN}/root", {0, 1}), (f"{DOMAIN}/idx", set())])
]


@settings(max_examples=500, deadline=None)
@given(spec=devices_st, claims_spec=claims_st)
# the smallest bucket (root "a") holds a device of the other constraint's wrong value
@example(spec=[(GPU_DRIVER, "a", 0, "free"), (GPU_DRIVER, "a", 1, "free"),
               (GPU_DRIVER, "b", 0, "free"), (GPU_DRIVER, "c", 0, "free")],
         claims_spec=TWO_CONSTRAINTS)  # fmt: skip
# a bucket of the first constraint holds a device without the second's attribute
@example(spec=[(GPU_DRIVER, "a", 0, "free"), (GPU_DRIVER, "a", 0, "free"),
               (GPU_DRIVER, None, 1, "free"), (NIC_DRIVER, "a", 1, "free")],
         claims_spec=[([("nic", 1, ""), ("gpu", 1, "")],
                       [(f"{DOMAIN}/idx", set()), (f"{DOMAIN}/root", set())])])  # fmt: skip
def test_allocations_meet_their_claims_and_refusals_are_right(
    spec: DeviceSpec, claims_spec: ClaimSpec
) -> None:
    cluster, p, taken, claims = build(spec, claims_spec)
    every = [(d.driver, d.device) for d in cluster.on_node("n1")]
    free = [(d, x) for d, x in every if (d, x.name) not in taken]
    found = cluster.allocate("n1", p)
    if isinstance(found, str):
        assert not brute_force(claims, every, free), found
        return
    assert [a.name for a in found] == [c.name for c in claims]
    by_name = {(d, x.name): (d, x) for d, x in every}
    picks: dict[tuple[str, str], list[tuple[str, Device]]] = {
        (c.name, r.name): [] for c in claims for r in c.requests
    }
    for a in found:
        for r in a.results:
            assert (r.driver, r.device) not in taken and r.pool == "n1"
            picks[a.name, r.request].append(by_name[r.driver, r.device])
    assert check(claims, picks, every)


def test_alike_nodes_share_allocations_but_a_uuid_names_one_device() -> None:
    """Nodes alike but for their GPUs' UUIDs share a layout, so a gang's claims are
    searched once; a selector naming a UUID is searched on each node for itself."""
    cluster = devices(nodes=["n1", "n2"])
    cluster.on_node("n1"), cluster.on_node("n2")
    assert cluster._layout_of["n1"] == cluster._layout_of["n2"]
    uuid = hardware.gpu_uuid("n2", 5)
    pinned = f'device.attributes["gpu.nvidia.com"].uuid == "{uuid}"'
    one = claim("pin", request("gpu", GPU_DRIVER, 1, pinned))
    cluster.apply(ResourceClaimEvent(op="upsert", at=0.0, resource_claim=one))
    assert results(cluster.allocate("n2", claiming("a", one))) == {"gpu": "gpu-5"}
    refused = cluster.allocate("n1", claiming("b", one))
    assert isinstance(refused, str) and "wants 1 devices" in refused, refused
