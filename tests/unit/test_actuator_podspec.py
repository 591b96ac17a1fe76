"""Pod bodies the actuator writes, result subjects and settings checks."""

from __future__ import annotations

from typing import Any

import pytest

from baton.libs.runtime import SettingsError, load_settings
from baton.proto.actions import PodTemplate, RecreatePod
from baton.proto.k8s import Toleration
from baton.proto.keys import PLACEMENT_MARKS, RECREATED_FROM
from baton.services.actuator import podspec, recreating
from baton.services.actuator.main import PREFIX, Settings
from baton.services.actuator.shell import result_subject

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
    assert copy["metadata"] == {
        "name": "w-0", "namespace": "a", "labels": {"x": "y"},
        "annotations": {RECREATED_FROM: "u1"},
    }  # fmt: skip
    assert copy["spec"] == {"schedulerName": "baton", "containers": [{"name": "m"}]}
    assert "status" not in copy
    assert pod["spec"]["nodeName"] == "n1"  # the original is untouched


def live_pod() -> dict[str, Any]:
    """A bare gang member as the API server returns it: bound, running, admitted."""
    container = {
        "name": "trainer",
        "image": "ghcr.io/acme/train:1.4",
        "command": ["torchrun"],
        "args": ["--nproc-per-node=8", "train.py"],
        "env": [
            {"name": "NCCL_DEBUG", "value": "INFO"},
            {"name": "RANK", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "resources": {
            "requests": {"nvidia.com/gpu": "8", "cpu": "32"},
            "limits": {"nvidia.com/gpu": "8"},
        },
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "gpu.acme.io/kind", "operator": "In", "values": ["h100"]}
                        ]
                    }
                ]
            }
        }
    }
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "job-0", "namespace": "team-a", "uid": "old-uid", "resourceVersion": "42",
            "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl"}], "generateName": "job-",
            "deletionTimestamp": "2026-01-01T01:00:00Z", "deletionGracePeriodSeconds": 30,
            "labels": {"scheduling.x-k8s.io/pod-group": "job", "app": "train",
                       "baton.io/admitted": "true"},
            "annotations": {"baton.io/admitted": "true", "baton.io/borrowing": "true",
                            "baton.io/recreated-from": "older-uid",
                            "baton.io/topology-required": "baton.io/rack",
                            "sim.baton.io/duration-seconds": "60", "note": "mine"},
            "ownerReferences": [{"kind": "ConfigMap", "name": "cfg", "uid": "c"}],
        },
        "spec": {
            "nodeName": "gpu-3", "schedulerName": "baton", "priority": 1000,
            "priorityClassName": "training", "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 45, "serviceAccountName": "trainer",
            "containers": [container], "initContainers": [{"name": "fetch", "image": "busybox"}],
            "ephemeralContainers": [{"name": "debug", "image": "busybox"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "ds"}}],
            "affinity": affinity, "nodeSelector": {"gpu.acme.io/pool": "a"},
            "tolerations": [{"key": "baton.io/team", "operator": "Equal", "value": "a",
                             "effect": "NoSchedule"}],
        },
        "status": {"phase": "Running", "podIP": "10.0.0.3", "hostIP": "10.1.0.3"},
    }  # fmt: skip


def test_unbound_copy_keeps_everything_the_user_wrote() -> None:
    pod = live_pod()
    copy = podspec.unbound_copy(pod)
    expected_spec = {
        k: v for k, v in pod["spec"].items() if k not in ("nodeName", "ephemeralContainers")
    }
    assert copy["spec"] == expected_spec  # image, command, args, env, volumes, affinity, ...
    meta = copy["metadata"]
    assert (meta["name"], meta["namespace"]) == ("job-0", "team-a")
    assert meta["labels"] == {"scheduling.x-k8s.io/pod-group": "job", "app": "train"}
    assert meta["annotations"] == {
        "baton.io/topology-required": "baton.io/rack",
        "sim.baton.io/duration-seconds": "60",
        "note": "mine",
        RECREATED_FROM: "old-uid",
    }
    assert meta["ownerReferences"] == pod["metadata"]["ownerReferences"]
    assert set(meta) == {"name", "namespace", "labels", "annotations", "ownerReferences"}
    assert set(copy) == {"apiVersion", "kind", "metadata", "spec"}


