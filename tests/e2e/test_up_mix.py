"""`baton up --workload llm`: the LLM-style mix submitted as users submit it - large
jobs as JobSets and MPIJobs, small ones as Jobs - run by simcluster's controllers and
placed by Baton in whole gangs, some running to completion."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import config
from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi

from baton.proto import keys
from tests.e2e.upping import baton_up, endpoints_of
from tests.pipeline import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]
Obj = dict[str, Any]
KINDS = {"jobsets": ("jobset.x-k8s.io", "v1alpha2"), "mpijobs": ("kubeflow.org", "v2beta1"),
         "jobs": ("batch", "v1"), "podgroups": ("scheduling.x-k8s.io", "v1alpha1")}  # fmt: skip
DONE = {"jobsets": "Completed", "mpijobs": "Succeeded", "jobs": "Complete"}


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Path]:
    """``baton up --workload llm --nodes 64`` (72 trace hours in ~2.6 min); its endpoints
    file."""
    with baton_up(tmp_path, "--nodes", "64", "--workload", "llm", "--speed", "1500") as running:
        yield running[0]


async def read(kubeconfig: str) -> dict[str, list[Obj]]:
    """Pods, PodGroups, JobSets, MPIJobs and Jobs, as the API serves them."""
    client = await config.new_client_from_config(config_file=kubeconfig, persist_config=False)
    try:
        raw = await CoreV1Api(client).list_pod_for_all_namespaces(_preload_content=False)
        found = {"pods": json.loads(await raw.read())["items"]}
        for plural, (group, version) in KINDS.items():
            listed = await CustomObjectsApi(client).list_cluster_custom_object(
                group, version, plural
            )
            found[plural] = listed["items"]
    finally:
        await client.close()
    return found


def key(obj: Obj) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def sizes(now: dict[str, list[Obj]]) -> dict[str, int]:
    """Members each gang has, from what was submitted: a JobSet's pods (its Jobs x
    parallelism), a PodGroup's minMember (an MPIJob's: workers + launcher)."""
    out = {key(o): sum(r["replicas"] * r["template"]["spec"]["parallelism"]
                       for r in o["spec"]["replicatedJobs"]) for o in now["jobsets"]}  # fmt: skip
    out.update((key(g), g["spec"]["minMember"]) for g in now["podgroups"])
    return out


def gang_of(pod: Obj) -> str | None:
    labels = pod["metadata"].get("labels") or {}
    name = labels.get(keys.POD_GROUP) or labels.get(keys.JOBSET_NAME)
    return f"{pod['metadata']['namespace']}/{name}" if name else None


def partial(now: dict[str, list[Obj]]) -> set[str]:
    """Gangs none of whose members has ended, with some but fewer than all bound."""
    need = sizes(now)
    bound: Counter[str] = Counter()
    ended: set[str] = set()
    for pod in now["pods"]:
        if (gang := gang_of(pod)) is None:
            continue
        if pod["metadata"].get("deletionTimestamp") or pod["status"].get("phase") in (
            "Succeeded", "Failed",
        ):  # fmt: skip
            ended.add(gang)
        elif pod["spec"].get("nodeName"):
            bound[gang] += 1
    return {k for k, n in bound.items() if k not in ended and 0 < n < need.get(k, 1)}


def done(objects: list[Obj], kind: str) -> list[str]:
    return [o["metadata"]["name"] for o in objects
            if any(c["type"] == DONE[kind] and c["status"] == "True"
                   for c in (o.get("status") or {}).get("conditions") or ())]  # fmt: skip


def whole(now: dict[str, list[Obj]]) -> set[str]:
    """JobSets and MPIJobs with every pod of theirs bound and running, now."""
    need = sizes(now)
    pods: dict[str, list[Obj]] = {}
    for pod in now["pods"]:
        if gang := gang_of(pod):
            pods.setdefault(gang, []).append(pod)
    return {k for k, found in pods.items() if len(found) == need.get(k)
            and all(p["spec"].get("nodeName") and p["status"].get("phase") == "Running"
                    for p in found)}  # fmt: skip


async def test_the_llm_mix_runs_as_jobsets_mpijobs_and_jobs_in_whole_gangs(up: Path) -> None:
    await until(lambda: up.exists() and "KUBECONFIG" in up.read_text(),
                what="baton up to write its endpoints file", within=180, step=1.0)  # fmt: skip
    kubeconfig = endpoints_of(up)["KUBECONFIG"]
    seen: set[str] = set()  # JobSets and MPIJobs seen running whole
    partial_before: set[str] = set()
    broken: list[set[str]] = []

    async def finished_some_of_each() -> dict[str, list[str]] | None:
        nonlocal partial_before
        now = await read(kubeconfig)
        seen.update(whole(now))
        found = partial(now)
        if found & partial_before:  # partial in two readings a second apart: not binding
            broken.append(found & partial_before)
        partial_before = found
        finished = {kind: done(now[kind], kind) for kind in DONE}
        return finished if all(finished.values()) else None

    what = "a JobSet Completed, an MPIJob Succeeded, a Job Complete"
    finished = await until(finished_some_of_each, within=360, step=1.0, what=what)
    assert broken == []
    kinds = {key.split("/", 1)[1] for key in seen}
    now = await read(kubeconfig)
    jobsets = {o["metadata"]["name"] for o in now["jobsets"]}
    mpijobs = {o["metadata"]["name"] for o in now["mpijobs"]}
    assert kinds & jobsets and kinds & mpijobs, (seen, finished)  # each seen placed whole
    owned = [j for j in now["jobs"] if not j["metadata"].get("ownerReferences")]
    assert owned  # the small jobs, submitted as Jobs of their own
    assert all(len(o["spec"]["replicatedJobs"]) == 1 for o in now["jobsets"])
