"""The admission webhook over HTTPS: real AdmissionReview v1 requests, patches and rejections,
directly and through simcluster calling its configured webhooks on create."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from baton.proto.admission import PodMutated, PodRejected
from baton.proto.k8s import GPU, Node, NodeEvent, Pod, PodEvent, PodGroup, PodGroupEvent
from baton.services.admission import core, main
from baton.services.admission.certificates import self_signed
from baton.services.admission.serving import Webhook, serve_webhook, tls_context
from baton.services.admission.teams import parse
from tests.support.sim import running_sim

pytestmark = pytest.mark.connected

TEAMS = {
    "teams": [
        {
            "name": "a",
            "namespaces": ["team-a"],
            "pools": ["pa"],
            "borrow": {"gpus": 16},
            "egress": {"limit": "10G"},
        },
        {"name": "b", "namespaces": ["team-b"], "pools": ["pb"]},
        # a set quota: a gang over it is refused ("never"); a's follows its nodes, so
        # a gang over it waits (docs/admission.md)
        {
            "name": "c",
            "namespaces": ["team-c"],
            "pools": ["pc"],
            "quota": {"gpus": 16},
            "lend": False,
        },
    ]
}


def make_cert(directory: Path) -> tuple[str, str]:
    return self_signed(str(directory), hosts=("127.0.0.1",), days=1)


class Served:
    def __init__(self, url: str, ca: str, state: core.State) -> None:
        self.url, self.ca, self.state = url, ca, state
        self.events: list[PodMutated | PodRejected] = []
        self.ready = True


def state_with_teams() -> core.State:
    state = core.initial(parse(TEAMS))
    for name, pool in (("a1", "pa"), ("b1", "pb"), ("b2", "pb"), ("c1", "pc")):
        room = {GPU: 8, "cpu": 192_000, "memory": 2048 * 1024**3}  # an HGX node (millicores)
        node = Node(name=name, uid=name, labels={"baton.io/pool": pool}, allocatable=room)
        state, _ = core.step(state, NodeEvent(op="upsert", at=0.0, node=node), 0.0)
    groups = (("team-a", "job", 1), ("team-a", "wide", 2), ("team-c", "wide", 2))
    for namespace, name, members in groups:
        group = PodGroup(namespace=namespace, name=name, uid=f"{namespace}-{name}",
                         min_member=members, created_at=1.0)  # fmt: skip
        state, _ = core.step(state, PodGroupEvent(op="upsert", at=1.0, pod_group=group), 1.0)
    for namespace in ("team-a", "team-c"):
        wide = Pod(
            namespace=namespace, name="wide-1", uid=f"{namespace}-wide-1", requests={GPU: 8},
            labels={"scheduling.x-k8s.io/pod-group": "wide"}, scheduler_name="baton",
        )  # fmt: skip
        state, _ = core.step(state, PodEvent(op="upsert", at=1.0, pod=wide), 1.0)  # 8 GPUs in
    return state


@pytest.fixture
async def webhook(tmp_path: Path) -> AsyncIterator[Served]:
    cert, key = make_cert(tmp_path)
    with open(cert) as pem:  # noqa: ASYNC230 - a small local file in a fixture
        served = Served("", pem.read(), state_with_teams())
    hook = Webhook(
        state=lambda: served.state if served.ready else None, publish=served.events.append
    )
    runner, port = await serve_webhook(hook, host="127.0.0.1", port=0, tls=tls_context(cert, key))
    served.url = f"https://127.0.0.1:{port}"
    try:
        yield served
    finally:
        await runner.cleanup()


def review(obj: dict[str, Any], *, kind: str = "Pod", namespace: str = "team-a") -> dict[str, Any]:
    group, version = ("scheduling.x-k8s.io", "v1alpha1") if kind == "PodGroup" else ("", "v1")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "req-1",
            "kind": {"group": group, "version": version, "kind": kind},
            "namespace": namespace,
            "name": obj["metadata"].get("name", ""),
            "operation": "CREATE",
            "object": obj,
        },
    }


def pod(name: str, *, gang: str = "", gpus: int = 8, **spec: Any) -> dict[str, Any]:
    labels = {"scheduling.x-k8s.io/pod-group": gang} if gang else {}
    annotations = spec.pop("annotations", None)
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
            **spec,
        },
    }


async def post(served: Served, path: str, body: dict[str, Any]) -> dict[str, Any]:
    context = ssl.create_default_context(cadata=served.ca)
    async with (
        aiohttp.ClientSession() as http,
        http.post(served.url + path, json=body, ssl=context) as reply,
    ):
        assert reply.status == 200, await reply.text()
        answer: dict[str, Any] = await reply.json()
    assert answer["response"]["uid"] == "req-1"
    return answer["response"]


def patch_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return ops


async def test_gang_pod_gets_team_toleration_affinity_scheduler_and_egress(webhook: Served) -> None:
    ops = patch_of(await post(webhook, "/mutate", review(pod("job-0", gang="job"))))
    by_path = {op["path"]: op["value"] for op in ops}
    assert by_path["/metadata/labels/baton.io~1team"] == "a"
    assert by_path["/metadata/annotations"] == {"kubernetes.io/egress-bandwidth": "10G"}
    # team a may borrow from b: admission decides when it admits the gang whether it runs
    # on a's nodes or b's, and gang placement keeps it there, so the pod may use both
    assert by_path["/spec/tolerations"] == [
        {"key": "baton.io/team", "operator": "Equal", "value": t, "effect": "NoSchedule"}
        for t in ("a", "b")
    ]
    assert "baton.io/borrowing" not in by_path["/metadata/annotations"]  # in quota
    assert by_path["/spec/affinity"] == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "baton.io/team", "operator": "In", "values": ["a", "b"]}
                        ]
                    }
                ]
            }
        }
    }
    assert by_path["/spec/schedulerName"] == "baton"
    assert [type(e) for e in webhook.events] == [PodMutated]


async def test_borrowing_pod_tolerates_lenders_and_is_marked(webhook: Served) -> None:
    ops = patch_of(await post(webhook, "/mutate", review(pod("wide-0", gang="wide"))))
    by_path = {op["path"]: op["value"] for op in ops}
    assert by_path["/metadata/annotations"]["baton.io/borrowing"] == "true"
    assert [t["value"] for t in by_path["/spec/tolerations"]] == ["a", "b"]
    terms = by_path["/spec/affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["a", "b"]
    assert webhook.events[-1].borrowing is True  # type: ignore[union-attr]


async def test_existing_affinity_terms_are_kept_and_narrowed(webhook: Served) -> None:
    own = {"key": "zone", "operator": "In", "values": ["z1"]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [own]}, {"matchFields": []}]
            }
        }
    }
    ops = patch_of(await post(webhook, "/mutate", review(pod("p", gpus=0, affinity=affinity))))
    paths = [op["path"] for op in ops if "affinity" in op["path"]]
    base = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
    assert paths == [
        f"{base}/nodeSelectorTerms/0/matchExpressions/-",
        f"{base}/nodeSelectorTerms/1/matchExpressions",
    ]


@pytest.mark.parametrize(
    ("obj", "kind", "namespace", "message"),
    [
        (pod("x", gang="g"), "Pod", "nobody", "namespace 'nobody' belongs to no team"),
        (
            pod(
                "x",
                tolerations=[
                    {
                        "key": "baton.io/team",
                        "operator": "Equal",
                        "value": "b",
                        "effect": "NoSchedule",
                    }
                ],
            ),
            "Pod",
            "team-b-not",
            "tolerates team 'b'",
        ),
        (
            pod("x", tolerations=[{"key": "baton.io/team", "operator": "Exists"}]),
            "Pod",
            "team-b",
            "would let it run on every team's nodes",
        ),
        (
            pod("x", annotations={"baton.io/topology-required": "not a key!"}),
            "Pod",
            "team-a",
            "is not a node label key",
        ),
        (
            pod("x", gang="wide", gpus=16),
            "Pod",
            "team-c",
            "needs 24 GPUs (2 member pods with this one: 16 + 8; every member counts) but "
            "team 'c' can never get more than 16",
        ),
        (
            {
                "metadata": {"name": "pg", "annotations": {"baton.io/gpus-per-pod": "eight"}},
                "spec": {"minMember": 2},
            },
            "PodGroup",
            "team-a",
            "is not a whole number of GPUs",
        ),
        (
            {
                "metadata": {"name": "pg", "annotations": {"baton.io/gpus-per-pod": "8"}},
                "spec": {"minMember": 4},
            },
            "PodGroup",
            "team-c",
            "lower minMember (members of different sizes",
        ),
        (
            {
                "metadata": {"name": "pg", "annotations": {"baton.io/admitted": "true"}},
                "spec": {"minMember": 1},
            },
            "PodGroup",
            "team-b",
            "is set by Baton",
        ),
    ],
)
async def test_validation_rejects_with_a_message_the_user_can_act_on(
    webhook: Served, obj: dict[str, Any], kind: str, namespace: str, message: str
) -> None:
    response = await post(webhook, "/validate", review(obj, kind=kind, namespace=namespace))
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert message in response["status"]["message"], response["status"]["message"]
    assert isinstance(webhook.events[-1], PodRejected)


async def test_a_gang_over_a_quota_that_follows_the_nodes_is_let_in_to_wait(
    webhook: Served,
) -> None:
    """Team a's quota is its nodes' GPUs (8 now; it may borrow 16): 32 GPUs could run once
    its pool grows, so the PodGroup is let in and waits, set aside, where team c's set
    quota of 16 refuses the same (above)."""
    group = {"metadata": {"name": "pg", "annotations": {"baton.io/gpus-per-pod": "8"}},
             "spec": {"minMember": 4}}  # fmt: skip
    response = await post(webhook, "/validate", review(group, kind="PodGroup"))
    assert response == {"uid": "req-1", "allowed": True}


async def test_valid_pod_is_allowed(webhook: Served) -> None:
    response = await post(webhook, "/validate", review(pod("ok", gang="job")))
    assert response == {"uid": "req-1", "allowed": True}


async def test_not_ready_fails_closed_for_baton_pods_and_open_for_others(webhook: Served) -> None:
    webhook.ready = False
    closed = await post(webhook, "/mutate", review(pod("g", gang="job")))
    assert closed["allowed"] is False and closed["status"]["code"] == 503
    assert "not loaded the cluster state" in closed["status"]["message"]
    assert (await post(webhook, "/mutate", review(pod("plain", gpus=0))))["allowed"] is True


async def test_malformed_review_is_a_bad_request(webhook: Served) -> None:
    context = ssl.create_default_context(cadata=webhook.ca)
    async with (
        aiohttp.ClientSession() as http,
        http.post(webhook.url + "/mutate", data=b"{not json", ssl=context) as reply,
    ):
        assert reply.status == 400


async def test_simcluster_calls_the_configured_webhooks_on_create(webhook: Served) -> None:
    ca = base64.b64encode(webhook.ca.encode()).decode()
    rules = [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
    ]

    def config(kind: str, path: str) -> dict[str, Any]:
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": "baton"},
            "webhooks": [
                {
                    "name": "pods.baton.io",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "rules": rules,
                    "clientConfig": {"url": webhook.url + path, "caBundle": ca},
                }
            ],
        }

    async with running_sim() as sim:
        api = await sim.api_client()
        try:
            custom = client.CustomObjectsApi(api)
            for kind, plural, path in (
                ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations", "/mutate"),
                ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations", "/validate"),
            ):
                await custom.create_cluster_custom_object(
                    "admissionregistration.k8s.io", "v1", plural, config(kind, path)
                )
            core_api = client.CoreV1Api(api)
            for ns in ("team-a", "team-b"):
                await core_api.create_namespace({"metadata": {"name": ns}})
            created = await core_api.create_namespaced_pod("team-a", pod("job-0", gang="job"))
            assert created.spec.scheduler_name == "baton"
            assert [t.value for t in created.spec.tolerations] == ["a", "b"]
            assert created.metadata.labels["baton.io/team"] == "a"
            with pytest.raises(ApiException) as denied:
                await core_api.create_namespaced_pod(
                    "team-b",
                    pod(
                        "bad",
                        tolerations=[
                            {
                                "key": "baton.io/team",
                                "value": "a",
                                "operator": "Equal",
                                "effect": "NoSchedule",
                            }
                        ],
                    ),
                )
            assert denied.value.status == 403
            message = json.loads(denied.value.body)["message"]
            assert message.startswith('admission webhook "pods.baton.io" denied the request: ')
            assert "tolerates team 'a'" in message
        finally:
            await api.close()


async def test_self_signed_certificate_is_made_once_and_serves(tmp_path: Path) -> None:
    settings = main.Settings(tls_self_signed_dir=str(tmp_path / "tls"))
    tls, off = main._tls(settings)
    assert tls is not None and off == ""
    cert = (tmp_path / "tls" / "tls.crt").read_bytes()
    assert main._tls(settings)[0] is not None
    assert (tmp_path / "tls" / "tls.crt").read_bytes() == cert
    served = Served("", cert.decode(), state_with_teams())
    hook = Webhook(state=lambda: served.state, publish=served.events.append)
    runner, port = await serve_webhook(hook, host="127.0.0.1", port=0, tls=tls)
    served.url = f"https://127.0.0.1:{port}"
    try:
        ops = patch_of(await post(served, "/mutate", review(pod("job-0", gang="job"))))
        assert any(op["path"] == "/spec/schedulerName" for op in ops)
    finally:
        await runner.cleanup()


def test_without_a_certificate_the_webhook_is_off(tmp_path: Path) -> None:
    (tmp_path / "tls").write_text("a file where the certificate directory should be")
    tls, off = main._tls(main.Settings(tls_self_signed_dir=str(tmp_path / "tls")))
    assert tls is None and off.startswith("no self-signed certificate ("), off
    tls, off = main._tls(main.Settings())
    assert tls is None and "BATON_ADMISSION_TLS_CERT" in off, off
    with pytest.raises(ValueError, match="tls_self_signed_dir"):
        main.Settings(tls_cert="c", tls_key="k", tls_self_signed_dir="d")


async def test_baton_install_webhook_registers_it_with_a_simulated_cluster(
    webhook: Served, tmp_path: Path
) -> None:
    """What compose.yaml and people running services by hand do: register the running
    webhook by URL with its self-signed certificate; again is fine (it is updated)."""
    async with running_sim() as sim:
        for _ in range(2):
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "baton.services.cli", "install-webhook", "--url", webhook.url,
                "--ca", str(tmp_path / "tls.crt"), "--kubeconfig", str(sim.kubeconfig),
                "--wait", "30", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = await asyncio.wait_for(process.communicate(), timeout=60)
            assert process.returncode == 0, err.decode()
            assert f"registered {webhook.url}" in out.decode()
        api = await sim.api_client()
        try:
            core_api = client.CoreV1Api(api)
            await core_api.create_namespace({"metadata": {"name": "team-a"}})
            created = await core_api.create_namespaced_pod("team-a", pod("job-0", gang="job"))
            assert created.spec.scheduler_name == "baton"
            assert created.metadata.labels["baton.io/team"] == "a"
        finally:
            await api.close()


@pytest.mark.parametrize(
    "body",
    [b"[" * 100_000 + b"]" * 100_000, b'{"request": ' * 50_000 + b"1" + b"}" * 50_000,
     json.dumps(review(pod("w-0"))).encode().replace(b'"w-0"', b'"w-\xff\xfe"'),
     b"\xff" * 262_144],
    ids=["deep-list", "deep-object", "not-utf8-name", "binary"],
)  # fmt: skip
async def test_nested_or_undecodable_bodies_are_a_400_never_a_500(
    webhook: Served, body: bytes
) -> None:
    context = ssl.create_default_context(cadata=webhook.ca)
    async with aiohttp.ClientSession() as http:
        for path in ("/mutate", "/validate"):
            async with http.post(webhook.url + path, data=body, ssl=context) as reply:
                assert reply.status == 400, (path, reply.status, await reply.text())
                assert (await reply.text()).strip()  # says what is wrong
