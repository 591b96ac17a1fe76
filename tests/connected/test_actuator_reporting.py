"""The actuator's writes of what Baton tells users, against simcluster over HTTP:
PodGroup status of both APIs, pods' PodScheduled condition, Events and their series,
teams (``Team`` objects) with their status."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi

from baton.proto.actions import (
    GroupStatus,
    ObjectRef,
    PodRef,
    QueuedGang,
    RecordEvent,
    SetGroupStatus,
    SetPodCondition,
    SetTeamStatus,
    StatusCondition,
    TeamStatus,
)
from baton.proto.k8s import UPSTREAM_API, VOLCANO_API
from baton.services.actuator import applying
from baton.services.actuator.calling import Api
from baton.services.actuator.core.eventing import EventWrite
from tests.support.sim import Sim, running_sim

pytestmark = [pytest.mark.connected, pytest.mark.timeout(60)]
NS = "ml"


@pytest.fixture
async def world() -> AsyncIterator[tuple[Sim, Api]]:
    async with running_sim() as sim:
        client = await sim.api_client()
        try:
            core, custom = CoreV1Api(client), CustomObjectsApi(client)
            await core.create_namespace({"metadata": {"name": NS}})
            await custom.create_namespaced_custom_object(
                "scheduling.x-k8s.io", "v1alpha1", NS, "podgroups",
                {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                 "metadata": {"name": "job"}, "spec": {"minMember": 2}},
            )  # fmt: skip
            await custom.create_namespaced_custom_object(
                "scheduling.k8s.io", "v1alpha2", NS, "podgroups",
                {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                 "metadata": {"name": "train"},
                 "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}},
            )  # fmt: skip
            await custom.create_namespaced_custom_object(
                "scheduling.volcano.sh", "v1beta1", NS, "podgroups",
                {"apiVersion": VOLCANO_API, "kind": "PodGroup", "metadata": {"name": "vc"},
                 "spec": {"minMember": 2, "queue": "default"}},
            )  # fmt: skip
            for name in ("w-0", "w-1"):
                pod = {"metadata": {"name": name},
                       "spec": {"containers": [{"name": "c", "image": "x"}]}}  # fmt: skip
                await core.create_namespaced_pod(NS, pod)
            yield sim, Api(client, tries=2, base=0.01)
        finally:
            await client.close()


def waiting(message: str, since: float = 1.0) -> StatusCondition:
    return StatusCondition(type="PodGroupScheduled", status="False", reason="Unschedulable",
                           message=message, since=since)  # fmt: skip


def status_action(api: str, name: str, message: str, since: float) -> SetGroupStatus:
    return SetGroupStatus(
        id=f"s-{name}-{since}", by="reporter", at=since, priority="status", namespace=NS,
        name=name, api=api,
        status=GroupStatus(phase="Pending", conditions=(waiting(message, since),)),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("api", "name", "key"),
    [("scheduling.x-k8s.io/v1alpha1", "job", "podgroups"),
     (UPSTREAM_API, "train", "podgroups.scheduling.k8s.io"),
     (VOLCANO_API, "vc", "podgroups.scheduling.volcano.sh")],
)  # fmt: skip
async def test_group_status_of_either_api_keeps_its_transition_time(
    world: tuple[Sim, Api], api: str, name: str, key: str
) -> None:
    sim, client = world
    first = await applying.apply(client.session(), status_action(api, name, "no room", 1.0))
    assert first == ("applied", "")
    again = await applying.apply(client.session(), status_action(api, name, "no room", 9.0))
    assert again == ("already", "")
    await applying.apply(client.session(), status_action(api, name, "still no room", 9.0))
    stored = sim.store.get(key, NS, name)["status"]
    (condition,) = stored["conditions"]
    assert condition["message"] == "still no room"
    assert condition["lastTransitionTime"] == "1970-01-01T00:00:01Z"  # status unchanged
    assert ("phase" in stored) == (api != UPSTREAM_API)  # upstream: conditions only
    assert ("scheduled" in stored) == (api == "scheduling.x-k8s.io/v1alpha1")  # plugins' own


async def test_pod_condition_skips_bound_and_replaced_pods(world: tuple[Sim, Api]) -> None:
    sim, client = world
    binding = {"metadata": {"name": "w-1"}, "target": {"kind": "Node", "name": "gpu-1"}}
    session = client.session()
    await session.call("create", client.core.create_namespaced_pod_binding, "w-1", NS, binding)
    uid = sim.store.get("pods", NS, "w-0")["metadata"]["uid"]
    condition = StatusCondition(type="PodScheduled", status="False", reason="Unschedulable",
                                message="gang ml/job: no room", since=1.0)  # fmt: skip
    action = SetPodCondition(
        id="c1", by="reporter", at=1.0, priority="status", gang=f"{NS}/job", namespace=NS,
        pods=(PodRef(name="w-0", uid=uid), PodRef(name="w-1"), PodRef(name="gone")),
        condition=condition,
    )  # fmt: skip
    assert await applying.apply(client.session(), action) == ("applied", "")

    def scheduled(pod: str) -> dict[str, Any]:
        found = sim.store.get("pods", NS, pod)["status"].get("conditions") or []
        return next(c for c in found if c["type"] == "PodScheduled")

    assert (scheduled("w-0")["status"], scheduled("w-0")["message"]) == (
        "False", "gang ml/job: no room"
    )  # fmt: skip
    assert scheduled("w-1")["status"] == "True"  # bound: as binding set it
    assert await applying.apply(client.session(), action) == ("already", "")


async def test_an_event_and_its_series_as_the_events_api_stores_them(
    world: tuple[Sim, Api],
) -> None:
    sim, client = world
    event = RecordEvent(
        id="e1", by="reporter", at=5.0, priority="status", reason="FailedScheduling",
        regarding=ObjectRef(kind="Pod", name="w-0", namespace=NS), note="no room",
        event_type="Warning", action="Scheduling",
    )  # fmt: skip
    first = EventWrite(name="w-0.abc", count=1, first=5.0, last=5.0)
    assert await applying.apply(client.session(), event, event=first) == ("applied", "")
    series = EventWrite(name="w-0.abc", count=4, first=5.0, last=65.0)
    assert await applying.apply(client.session(), event, event=series) == ("applied", "")
    stored = sim.store.get("events", NS, "w-0.abc")
    assert (stored["reason"], stored["type"], stored["message"]) == (
        "FailedScheduling", "Warning", "no room"
    )  # fmt: skip
    assert stored["series"]["count"] == 4
    assert stored["reportingComponent"] == "baton.io/gang"
    assert stored["involvedObject"]["name"] == "w-0"
    gone = EventWrite(name="w-0.gone", count=2, first=5.0, last=9.0)  # its Event expired
    assert await applying.apply(client.session(), event, event=gone) == ("applied", "")
    assert sim.store.get("events", NS, "w-0.gone")["series"]["count"] == 2


def team_action(at: float, *queued: str, remove: bool = False) -> SetTeamStatus:
    queue = tuple(
        QueuedGang(name=name, position=i, gpus=8, priority=0, reason="team 'a' uses 16 of 16")
        for i, name in enumerate(queued)
    )
    status = TeamStatus(namespaces=("a",), quota=16, used=16, waiting=len(queue), queue=queue)
    return SetTeamStatus(
        id=f"t-{at}", by="admission", at=at, priority="status", team="a", status=status,
        remove=remove,
    )  # fmt: skip


async def test_a_team_is_created_its_status_written_when_changed_and_removed(
    world: tuple[Sim, Api],
) -> None:
    sim, client = world
    assert await applying.apply(client.session(), team_action(1.0, "a/x", "a/y")) == (
        "applied", ""
    )  # fmt: skip
    stored = sim.store.get("teams", "", "a")
    assert stored["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "baton"}
    status = stored["status"]
    assert (status["quota"], status["used"], status["waiting"]) == (16, 16, 2)
    assert [(g["name"], g["position"]) for g in status["queue"]] == [("a/x", 0), ("a/y", 1)]
    assert status["queue"][0]["setAside"] is False and "borrowLimit" in status
    session = client.session()
    assert await applying.apply(session, team_action(2.0, "a/x", "a/y")) == ("already", "")
    assert session.writes == 0  # read, found the same, wrote nothing
    await applying.apply(client.session(), team_action(3.0, "a/y"))
    assert [g["name"] for g in sim.store.get("teams", "", "a")["status"]["queue"]] == ["a/y"]
    removed = await applying.apply(client.session(), team_action(4.0, remove=True))
    assert removed == ("applied", "")
    assert await applying.apply(client.session(), team_action(5.0, remove=True)) == (
        "already", ""
    )  # fmt: skip
