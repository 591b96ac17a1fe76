"""Pod bodies the actuator writes, result subjects and settings checks."""

from __future__ import annotations

import pytest

from libs.runtime import SettingsError, load_settings
from proto.actions import PodTemplate
from proto.k8s import Toleration
from services.actuator import podspec
from services.actuator.main import PREFIX, Settings
from services.actuator.shell import result_subject

pytestmark = pytest.mark.unit


def test_unbound_copy_drops_what_the_api_server_assigns() -> None:
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "w-0", "namespace": "a", "uid": "u1", "resourceVersion": "9",
                     "labels": {"x": "y"}, "creationTimestamp": "2026-11-22T00:00:00Z"},
        "spec": {"nodeName": "n1", "schedulerName": "baton", "containers": [{"name": "m"}]},
        "status": {"phase": "Pending"},
    }  # fmt: skip
    copy = podspec.unbound_copy(pod)
    assert copy["metadata"] == {"name": "w-0", "namespace": "a", "labels": {"x": "y"}}
    assert copy["spec"] == {"schedulerName": "baton", "containers": [{"name": "m"}]}
    assert "status" not in copy
    assert pod["spec"]["nodeName"] == "n1"  # the original is untouched


@pytest.mark.parametrize(
    ("refs", "controlled"),
    [([], False), ([{"kind": "Job", "controller": True}], True), ([{"kind": "ConfigMap"}], False)],
)
def test_has_controller(refs: list[dict[str, object]], controlled: bool) -> None:
    assert podspec.has_controller({"metadata": {"ownerReferences": refs}}) is controlled


def test_pod_from_template() -> None:
    template = PodTemplate(
        namespace="a", generate_name="balloon-", requests={"cpu": 500, "nvidia.com/gpu": 8},
        priority=-10, tolerations=(Toleration(key="k", operator="Exists"),),
    )  # fmt: skip
    body = podspec.from_template(template)
    assert body["metadata"] == {"namespace": "a", "generateName": "balloon-"}
    (container,) = body["spec"]["containers"]
    assert container["resources"] == {
        "requests": {"cpu": "500m", "nvidia.com/gpu": "8"},
        "limits": {"nvidia.com/gpu": "8"},
    }
    assert body["spec"]["priority"] == -10
    assert body["spec"]["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert "nodeName" not in body["spec"]


def test_result_subject_mirrors_the_action_subject() -> None:
    assert result_subject("baton.c1.action.bind.team-a.job7") == "baton.c1.result.bind.team-a.job7"


def test_settings_name_the_bad_key() -> None:
    with pytest.raises(SettingsError, match="BATON_ACTUATOR_BURST"):
        load_settings(Settings, PREFIX, env={"BATON_ACTUATOR_BURST": "0"})
    settings = load_settings(
        Settings, PREFIX, env={"BATON_DRY_RUN": "1", "BATON_ACTUATOR_QPS": "50"}
    )
    assert settings.dry_run and settings.limits().qps == 50