def test_unbound_copy_drops_every_placement_mark_and_shares_nothing() -> None:
    pod = live_pod()
    copy = podspec.unbound_copy(pod)
    for mark in PLACEMENT_MARKS:
        if mark != RECREATED_FROM:
            assert mark not in copy["metadata"]["annotations"]
            assert mark not in copy["metadata"]["labels"]
    copy["spec"]["containers"][0]["env"].append({"name": "X", "value": "1"})
    copy["metadata"]["labels"]["app"] = "changed"
    assert len(pod["spec"]["containers"][0]["env"]) == 2
    assert pod["metadata"]["labels"]["app"] == "train"
    assert pod["metadata"]["annotations"]["baton.io/admitted"] == "true"


WAITS = [
    # (action grace, pod's deletionGracePeriodSeconds, pod's spec grace, seconds waited)
    (None, None, None, 40.0),  # Kubernetes' default 30 s + the margin
    (None, None, 5, 15.0),
    (None, 2, 5, 12.0),  # already terminating with a shorter grace
    (0, None, 5, 10.0),  # forced: only the margin
    (None, None, 3600, 60.0),  # capped: a longer grace takes more attempts
]


@pytest.mark.parametrize(("action", "deleting", "own", "waited"), WAITS)
def test_how_long_an_attempt_waits_for_the_old_pod_to_go(
    action: int | None, deleting: int | None, own: int | None, waited: float
) -> None:
    recreate = RecreatePod(id="r", by="gang", at=0.0, gang="a/g", namespace="a", pod="p",
                           uid="u", grace_seconds=action)  # fmt: skip
    meta = {} if deleting is None else {"deletionGracePeriodSeconds": deleting}
    spec = {} if own is None else {"terminationGracePeriodSeconds": own}
    assert recreating.wait_s(recreate, {"metadata": meta, "spec": spec}) == waited


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
    assert "command" not in container and "restartPolicy" not in body["spec"]


def test_a_check_pod_runs_its_command_once_on_its_node() -> None:
    template = PodTemplate(namespace="baton-system", name="preflight-n1", image="dcgm",
                           command=("dcgmi", "diag", "-r", "2"), restart_policy="Never",
                           node_name="n1")  # fmt: skip
    body = podspec.from_template(template)
    assert body["spec"]["containers"][0]["command"] == ["dcgmi", "diag", "-r", "2"]
    assert (body["spec"]["restartPolicy"], body["spec"]["nodeName"]) == ("Never", "n1")


def test_result_subject_mirrors_the_action_subject_without_its_producer() -> None:
    subject = "baton.c1.action.bind-gang.gang.team-a.job7"
    assert result_subject(subject) == "baton.c1.result.bind-gang.team-a.job7"


def test_settings_name_the_bad_key() -> None:
    with pytest.raises(SettingsError, match="BATON_ACTUATOR_BURST"):
        load_settings(Settings, PREFIX, env={"BATON_ACTUATOR_BURST": "0"})
    settings = load_settings(
        Settings, PREFIX, env={"BATON_DRY_RUN": "1", "BATON_ACTUATOR_QPS": "50"}
    )
    assert settings.dry_run and settings.limits().qps == 50


def test_a_restricted_template_meets_pod_security_restricted() -> None:
    body = podspec.from_template(PodTemplate(namespace="baton-system", name="b", restricted=True))
    pod, (container,) = body["spec"], body["spec"]["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    plain = podspec.from_template(PodTemplate(namespace="x", name="p"))
    assert "securityContext" not in plain["spec"]
