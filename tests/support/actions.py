"""Actions as a producer sends them, for tests: one of each kind, and a producer that
holds a real lease so the actuator applies what it publishes.

The actuator applies an action only from a producer allowed its kind, on the subject
``action_subject`` gives, at the producer's current lease epoch
(``baton.services.actuator.core.trusting``). ``Producers(bus)`` takes each producer's lease
key once (as the runner would: the revision it took the key at is the epoch) and
stamps every action it publishes with that epoch.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
import nats.js.errors

from baton.libs.bus import Bus
from baton.libs.runner.leasing import Held, leases_bucket
from baton.proto.actions import (
    ACTION_SUBJECTS,
    Annotate,
    AnyAction,
    BindGang,
    Binding,
    Cordon,
    CreatePod,
    DeletePod,
    Evict,
    EvictGang,
    GroupStatus,
    MarkNode,
    ObjectRef,
    PodRef,
    PodTemplate,
    RecordEvent,
    RecreatePod,
    ScaleMachineDeployment,
    SetGroupStatus,
    SetLabels,
    SetPodCondition,
    SetTaint,
    SetTeamStatus,
    StatusCondition,
    TeamStatus,
    action_subject,
)
from baton.proto.k8s import Taint


def one_of_each(*, by: str, epoch: int, node: str = "gpu-0", ns: str = "team-a") -> list[AnyAction]:
    """One action of every kind, all from ``by`` at ``epoch``, about ``node`` or pods in
    ``ns`` (a CreatePod is a pod pinned to ``node`` that tolerates everything)."""
    base: dict[str, Any] = {"by": by, "at": 1.0, "epoch": epoch}
    pod = Binding(namespace=ns, pod="p", node=node)
    made: list[AnyAction] = [
        BindGang(id=f"{by}-bind", **base, gang=f"{ns}/g", bindings=(pod,)),
        EvictGang(id=f"{by}-evict-gang", **base, gang=f"{ns}/g", pods=(pod,)),
        Evict(id=f"{by}-evict", **base, namespace=ns, pod="p"),
        SetTaint(id=f"{by}-taint", **base, node=node,
                 taint=Taint(key="t.baton.io/x", effect="NoExecute")),
        SetLabels(id=f"{by}-label", **base, node=node, labels={"t.baton.io/x": "1"}),
        Annotate(id=f"{by}-annotate", **base, kind="Node", namespace="", name=node,
                 annotations={"t.baton.io/x": "1"}),
        MarkNode(id=f"{by}-mark", **base, node=node, labels={"t.baton.io/x": "1"}),
        Cordon(id=f"{by}-cordon", **base, node=node),
        CreatePod(id=f"{by}-create", **base, pod=PodTemplate(namespace=ns, name="evil",
                                                              node_name=node)),
        RecreatePod(id=f"{by}-recreate", **base, gang=f"{ns}/g", namespace=ns, pod="p",
                    uid="u1"),
        DeletePod(id=f"{by}-delete", **base, namespace=ns, pod="p"),
        ScaleMachineDeployment(id=f"{by}-scale", **base, namespace=ns, name="md", replicas=9),
        SetGroupStatus(id=f"{by}-status", **base, namespace=ns, name="g",
                       status=GroupStatus(phase="Running")),
        SetPodCondition(id=f"{by}-condition", **base, gang=f"{ns}/g", namespace=ns,
                        pods=(PodRef(name="p"),),
                        condition=StatusCondition(type="PodScheduled", status="False")),
        RecordEvent(id=f"{by}-event", **base, regarding=ObjectRef(kind="Node", name=node),
                    reason="Test", note="test"),
        SetTeamStatus(id=f"{by}-team", **base, team="t", status=TeamStatus(quota=8)),
    ]  # fmt: skip
    assert {type(a) for a in made} == set(ACTION_SUBJECTS), "one of each action type"
    return made


class Producers:
    """Producers that lead: ``publish(action)`` takes ``action.by``'s lease the first
    time (or reads the epoch of the one held, e.g. by a running service), stamps the
    action with that epoch and publishes it on its subject, ``Nats-Msg-Id`` its id."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.epochs: dict[str, int] = {}

    async def epoch(self, producer: str) -> int:
        if producer not in self.epochs:
            self.epochs[producer] = await take_lease(self.bus, producer)
        return self.epochs[producer]

    async def stamp(self, action: AnyAction) -> AnyAction:
        return msgspec.structs.replace(action, epoch=await self.epoch(action.by))

    async def publish(self, action: AnyAction, *, msg_id: str = "") -> AnyAction:
        stamped = await self.stamp(action)
        subject = action_subject(self.bus.cluster, stamped)
        await self.bus.publish(subject, stamped, msg_id=msg_id or stamped.id)
        return stamped


async def take_lease(bus: Bus, producer: str, *, ttl: float = 3600.0) -> int:
    """``producer``'s lease epoch: the key taken now (held for ``ttl``), or the epoch of
    the holder that has it."""
    kv = await leases_bucket(bus)
    try:
        entry = await kv.get(producer)
    except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
        entry = None
    if entry is not None and entry.value:
        held = msgspec.json.decode(entry.value, type=Held)
        return held.epoch or int(entry.revision or 0)
    mine = Held(holder="test", renewed_at=time.time(), ttl=ttl)
    if entry is None:
        revision = await kv.create(producer, msgspec.json.encode(mine))
    else:
        revision = await kv.update(producer, msgspec.json.encode(mine), last=entry.revision)
    held = Held(holder="test", renewed_at=time.time(), ttl=ttl, epoch=revision)
    await kv.update(producer, msgspec.json.encode(held), last=revision)
    return revision
