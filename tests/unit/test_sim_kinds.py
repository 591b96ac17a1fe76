"""simcluster's API semantics as pure functions: views, defaulting, priority, OpenAPI."""

from __future__ import annotations

import json
from typing import Any

import pytest

from baton.services.simcluster.api import objects, openapi
from baton.services.simcluster.api.conversions import EVENTS_V1, version_view
from baton.services.simcluster.api.objects import ApiError
from baton.services.simcluster.api.resources import BY_KEY, RESOURCES

pytestmark = pytest.mark.unit


def test_events_v1_is_a_view_of_core_events_both_ways() -> None:
    core = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "e", "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": "gpu-00001"},
        "message": "GPU 3 fell off the bus",
        "reason": "Xid79",
        "reportingComponent": "baton.io/health",
        "count": 2,
        "type": "Warning",
    }
    view = EVENTS_V1.out(core)
    assert view["apiVersion"] == "events.k8s.io/v1"
    assert view["regarding"] == {"kind": "Node", "name": "gpu-00001"}
    assert (view["note"], view["reportingController"], view["deprecatedCount"]) == (
        "GPU 3 fell off the bus",
        "baton.io/health",
        2,
    )
    assert "message" not in view and "involvedObject" not in view
    assert EVENTS_V1.into(view) == core


def test_view_field_selectors_name_the_stored_fields() -> None:
    text = "regarding.name=gpu-00001,type!=Normal,reportingController==baton"
    assert EVENTS_V1.field_selector(text) == (
        "involvedObject.name=gpu-00001,type!=Normal,reportingComponent==baton"
    )
    assert version_view("scheduling.k8s.io/v1alpha2").field_selector("metadata.name=a") == (
        "metadata.name=a"
    )


def test_every_store_key_has_one_owner_and_views_point_at_one() -> None:
    for r in RESOURCES:
        owner = BY_KEY[r.key]
        assert (owner.conversion is None) and (owner.kind == r.kind)
    assert BY_KEY["podgroups"].group == "scheduling.x-k8s.io"
    assert BY_KEY["podgroups.scheduling.k8s.io"].version == "v1beta1"


def pod(resources: dict[str, Any], **spec: Any) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": resources}
    return {"metadata": {"name": "p"}, "spec": {"containers": [container], **spec}}


@pytest.mark.parametrize(
    ("resources", "requests", "limits"),
    [
        ({"limits": {"nvidia.com/gpu": 8}}, {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "8"}),
        (
            {"requests": {"cpu": "2"}, "limits": {"cpu": 4, "memory": "1Gi"}},
            {"cpu": "2", "memory": "1Gi"},
            {"cpu": "4", "memory": "1Gi"},
        ),
        ({"limits": {"cpu": 0.5}}, {"cpu": "500m"}, {"cpu": "500m"}),
    ],
)
def test_requests_default_from_limits(
    resources: dict[str, Any], requests: dict[str, str], limits: dict[str, str]
) -> None:
    obj = pod(resources)
    objects.default_requests(obj)
    got = obj["spec"]["containers"][0]["resources"]
    assert (got["requests"], got["limits"]) == (requests, limits)


def test_no_limits_means_no_defaulted_requests() -> None:
    obj = pod({"requests": {"cpu": "1"}})
    objects.default_requests(obj)
    assert obj["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "1"}}


CLASSES = {
    "low": {"metadata": {"name": "low"}, "value": -10, "preemptionPolicy": "Never"},
    "team": {"metadata": {"name": "team"}, "value": 100, "globalDefault": True},
}


def resolve(obj: dict[str, Any], default: str | None = None) -> dict[str, Any]:
    objects.resolve_priority(obj, find=CLASSES.get, default=CLASSES[default] if default else None)
    spec: dict[str, Any] = obj["spec"]
    return spec


def test_priority_comes_from_the_class_or_the_global_default() -> None:
    spec = resolve(pod({}, priorityClassName="low"))
    assert (spec["priority"], spec["preemptionPolicy"]) == (-10, "Never")
    spec = resolve(pod({}), default="team")
    assert (spec["priorityClassName"], spec["priority"]) == ("team", 100)
    assert "priority" not in resolve(pod({}))  # no class, no default: left to defaulting


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"priorityClassName": "nope"}, "no PriorityClass with name nope was found"),
        ({"priorityClassName": "low", "priority": 5}, "computed -10 from the given PriorityClass"),
    ],
)
def test_priority_errors_are_forbidden(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ApiError) as err:
        resolve(pod({}, **spec))
    assert err.value.code == 403 and message in err.value.message


def test_openapi_v3_lets_kubectl_validate_on_the_server() -> None:
    """kubectl's query-param verifier: a PATCH op with the kind's GVK takes fieldValidation."""
    index = json.loads(openapi.v3_index())
    for r in RESOURCES:
        path = "api/v1" if r.group == "" else f"apis/{r.group}/{r.version}"
        url = index["paths"][path]["serverRelativeURL"]
        assert url.startswith(f"/openapi/v3/{path}?hash=")
        doc = json.loads(openapi.v3_document(path) or b"{}")
        gvk = {"group": r.group, "version": r.version, "kind": r.kind}
        patches = [
            op["patch"]
            for op in doc["paths"].values()
            if "patch" in op and op["patch"]["x-kubernetes-group-version-kind"] == gvk
        ]
        assert patches, r
        assert "fieldValidation" in {p["name"] for p in patches[0]["parameters"]}
        schema = doc["components"]["schemas"][openapi.definition(r.group, r.version, r.kind)]
        assert schema["x-kubernetes-group-version-kind"] == [gvk]


def test_openapi_names_follow_upstream() -> None:
    assert openapi.definition("", "v1", "Pod") == "io.k8s.api.core.v1.Pod"
    assert openapi.definition("scheduling.k8s.io", "v1", "PriorityClass") == (
        "io.k8s.api.scheduling.v1.PriorityClass"
    )
    assert openapi.definition("scheduling.x-k8s.io", "v1alpha1", "PodGroup") == (
        "io.x-k8s.scheduling.v1alpha1.PodGroup"
    )
    v2 = json.loads(openapi.v2_document())
    assert v2["swagger"] == "2.0" and "io.k8s.api.core.v1.Pod" in v2["definitions"]
    assert openapi.v3_document("apis/no.such/v1") is None
