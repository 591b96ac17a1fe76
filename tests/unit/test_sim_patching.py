"""The three patch formats against Kubernetes' documented behaviour."""

from __future__ import annotations

from typing import Any

import pytest

from baton.services.simcluster.api.objects import ApiError
from baton.services.simcluster.api.patching import json_patch, merge_patch, strategic_merge_patch

pytestmark = pytest.mark.unit

NODE: dict[str, Any] = {
    "metadata": {"name": "n", "labels": {"a": "1"}, "finalizers": ["x"]},
    "spec": {"taints": [{"key": "team", "value": "a", "effect": "NoSchedule"}]},
    "status": {
        "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "GpuHealthy", "status": "True"},
        ]
    },
}


def test_merge_patch_merges_maps_deletes_nulls_replaces_lists() -> None:
    out = merge_patch(
        NODE,
        {
            "metadata": {"labels": {"a": None, "b": "2"}},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        },
    )
    assert out["metadata"]["labels"] == {"b": "2"}
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "False"}]
    assert NODE["metadata"]["labels"] == {"a": "1"}  # the input is untouched


def test_strategic_merge_patch_merges_conditions_by_type() -> None:
    out = strategic_merge_patch(
        NODE,
        {
            "status": {
                "conditions": [
                    {"type": "GpuHealthy", "status": "False", "reason": "Xid79"},
                    {"type": "NetworkUnavailable", "status": "False"},
                ]
            }
        },
    )
    assert out["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "GpuHealthy", "status": "False", "reason": "Xid79"},
        {"type": "NetworkUnavailable", "status": "False"},
    ]


def test_strategic_merge_patch_replaces_taints_which_have_no_merge_key() -> None:
    out = strategic_merge_patch(NODE, {"spec": {"taints": [{"key": "gpu", "effect": "NoExecute"}]}})
    assert out["spec"]["taints"] == [{"key": "gpu", "effect": "NoExecute"}]


def test_strategic_merge_patch_directives() -> None:
    out = strategic_merge_patch(
        NODE,
        {
            "status": {"conditions": [{"type": "Ready", "$patch": "delete"}]},
            "metadata": {"finalizers": ["y"], "$setElementOrder/finalizers": ["x", "y"]},
        },
    )
    assert out["status"]["conditions"] == [{"type": "GpuHealthy", "status": "True"}]
    assert out["metadata"]["finalizers"] == ["x", "y"]
    out = strategic_merge_patch(
        NODE,
        {
            "metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]},
            "spec": {"$patch": "replace", "unschedulable": True},
        },
    )
    assert out["metadata"]["finalizers"] == [] and out["spec"] == {"unschedulable": True}


def test_json_patch_operations() -> None:
    out = json_patch(
        NODE,
        [
            {"op": "add", "path": "/spec/taints/-", "value": {"key": "k", "effect": "NoSchedule"}},
            {"op": "remove", "path": "/spec/taints/0"},
            {"op": "replace", "path": "/metadata/labels/a", "value": "2"},
            {"op": "copy", "from": "/metadata/labels/a", "path": "/metadata/labels/c"},
            {"op": "move", "from": "/metadata/labels/c", "path": "/metadata/labels/d~1e"},
            {"op": "test", "path": "/metadata/name", "value": "n"},
        ],
    )
    assert out["spec"]["taints"] == [{"key": "k", "effect": "NoSchedule"}]
    assert out["metadata"]["labels"] == {"a": "2", "d/e": "2"}
    assert NODE["spec"]["taints"][0]["key"] == "team"


@pytest.mark.parametrize(
    ("ops", "code"),
    [
        ([{"op": "test", "path": "/metadata/name", "value": "m"}], 422),
        ([{"op": "remove", "path": "/spec/missing"}], 422),
        ([{"op": "jump", "path": "/spec"}], 400),
        ({"op": "add"}, 400),
    ],
)
def test_json_patch_failures(ops: Any, code: int) -> None:
    with pytest.raises(ApiError) as err:
        json_patch(NODE, ops)
    assert err.value.code == code
