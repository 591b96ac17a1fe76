"""Gangs in every format users already write, through the real path on simcluster:
bridge -> gang -> actuator (and the reporter) -> simcluster's API. Each is placed whole;
what Baton decided shows where Kubernetes users look - PodGroup status, the pods'
PodScheduled condition, Events - as the real ``kubectl describe`` prints them."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from baton.proto import keys
from baton.services.cli import why
from baton.services.reporter import main as reporter
from tests.pipeline import stack, until
from tests.support.sim import Sim

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
KUBECTL = "/usr/bin/kubectl"
HAVE_KUBECTL = os.path.exists(KUBECTL)
PLUGINS = ("scheduling.x-k8s.io", "v1alpha1")
UPSTREAM = ("scheduling.k8s.io", "v1beta1")


def member(
    name: str, *, gpus: int = 4, labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None, **spec: Any,
) -> dict[str, Any]:  # fmt: skip
    container = {"name": "train", "image": "ghcr.io/acme/train:1",
                 "resources": {"limits": {keys.GPU: str(gpus)}}}  # fmt: skip
    return {
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {"schedulerName": "baton", "containers": [container], **spec},
    }


# namespace -> (group object: (api, body) or None, the members' extra metadata/spec)
FORMATS: dict[str, tuple[tuple[tuple[str, str], dict[str, Any]] | None, dict[str, Any]]] = {
    "plugins": (
        (PLUGINS, {"kind": "PodGroup", "metadata": {"name": "job"},
                   "spec": {"minMember": 2, "minResources": {keys.GPU: "8"}}}),
        {"labels": {keys.POD_GROUP: "job"}},
    ),
    "upstream": (
        (UPSTREAM, {"kind": "PodGroup", "metadata": {"name": "job"},
                    "spec": {"schedulingPolicy": {"gang": {"minCount": 2}},
                             "schedulingConstraints": {"topology": [{"key": keys.RACK}]}}}),
        {"schedulingGroup": {"podGroupName": "job"}},
    ),
    "volcano": (None, {"annotations": {keys.VOLCANO_GROUP: "job", keys.VOLCANO_MIN_MEMBER: "2"}}),
    "kueue": (None, {"labels": {keys.KUEUE_GROUP: "job"}, "annotations": {keys.KUEUE_TOTAL: "2"}}),
}  # fmt: skip


async def create_gang(api: Any, custom: Any, ns: str, size: int, *, gpus: int = 4) -> None:
    group, extra = FORMATS.get(ns, FORMATS["plugins"])
    await api.create_namespace({"metadata": {"name": ns}})
    if group is not None:
        (grp, version), body = group
        body = {**body, "apiVersion": f"{grp}/{version}"}
        if ns not in FORMATS:  # another scheduler-plugins gang, of its own size
            body["spec"] = {"minMember": size}
        await custom.create_namespaced_custom_object(grp, version, ns, "podgroups", body)
    for i in range(size):
        await api.create_namespaced_pod(ns, member(f"job-{i}", gpus=gpus, **extra))


def pods(sim: Sim, ns: str) -> list[dict[str, Any]]:
    return list(sim.store.list("pods", namespace=ns)[0])


def placed_whole(sim: Sim, ns: str, size: int) -> bool:
    found = pods(sim, ns)
    return len(found) == size and all(p["spec"].get("nodeName") for p in found)


def rack(sim: Sim, node: str) -> str:
    return str(sim.store.get("nodes", None, node)["metadata"]["labels"][keys.RACK])


def events(sim: Sim, ns: str, name: str) -> list[dict[str, Any]]:
    found = sim.store.list("events", namespace=ns)[0]
    return [e for e in found if e["involvedObject"]["name"] == name]


async def kubectl(sim: Sim, tmp: Path, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, f"--kubeconfig={sim.kubeconfig}", f"--cache-dir={tmp / 'kube-cache'}", *args,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_every_format_is_placed_whole_and_told_as_kubectl_describe_shows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    told = reporter.Settings(pod_every=0.2, tick_every=0.1)
    async with stack(nodes=8, reporter_settings=told) as s:
        api, custom, sim, url = s.api, s.custom, s.sim, s.url

        # Kueue: one member of two is not a gang of one; it waits, and says why.
        await create_gang(api, custom, "kueue", 1)

        def kueue_waits() -> str:
            (pod,) = pods(sim, "kueue")
            found = [c for c in pod["status"].get("conditions") or ()
                     if c["type"] == "PodScheduled"]  # fmt: skip
            return str(found[0].get("message", "")) if found else ""

        said = await until(kueue_waits, within=30, what="the lone Kueue member's condition")
        assert (
            said == "gang kueue/job: waiting for all 2 members of gang job to be created "
            "(minMember 2)"
        )
        assert not pods(sim, "kueue")[0]["spec"].get("nodeName")
        await api.create_namespaced_pod("kueue", member("job-1", **FORMATS["kueue"][1]))

        for ns in ("plugins", "upstream", "volcano"):
            await create_gang(api, custom, ns, 2)
        for ns in FORMATS:
            await until(lambda ns=ns: placed_whole(sim, ns, 2), within=60,  # type: ignore[misc]
                        what=f"the {ns} gang bound whole")  # fmt: skip

        # scheduler-plugins' PodGroup: status as its controller writes it, plus conditions
        def plugins_status() -> dict[str, Any] | None:
            status = sim.store.get("podgroups", "plugins", "job").get("status") or {}
            return status if status.get("phase") in ("Scheduled", "Running") else None

        status = await until(plugins_status, within=30, what="the PodGroup's phase")
        assert status["scheduled"] == 2
        (scheduled,) = status["conditions"]
        assert (scheduled["type"], scheduled["status"], scheduled["reason"]) == (
            "PodGroupScheduled", "True", "Scheduled"
        )  # fmt: skip

        def running() -> dict[str, Any] | None:
            status = sim.store.get("podgroups", "plugins", "job").get("status") or {}
            return status if status.get("running") == 2 else None

        try:
            status = await until(running, within=20, what="both members running in its status")
        except AssertionError:
            print(
                "DEBUG",
                sim.store.get("podgroups", "plugins", "job"),
                [(p["metadata"]["name"], p["status"].get("phase")) for p in pods(sim, "plugins")],
            )
            raise
        assert status["phase"] == "Running"

        # the upstream PodGroup: its PodGroupScheduled condition, in one rack as it asked
        def upstream_scheduled() -> bool:
            group = sim.store.get("podgroups.scheduling.k8s.io", "upstream", "job")
            found = (group.get("status") or {}).get("conditions") or []
            return any(c["type"] == "PodGroupScheduled" and c["status"] == "True" for c in found)

        await until(upstream_scheduled, within=30, what="the upstream PodGroup's condition")
        assert len({rack(sim, p["spec"]["nodeName"]) for p in pods(sim, "upstream")}) == 1

        # Events as kube-scheduler writes them, on each bound pod
        def assigned(ns: str) -> bool:
            return all(
                any(
                    e["reason"] == "Scheduled" and "Successfully assigned" in e["message"]
                    for e in events(sim, ns, p["metadata"]["name"])
                )
                for p in pods(sim, ns)
            )

        for ns in FORMATS:
            await until(lambda ns=ns: assigned(ns), within=30,  # type: ignore[misc]
                        what=f"Scheduled events on the {ns} pods")  # fmt: skip
        for p in pods(sim, "kueue"):  # one per pod, as kube-scheduler writes (no group object)
            name = p["metadata"]["name"]
            told = [e for e in events(sim, "kueue", name) if e["reason"] == "Scheduled"]
            assert len(told) == 1, told

        # a gang that cannot fit: told on its PodGroup, its pods' conditions, Events
        await create_gang(api, custom, "big", 9, gpus=8)

        def verdict() -> str:
            status = sim.store.get("podgroups", "big", "job").get("status") or {}
            found = [c for c in status.get("conditions") or () if c["status"] == "False"]
            return str(found[0]["message"]) if found and "fit" in found[0]["message"] else ""

        message = await until(verdict, within=60, what="the big gang's verdict on its PodGroup")
        assert "members fit" in message and "more nodes with 8 nvidia.com/gpu" in message, message
        assert sim.store.get("podgroups", "big", "job")["status"]["phase"] == "Pending"

        def pod_told() -> bool:
            pod = sim.store.get("pods", "big", "job-0")
            found = [c for c in pod["status"].get("conditions") or ()
                     if c["type"] == "PodScheduled"]  # fmt: skip
            return bool(found) and message in found[0].get("message", "")

        await until(pod_told, within=30, what="the verdict on a waiting pod's condition")
        await until(lambda: [e for e in events(sim, "big", "job-0")
                             if e["reason"] == "FailedScheduling" and message in e["message"]],
                    within=30, what="a FailedScheduling Event on a waiting pod")  # fmt: skip

        # baton why: the story from the bus, what it waits for, what would unblock it
        story = why.explain(await why.gather(url, cluster="c1", namespace="big", name="job"))
        assert (
            story[0]
            == "gang big/job (scheduler-plugins PodGroup): Pending, 0 of 9 members bound, 0 running"
        )
        assert "PodGroup created: minMember 9" in "\n".join(story)
        assert any(line.endswith(f"not placed: {message}") for line in story), story
        assert story[-2] == f"waits for: {message}"
        assert (
            story[-1].startswith("unblocks it: ")
            and "more nodes with 8 nvidia.com/gpu" in story[-1]
        )
        code = await asyncio.to_thread(why.run, ["kueue/job-0", "--nats", url])
        assert code == 0
        out = capsys.readouterr().out.splitlines()  # with the services' log lines (dated)
        printed = [line for line in out if not re.match(r"\d{4}-\d\d-\d\d ", line)]
        assert printed[0] == "pod kueue/job-0: a member of gang kueue/job"
        assert printed[1].startswith(
            "gang kueue/job (Kueue pod group, no PodGroup object): Running"
        )
        assert any("placed: 2 members" in line for line in printed), printed
        assert printed[-1] == "waits for nothing: it runs"
        print("\n".join(story + printed), file=sys.stderr)

        if not HAVE_KUBECTL:
            pytest.skip("no /usr/bin/kubectl to describe with")
        group = await kubectl(sim, tmp_path, "describe", "podgroup.scheduling.x-k8s.io",
                              "job", "-n", "big")  # fmt: skip
        assert "Phase:" in group and "Pending" in group
        assert ["Warning", "FailedScheduling"] in rows(group) and "baton.io/gang" in group, group
        described = await kubectl(sim, tmp_path, "describe", "pod", "job-0", "-n", "big")
        assert ["PodScheduled", "False"] in rows(described), described
        assert ["Warning", "FailedScheduling"] in rows(described), described
        bound = await kubectl(sim, tmp_path, "describe", "pod", "job-0", "-n", "kueue")
        assert ["Normal", "Scheduled"] in rows(bound), bound
        assert "Successfully assigned kueue/job-0" in bound, bound


def rows(text: str) -> list[list[str]]:
    """The first two words of every line ``kubectl describe`` printed."""
    return [line.split()[:2] for line in text.splitlines() if line.strip()]
