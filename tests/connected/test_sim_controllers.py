"""simcluster's workload controllers over HTTP: Job (batch/v1), JobSet
(jobset.x-k8s.io/v1alpha2) and MPIJob (kubeflow.org/v2beta1), each test naming the
upstream documentation rule it checks. No scheduler runs here: templates name their node
(``spec.nodeName``), so the simulated kubelet runs the pods at once."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from tests.pipeline import until
from tests.support.sim import Sim, running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]
NS = "default"
Obj = dict[str, Any]
KINDS = {
    "jobs": ("batch", "v1"),
    "jobsets": ("jobset.x-k8s.io", "v1alpha2"),
    "mpijobs": ("kubeflow.org", "v2beta1"),
    "podgroups": ("scheduling.x-k8s.io", "v1alpha1"),
}
INDEX = "batch.kubernetes.io/job-completion-index"


@pytest.fixture
async def sim() -> AsyncIterator[Sim]:
    async with running_sim(nodes=2, speed=20) as s:
        yield s


@pytest.fixture
async def api(sim: Sim) -> AsyncIterator[client.ApiClient]:
    api_client = await sim.api_client()
    try:
        yield api_client
    finally:
        await api_client.close()


def template(*, seconds: float | None = 1.0, exit_code: int = 0, node: str = "gpu-00001") -> Obj:
    notes = {} if seconds is None else {"sim.baton.io/duration-seconds": str(seconds)}
    if exit_code:
        notes["sim.baton.io/exit-code"] = str(exit_code)
    container = {"name": "main", "image": "busybox", "env": [{"name": "A", "value": "1"}]}
    spec = {"nodeName": node, "restartPolicy": "Never", "containers": [container]}
    return {"metadata": {"annotations": notes}, "spec": spec}


def job(name: str, **spec: Any) -> Obj:
    body = {"template": template(), **spec}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": body}


async def create(api: client.ApiClient, plural: str, body: Obj) -> None:
    group, version = KINDS[plural]
    await client.CustomObjectsApi(api).create_namespaced_custom_object(
        group, version, NS, plural, body
    )


async def get(api: client.ApiClient, plural: str, name: str) -> Obj:
    group, version = KINDS[plural]
    got: Obj = await client.CustomObjectsApi(api).get_namespaced_custom_object(
        group, version, NS, plural, name
    )
    return got


async def listed(api: client.ApiClient, plural: str, selector: str = "") -> list[Obj]:
    if plural == "pods":
        raw = await client.CoreV1Api(api).list_namespaced_pod(
            NS, label_selector=selector, _preload_content=False
        )
        items: list[Obj] = json.loads(await raw.read())["items"]
        return items
    group, version = KINDS[plural]
    got = await client.CustomObjectsApi(api).list_namespaced_custom_object(
        group, version, NS, plural, label_selector=selector
    )
    return list(got["items"])


async def status_of(api: client.ApiClient, plural: str, name: str) -> Obj:
    return dict((await get(api, plural, name)).get("status") or {})


def true(status: Obj, kind: str) -> Obj | None:
    found = [c for c in status.get("conditions") or () if c["type"] == kind]
    return found[0] if found and found[0]["status"] == "True" else None


async def condition(api: client.ApiClient, plural: str, name: str, kind: str) -> Obj:
    async def check() -> Obj | None:
        return true(await status_of(api, plural, name), kind)

    return await until(check, within=20, what=f"{plural}/{name} condition {kind}=True")


# --- Job ----------------------------------------------------------------------------


async def test_job_runs_parallelism_pods_until_completions_succeeded(api: client.ApiClient) -> None:
    """Job docs, "Parallel Jobs with a fixed completion count": the Job is complete when
    there are .spec.completions successful Pods; at most .spec.parallelism run at once;
    pods are owned by the Job (controller: true) and labelled job-name/controller-uid."""
    await create(api, "jobs", job("fixed", completions=4, parallelism=2))
    done = await condition(api, "jobs", "fixed", "Complete")
    assert done["reason"] == "CompletionsReached"
    status = await status_of(api, "jobs", "fixed")
    assert status["succeeded"] == 4 and status["active"] == 0 and "completionTime" in status
    uid = (await get(api, "jobs", "fixed"))["metadata"]["uid"]
    pods = await listed(api, "pods", "batch.kubernetes.io/job-name=fixed")
    assert len(pods) == 4
    for pod in pods:
        ref = pod["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("Job", uid, True)
        assert pod["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] == uid


async def test_indexed_job_gives_each_pod_its_completion_index(api: client.ApiClient) -> None:
    """Job docs, "Completion mode: Indexed": each pod gets index 0..completions-1 in the
    batch.kubernetes.io/job-completion-index annotation and label, JOB_COMPLETION_INDEX
    in its env, hostname $(job-name)-$(index); the Job is complete with one successful
    pod per index (status.completedIndexes)."""
    await create(api, "jobs", job("ix", completions=3, parallelism=3, completionMode="Indexed"))
    await condition(api, "jobs", "ix", "Complete")
    assert (await status_of(api, "jobs", "ix"))["completedIndexes"] == "0-2"
    pods = await listed(api, "pods", "batch.kubernetes.io/job-name=ix")
    seen = set()
    for pod in pods:
        index = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        assert pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == index
        assert pod["spec"]["hostname"] == f"ix-{index}"
        assert pod["metadata"]["name"].startswith(f"ix-{index}-")
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        path = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        assert env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == path
        seen.add(index)
    assert seen == {"0", "1", "2"}


async def test_backoff_limit_fails_the_job(api: client.ApiClient) -> None:
    """Job docs, "Pod backoff failure policy": the Job fails (reason
    BackoffLimitExceeded) once more pods failed than .spec.backoffLimit; each failed pod
    was replaced."""
    body = job("flaky", backoffLimit=1, template=template(exit_code=1))
    await create(api, "jobs", body)
    failed = await condition(api, "jobs", "flaky", "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert (await status_of(api, "jobs", "flaky"))["failed"] == 2


async def test_pod_failure_policy_fail_job_on_exit_code(api: client.ApiClient) -> None:
    """Job docs, "Pod failure policy": a FailJob rule whose onExitCodes match marks the
    Job failed at once (reason PodFailurePolicy), without using up backoffLimit."""
    codes = {"containerName": "main", "operator": "In", "values": [42]}
    policy = {"rules": [{"action": "FailJob", "onExitCodes": codes}]}
    body = job("fatal", backoffLimit=6, podFailurePolicy=policy, template=template(exit_code=42))
    await create(api, "jobs", body)
    failed = await condition(api, "jobs", "fatal", "Failed")
    assert failed["reason"] == "PodFailurePolicy"
    assert "exit code 42 matching FailJob rule at index 0" in failed["message"]
    assert (await status_of(api, "jobs", "fatal"))["failed"] == 1


async def test_evicted_pod_gets_disruption_target_and_ignore_rule_replaces_it(
    api: client.ApiClient,
) -> None:
    """Pod disruption conditions: the API server adds DisruptionTarget
    (EvictionByEvictionAPI) to an evicted pod; Job docs, "Pod failure policy": an Ignore
    rule on that condition does not count the failure, and the index gets a new pod
    (podReplacementPolicy Failed: once the old one is gone)."""
    policy = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    body = job("ev", completions=2, parallelism=2, completionMode="Indexed",
               podFailurePolicy=policy, template=template(seconds=None))  # fmt: skip
    await create(api, "jobs", body)

    async def running() -> list[Obj]:
        pods = await listed(api, "pods", "batch.kubernetes.io/job-name=ev")
        up = len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods)
        return pods if up else []

    pods = await until(running, what="2 running pods", within=20)
    victim = next(p for p in pods if p["metadata"]["labels"][INDEX] == "1")
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": victim["metadata"]["name"], "namespace": NS}}  # fmt: skip
    await client.CoreV1Api(api).create_namespaced_pod_eviction(
        victim["metadata"]["name"], NS, eviction, _preload_content=False
    )
    gone = await client.CoreV1Api(api).read_namespaced_pod(
        victim["metadata"]["name"], NS, _preload_content=False
    )
    marked = json.loads(await gone.read())["status"]["conditions"]
    target = next(c for c in marked if c["type"] == "DisruptionTarget")
    assert (target["status"], target["reason"]) == ("True", "EvictionByEvictionAPI")

    async def replaced() -> Obj | None:
        pods = await listed(api, "pods", f"{INDEX}=1")
        fresh = [p for p in pods if p["metadata"]["uid"] != victim["metadata"]["uid"]]
        return fresh[0] if fresh and len(pods) == 1 else None

    await until(replaced, what="index 1 replaced after its pod was gone", within=20)
    status = await status_of(api, "jobs", "ev")
    assert status.get("failed", 0) == 0 and not true(status, "Failed")


async def test_suspended_job_has_no_pods_until_resumed(api: client.ApiClient) -> None:
    """Job docs, "Suspending a Job": a suspended Job creates no pods and says Suspended
    (reason JobSuspended); resuming creates them and the condition turns False
    (JobResumed)."""
    await create(api, "jobs", job("later", suspend=True, template=template(seconds=None)))
    await condition(api, "jobs", "later", "Suspended")
    assert await listed(api, "pods", "batch.kubernetes.io/job-name=later") == []
    await client.CustomObjectsApi(api).patch_namespaced_custom_object(
        "batch", "v1", NS, "jobs", "later", {"spec": {"suspend": False}},
        _content_type="application/merge-patch+json",
    )  # fmt: skip

    async def resumed() -> bool:
        pods = await listed(api, "pods", "batch.kubernetes.io/job-name=later")
        suspended = [c for c in (await status_of(api, "jobs", "later"))["conditions"]
                     if c["type"] == "Suspended"]  # fmt: skip
        return len(pods) == 1 and suspended[0]["reason"] == "JobResumed"

    await until(resumed, what="a pod and Suspended=False (JobResumed)", within=20)


# --- JobSet -------------------------------------------------------------------------


def jobset(name: str, *, jobs: int, pods: int, exit_code: int = 0, **spec: Any) -> Obj:
    rj = lambda rj_name, seconds: {  # noqa: E731
        "name": rj_name, "replicas": jobs,
        "template": {"spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0,
                              "template": template(seconds=seconds, exit_code=exit_code)}},
    }  # fmt: skip
    body = {"replicatedJobs": [rj("leader", 1.0), rj("workers", 1.0)], **spec}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "annotations": {
                "alpha.jobset.sigs.k8s.io/exclusive-topology": "baton.io/rack"}},
            "spec": body}  # fmt: skip


async def test_jobset_makes_replicated_jobs_with_jobset_labels(api: client.ApiClient) -> None:
    """JobSet docs, "Concepts": each replicatedJob makes `replicas` Jobs named
    <jobset>-<replicatedJob>-<index>; Jobs and pods carry jobset-name,
    replicatedjob-name, job-index, restart-attempt..., pods the exclusive-topology
    annotation; successPolicy All (default): Completed once every Job completed."""
    await create(api, "jobsets", jobset("js", jobs=2, pods=2))
    done = await condition(api, "jobsets", "js", "Completed")
    assert done["reason"] == "AllJobsCompleted"
    names = {j["metadata"]["name"] for j in await listed(api, "jobs")}
    assert names == {"js-leader-0", "js-leader-1", "js-workers-0", "js-workers-1"}
    pods = await listed(api, "pods", "jobset.sigs.k8s.io/jobset-name=js")
    assert len(pods) == 8
    pod = next(p for p in pods if p["metadata"]["labels"]["job-name"] == "js-workers-1")
    labels, notes = pod["metadata"]["labels"], pod["metadata"]["annotations"]
    assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "workers"
    assert labels["jobset.sigs.k8s.io/job-index"] == "1"
    assert labels["jobset.sigs.k8s.io/job-global-index"] == "3"
    assert labels["jobset.sigs.k8s.io/restart-attempt"] == "0"
    assert notes["alpha.jobset.sigs.k8s.io/exclusive-topology"] == "baton.io/rack"
    status = await status_of(api, "jobsets", "js")
    assert status["terminalState"] == "Completed"
    assert [s["succeeded"] for s in status["replicatedJobsStatus"]] == [2, 2]


async def test_jobset_restarts_on_job_failure_up_to_max_restarts(api: client.ApiClient) -> None:
    """JobSet docs, "Failure Policy": a failed Job restarts the JobSet (every Job
    recreated, restart-attempt label = status.restarts) while fewer than maxRestarts
    restarts were made; then the JobSet fails (reason ReachedMaxRestarts)."""
    body = jobset("crashy", jobs=1, pods=1, exit_code=1, failurePolicy={"maxRestarts": 2})
    await create(api, "jobsets", body)
    failed = await condition(api, "jobsets", "crashy", "Failed")
    assert failed["reason"] == "ReachedMaxRestarts"
    status = await status_of(api, "jobsets", "crashy")
    assert (status["restarts"], status["restartsCountTowardsMax"]) == (2, 2)
    pods = await listed(api, "pods", "jobset.sigs.k8s.io/jobset-name=crashy")
    attempts = {p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for p in pods}
    assert "2" in attempts


async def test_jobset_without_failure_policy_fails_on_first_job_failure(
    api: client.ApiClient,
) -> None:
    """JobSet docs, "Failure Policy": without one, any failed Job fails the JobSet
    (reason FailedJobs) and nothing restarts."""
    await create(api, "jobsets", jobset("brittle", jobs=1, pods=1, exit_code=1))
    failed = await condition(api, "jobsets", "brittle", "Failed")
    assert failed["reason"] == "FailedJobs"
    assert (await status_of(api, "jobsets", "brittle")).get("restarts", 0) == 0


async def test_jobset_success_policy_any_of_target(api: client.ApiClient) -> None:
    """JobSet docs, "Success Policy": operator Any with targetReplicatedJobs [leader]:
    the JobSet completes once one leader Job completed, though workers run on (they are
    deleted)."""
    policy = {"operator": "Any", "targetReplicatedJobs": ["leader"]}
    body = jobset("anyof", jobs=1, pods=1, successPolicy=policy)
    body["spec"]["replicatedJobs"][1]["template"]["spec"]["template"] = template(seconds=None)
    await create(api, "jobsets", body)
    await condition(api, "jobsets", "anyof", "Completed")

    async def workers_gone() -> bool:
        return not await listed(api, "jobs", "jobset.sigs.k8s.io/replicatedjob-name=workers")

    await until(workers_gone, what="the running workers Job deleted", within=20)


async def test_jobset_in_order_startup_waits_for_the_previous_replicated_job(
    api: client.ApiClient,
) -> None:
    """JobSet docs, "Startup Policy": InOrder creates a replicatedJob's Jobs once every
    Job of the one before is ready; StartupPolicyCompleted once all started."""
    body = jobset("ordered", jobs=1, pods=1, startupPolicy={"startupPolicyOrder": "InOrder"})
    for rj in body["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"] = template(seconds=None)
    await create(api, "jobsets", body)
    first = await until(lambda: listed(api, "jobs"), what="the leader Job", within=20)
    assert [j["metadata"]["name"] for j in first] == ["ordered-leader-0"]
    await condition(api, "jobsets", "ordered", "StartupPolicyCompleted")
    names = {j["metadata"]["name"] for j in await listed(api, "jobs")}
    assert names == {"ordered-leader-0", "ordered-workers-0"}


# --- MPIJob -------------------------------------------------------------------------


async def test_mpijob_launcher_workers_and_scheduler_plugins_pod_group(
    api: client.ApiClient,
) -> None:
    """MPI operator v2: workers <job>-worker-<i> and a launcher Job; with gang scheduling
    (scheduler-plugins) a PodGroup named after the MPIJob, minMember = workers +
    launcher, minResources their requests; the launcher's success is the MPIJob's; with
    cleanPodPolicy Running the workers go when it ends."""
    worker = template(seconds=None)
    worker["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
    launcher = template(seconds=2.0)
    specs = {"Launcher": {"replicas": 1, "template": launcher},
             "Worker": {"replicas": 2, "template": worker}}  # fmt: skip
    body = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "pi"},
            "spec": {"slotsPerWorker": 2, "runPolicy": {"cleanPodPolicy": "Running"},
                     "mpiReplicaSpecs": specs}}  # fmt: skip
    await create(api, "mpijobs", body)
    group = await until(lambda: get(api, "podgroups", "pi"), what="PodGroup pi", within=20)
    assert group["spec"]["minMember"] == 3
    assert group["spec"]["minResources"]["nvidia.com/gpu"] == "4"
    pods = await until(lambda: listed(api, "pods", "training.kubeflow.org/job-name=pi"),
                       what="the MPIJob's pods", within=20)  # fmt: skip
    assert all(p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "pi" for p in pods)
    await condition(api, "mpijobs", "pi", "Succeeded")

    async def cleaned() -> bool:
        return not await listed(api, "pods", "training.kubeflow.org/job-role=worker")

    await until(cleaned, what="the workers deleted (cleanPodPolicy Running)", within=20)
    launcher_job = await get(api, "jobs", "pi-launcher")
    assert launcher_job["metadata"]["ownerReferences"][0]["kind"] == "MPIJob"


async def test_deleting_a_job_deletes_its_pods(api: client.ApiClient, sim: Sim) -> None:
    """Garbage collection (background propagation): the pods a deleted Job owned go."""
    await create(api, "jobs", job("short", template=template(seconds=None)))
    await until(lambda: listed(api, "pods", "job-name=short"), what="the pod", within=20)
    await client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "batch", "v1", NS, "jobs", "short"
    )

    async def gone() -> bool:
        return not await listed(api, "pods", "job-name=short")

    await until(gone, what="the Job's pod deleted", within=20)


async def test_backoff_limit_per_index_fails_only_that_index(api: client.ApiClient) -> None:
    """Job docs, "Backoff limit per index": an index whose pods failed more than
    backoffLimitPerIndex times is failed (status.failedIndexes) while the others run to
    completion; the Job then fails (reason FailedIndexes)."""
    body = job("perindex", completions=2, parallelism=2, completionMode="Indexed",
               backoffLimitPerIndex=1, template=template(exit_code=3))  # fmt: skip
    await create(api, "jobs", body)
    failed = await condition(api, "jobs", "perindex", "Failed")
    assert failed["reason"] == "FailedIndexes"
    status = await status_of(api, "jobs", "perindex")
    assert status["failedIndexes"] == "0-1" and status["failed"] == 4  # 2 tries per index
    counts = {p["metadata"]["annotations"].get("batch.kubernetes.io/job-index-failure-count")
              for p in await listed(api, "pods", "job-name=perindex")}  # fmt: skip
    assert counts == {None, "1"}  # first try, then the retry that knows one failure


async def test_job_without_completions_is_complete_once_one_pod_succeeded(
    api: client.ApiClient,
) -> None:
    """Job docs, "Parallel Jobs with a work queue": without .spec.completions the Job
    runs parallelism pods and is complete once any pod succeeded and all have ended."""
    await create(api, "jobs", job("queue", parallelism=2))
    await condition(api, "jobs", "queue", "Complete")
    status = await status_of(api, "jobs", "queue")
    assert status["succeeded"] == 2 and status["active"] == 0


async def test_jobset_failure_policy_rule_fails_on_a_job_failure_reason(
    api: client.ApiClient,
) -> None:
    """JobSet docs, "Failure Policy" rules: a FailJobSet rule whose onJobFailureReasons
    match the failed Job's reason (PodFailurePolicy) fails the JobSet without a restart,
    whatever maxRestarts allows."""
    body = jobset("ruled", jobs=1, pods=1, exit_code=7, failurePolicy={
        "maxRestarts": 5,
        "rules": [{"name": "fatal", "action": "FailJobSet",
                   "onJobFailureReasons": ["PodFailurePolicy"]}]})  # fmt: skip
    codes = {"operator": "In", "values": [7]}
    for rj in body["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["podFailurePolicy"] = {
            "rules": [{"action": "FailJob", "onExitCodes": codes}]
        }
    await create(api, "jobsets", body)
    failed = await condition(api, "jobsets", "ruled", "Failed")
    assert failed["reason"] == "FailJobSetFailurePolicyAction"
    assert (await status_of(api, "jobsets", "ruled")).get("restarts", 0) == 0


async def test_mpijob_scheduling_policy_and_wait_for_workers_ready(
    api: client.ApiClient, sim: Sim
) -> None:
    """MPI operator v2: runPolicy.schedulingPolicy's minAvailable, minResources and
    scheduleTimeoutSeconds go to the PodGroup as they are; launcherCreationPolicy
    WaitForWorkersReady creates the launcher Job only once every worker is ready."""
    seen: list[str] = []  # the store's changes, in order: "ready <pod>", "added <job>"

    def on_change(event: str, res: str, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        if res == "jobs" and event == "ADDED":
            seen.append(f"added {name}")
        elif res == "pods" and (obj.get("status") or {}).get("phase") == "Running":
            seen.append(f"ready {name}")

    sim.store.add_listener(on_change)
    policy = {"minAvailable": 2, "minResources": {"nvidia.com/gpu": "16"},
              "scheduleTimeoutSeconds": 120}  # fmt: skip
    specs = {"Launcher": {"replicas": 1, "template": template(seconds=None)},
             "Worker": {"replicas": 2, "template": template(seconds=None)}}  # fmt: skip
    spec = {"launcherCreationPolicy": "WaitForWorkersReady",
            "runPolicy": {"schedulingPolicy": policy}, "mpiReplicaSpecs": specs}  # fmt: skip
    body = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "wait"},
            "spec": spec}  # fmt: skip
    await create(api, "mpijobs", body)
    group = await until(lambda: get(api, "podgroups", "wait"), what="PodGroup wait", within=20)
    assert group["spec"] == {"minMember": 2, "minResources": {"nvidia.com/gpu": "16"},
                             "scheduleTimeoutSeconds": 120}  # fmt: skip
    await until(lambda: "added wait-launcher" in seen, what="the launcher Job", within=20)
    launched = seen.index("added wait-launcher")
    assert {f"ready wait-worker-{i}" for i in range(2)} <= set(seen[:launched]), seen


@pytest.mark.parametrize(("plural", "kind"), [("jobs", "Job"), ("jobsets", "JobSet"),
                                              ("mpijobs", "MPIJob")])  # fmt: skip
async def test_the_kinds_are_served_with_discovery_openapi_and_a_status_subresource(
    api: client.ApiClient, sim: Sim, plural: str, kind: str
) -> None:
    """Each kind as its CRD (or, for Jobs, the API server) serves it: listed in
    discovery with its status subresource, in the OpenAPI v3 document of its
    group/version, and a write to the main resource leaves status alone."""
    group, version = KINDS[plural]
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{sim.url}/apis/{group}/{version}") as resp:
            names = {r["name"]: r["kind"] for r in (await resp.json())["resources"]}
        async with http.get(f"{sim.url}/openapi/v3") as resp:
            paths = (await resp.json())["paths"]
    assert names[plural] == kind and f"{plural}/status" in names
    assert f"apis/{group}/{version}" in paths
    body = {"apiVersion": f"{group}/{version}", "kind": kind,
            "metadata": {"name": "held"}, "spec": {}}  # fmt: skip
    if plural == "jobs":
        body["spec"] = {"suspend": True, "template": template()}
    elif plural == "jobsets":
        body["spec"] = {"replicatedJobs": []}
    custom = client.CustomObjectsApi(api)
    await custom.create_namespaced_custom_object(group, version, NS, plural, body)
    await custom.patch_namespaced_custom_object_status(
        group, version, NS, plural, "held", {"status": {"note": "kept"}},
        _content_type="application/merge-patch+json",
    )  # fmt: skip
    await custom.patch_namespaced_custom_object(
        group, version, NS, plural, "held", {"metadata": {"labels": {"a": "b"}},
                                             "status": {"note": "dropped"}},
        _content_type="application/merge-patch+json",
    )  # fmt: skip
    assert (await status_of(api, plural, "held"))["note"] == "kept"


async def test_a_spec_the_api_server_would_refuse_does_not_stop_the_controller(
    api: client.ApiClient,
) -> None:
    """An Indexed Job without completions (upstream validation refuses it: "Required
    value: when completion mode is Indexed") is left alone; the next Job still runs."""
    await create(api, "jobs", job("broken", completionMode="Indexed"))
    await create(api, "jobs", job("fine"))
    await condition(api, "jobs", "fine", "Complete")
    assert await listed(api, "pods", "job-name=broken") == []


async def test_a_suspended_jobset_suspends_its_jobs_until_resumed(api: client.ApiClient) -> None:
    """JobSet API reference, spec.suspend: suspending a JobSet suspends its Jobs (their
    pods are deleted); resuming resumes them (condition Suspended: SuspendedJobs, then
    False with ResumeJobs)."""
    body = jobset("paused", jobs=1, pods=1, suspend=True)
    for rj in body["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"] = template(seconds=None)
    await create(api, "jobsets", body)
    found = await condition(api, "jobsets", "paused", "Suspended")
    assert found["reason"] == "SuspendedJobs"
    jobs = await until(lambda: listed(api, "jobs"), what="the suspended Jobs", within=20)
    assert all(j["spec"]["suspend"] for j in jobs)
    assert await listed(api, "pods", "jobset.sigs.k8s.io/jobset-name=paused") == []
    await client.CustomObjectsApi(api).patch_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", NS, "jobsets", "paused", {"spec": {"suspend": False}},
        _content_type="application/merge-patch+json",
    )  # fmt: skip

    async def running() -> bool:
        pods = await listed(api, "pods", "jobset.sigs.k8s.io/jobset-name=paused")
        return len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods)

    await until(running, what="both Jobs' pods running after the resume", within=20)
    resumed = [c for c in (await status_of(api, "jobsets", "paused"))["conditions"]
               if c["type"] == "Suspended"]  # fmt: skip
    assert (resumed[0]["status"], resumed[0]["reason"]) == ("False", "ResumeJobs")
