"""Fill a ``View`` from the bus: the current state once (``baton status``), then live
(``baton up``).

Current state: the last event of every object (K8S), each service's last start and
admission's team config (RUNNER, EVENTS: last per subject), admission's last word on
every gang, and the last few decisions. Live: every message of the cluster is counted
by domain; decisions, actions and results are noted as they pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

from baton.libs.bus import streams
from baton.libs.bus.snapshotting import snapshot
from baton.libs.runner.access import ACTUATOR_CONSUMERS
from baton.proto import subjects
from baton.proto.actions import (
    ACTION_SUBJECTS,
    ActionResult,
    CreatePod,
    RecordEvent,
    SetTeamStatus,
)
from baton.proto.admission import AnyAdmissionEvent, TeamsLoaded, WebhookServing
from baton.proto.bandwidth import Allocation, allocation_subject
from baton.proto.codec import Undecodable, decode
from baton.proto.health import Control, StateChanged, Withheld
from baton.proto.k8s import K8sEvent
from baton.proto.runner import Started
from baton.services.cli.view import RECENT, View

# What `baton up` prints line by line when its output is not a terminal: the services'
# decisions (actions and results stay on the status's recent lines only).
DECIDING = {subjects.PLACEMENT, subjects.ADMISSION, subjects.HEALTH, subjects.BALLOON,
            subjects.AUTOSCALER}  # fmt: skip
# Results a person should see on the recent lines; the others are counted (the actuator
# answers ~50 actions a second on a busy demo: "applied" lines would push every decision
# off the screen between two refreshes).
NOTABLE = {"failed", "rolled-back", "dropped"}
EVENT = ACTION_SUBJECTS[RecordEvent][0]  # results of Kubernetes Events: <c>.result.event.>
CREATE = ACTION_SUBJECTS[CreatePod][0]  # pods Baton creates (preflight checks, balloons)
TEAM = ACTION_SUBJECTS[SetTeamStatus][0]  # each team as admission shows it
# Followed by their streams' sequence, not message by message: at 7,500 nodes they carry
# thousands a second, and a status view that took each one cost a third of a core.
COUNTED = {subjects.TELEMETRY: streams.TELEMETRY, subjects.ACTION: streams.ACTIONS}
SIZED = (streams.K8S, streams.ACTIONS, streams.EVENTS, streams.HISTORY, streams.DEADLETTER)
Recorded = Started | AnyAdmissionEvent | TeamsLoaded | WebhookServing | Allocation
Health = StateChanged | Withheld | Control


class NoBaton(RuntimeError):
    """The bus holds no Baton streams for this cluster (Baton is not running there)."""


def stream(cluster: str, what: str) -> str:
    return subjects.stream_name(cluster, what)


async def load(nc: NATS, view: View, *, cluster: str, objects: bool = True) -> None:
    """The current state, once. ``objects=False``: all but the K8S objects (``follow``
    reads those itself, then follows them live)."""
    js = nc.jetstream()
    try:
        if objects:
            k8s = subjects.wildcard(cluster, subjects.K8S, ">")
            objs = await snapshot(nc, js, k8s, type_=K8sEvent, stream=stream(cluster, streams.K8S))
            for event in objs:
                view.apply(event)
        runner = subjects.wildcard(cluster, subjects.RUNNER, "started", ">")
        said = await snapshot(nc, js, runner, type_=Started, stream=stream(cluster, streams.RUNNER))
        admission = subjects.wildcard(cluster, subjects.ADMISSION, ">")
        said += await snapshot(
            nc, js, admission, type_=Recorded, stream=stream(cluster, streams.EVENTS)
        )
        egress = allocation_subject(cluster)  # the bandwidth service's last round
        said += await snapshot(
            nc, js, egress, type_=Allocation, stream=stream(cluster, streams.EVENTS)
        )
        said += await _creates(nc, cluster=cluster)
        teams = subjects.wildcard(cluster, subjects.ACTION, TEAM, ">")  # the last per team
        said += await snapshot(
            nc, js, teams, type_=SetTeamStatus, stream=stream(cluster, streams.ACTIONS)
        )
        for kind in ("state", "withheld", "control"):  # each node's last word, the switch
            health = subjects.wildcard(cluster, subjects.HEALTH, kind, ">")
            if kind == "control":
                health = f"{subjects.PREFIX}.{cluster}.{subjects.HEALTH}.control"
            said += await snapshot(
                nc, js, health, type_=Health, stream=stream(cluster, streams.EVENTS)
            )
    except nats.js.errors.NotFoundError as exc:
        raise NoBaton(f"no Baton streams for cluster {cluster!r} on this bus") from exc
    for event in sorted(said, key=lambda e: e.at):
        view.record(event)
    for subject, data in await last_messages(nc, stream(cluster, streams.EVENTS), count=RECENT):
        if worth_a_line(subject, data):
            view.note(describe(subject, data))
    await _facts(nc, view, cluster=cluster)


async def _creates(nc: NATS, *, cluster: str) -> list[CreatePod | ActionResult]:
    """The last ask for each pod Baton creates, and what came of it: a preflight pod the
    API server refuses leaves its node validating, which ``baton status`` says."""
    js = nc.jetstream()
    asks = subjects.wildcard(cluster, subjects.ACTION, CREATE, ">")
    said: list[CreatePod | ActionResult] = await snapshot(
        nc, js, asks, type_=CreatePod, stream=stream(cluster, streams.ACTIONS)
    )
    results = subjects.wildcard(cluster, subjects.RESULT, CREATE, ">")
    said += await snapshot(
        nc, js, results, type_=ActionResult, stream=stream(cluster, streams.EVENTS)
    )
    return said


async def _facts(nc: NATS, view: View, *, cluster: str) -> None:
    """What the streams say of the services that publish no start (the bridge and the
    actuator read no bus inputs, node agents run no runner), and how much each stream
    holds."""
    js = nc.jetstream()
    for what in SIZED:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            view.streams[what] = (await js.stream_info(stream(cluster, what))).state.messages
    for subject, data in await last_messages(nc, stream(cluster, streams.K8S), count=1):
        at = _at(data)
        when = f"{dt.datetime.fromtimestamp(at):%Y-%m-%d %H:%M:%S}" if at else "?"
        view.seen["bridge"] = f"last object event {when} ({subject.split('.')[3]})"
    with contextlib.suppress(nats.js.errors.NotFoundError):  # node agents publish no start
        for subject, data in await last_messages(nc, stream(cluster, streams.TELEMETRY), count=1):
            at = _at(data)
            when = f"{dt.datetime.fromtimestamp(at):%Y-%m-%d %H:%M:%S}" if at else "?"
            tokens = subject.split(".")  # baton.<c>.telemetry.<kind>.<node>
            what = f"{tokens[3]} from {tokens[4]}" if len(tokens) > 4 else subject
            view.seen["agent"] = f"last report {when} ({what})"
    said = []
    for name in ACTUATOR_CONSUMERS:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            info = await js.consumer_info(stream(cluster, streams.ACTIONS), name)
            last = info.delivered.last_active if info.delivered else None
            when = f", last delivery {last.astimezone():%Y-%m-%d %H:%M:%S}" if last else ""
            said.append(f"consumer {name!r}: {info.num_pending or 0} actions waiting, "
                        f"{info.num_ack_pending or 0} in flight{when}")  # fmt: skip
    if said:
        view.seen["actuator"] = "; ".join(said)


def _at(data: bytes) -> float:
    with contextlib.suppress(msgspec.DecodeError):
        payload = msgspec.json.decode(data)
        if isinstance(payload, dict) and isinstance(payload.get("at"), int | float):
            return float(payload["at"])
    return 0.0


async def last_messages(nc: NATS, name: str, *, count: int) -> list[tuple[str, bytes]]:
    """The last ``count`` messages of a stream, oldest first (direct reads by sequence)."""
    js = nc.jetstream()
    info = await js.stream_info(name)
    first, last = info.state.first_seq, info.state.last_seq
    found = []
    for seq in range(max(first, last - count + 1), last + 1) if last else ():
        with contextlib.suppress(nats.js.errors.NotFoundError):  # deleted since
            raw = await js.get_msg(name, seq)
            found.append((raw.subject or "", raw.data or b""))
    return found


async def wait_for_streams(nc: NATS, *, cluster: str, until: float) -> None:
    """Until the first service has declared Baton's streams (or ``until``, a loop time)."""
    js = nc.jetstream()
    loop = asyncio.get_running_loop()
    while True:
        try:
            await js.stream_info(stream(cluster, streams.HISTORY))
            return
        except nats.js.errors.NotFoundError:
            if loop.time() >= until:
                raise NoBaton(f"no Baton streams for cluster {cluster!r} on this bus") from None
            await asyncio.sleep(0.2)


async def follow(nc: NATS, view: View, *, cluster: str) -> None:
    """Live from now on (after ``load``, which this calls): the view keeps up until the
    connection closes."""

    allocation = allocation_subject(cluster)

    async def on_any(msg: Msg) -> None:
        domain = msg.subject.split(".")[2]
        if domain not in COUNTED:  # those are counted by their streams' sequence
            view.counts[domain] += 1
        if domain == subjects.ACTION:  # counted by its stream; only these are read
            kind = msg.subject.split(".")[3]
            with contextlib.suppress(Undecodable):
                view.record(decode(msg.data, CreatePod if kind == CREATE else SetTeamStatus))
            return
        if domain in (subjects.RUNNER, subjects.ADMISSION) or msg.subject == allocation:
            with contextlib.suppress(Undecodable):
                view.record(decode(msg.data, Recorded))
        elif domain == subjects.HEALTH:
            with contextlib.suppress(Undecodable):
                view.record(decode(msg.data, Health))
        elif domain == subjects.RESULT and msg.subject.split(".")[3] == CREATE:
            with contextlib.suppress(Undecodable):
                view.record(decode(msg.data, ActionResult))
        if worth_a_line(msg.subject, msg.data):
            view.note(describe(msg.subject, msg.data), decision=domain in DECIDING)

    async def on_object(msg: Msg) -> None:
        view.counts[subjects.K8S] += 1
        with contextlib.suppress(Undecodable):
            view.apply(decode(msg.data, K8sEvent))

    # first: no gap after load. Not the whole bus (``COUNTED`` is counted by its streams).
    followed = [subjects.wildcard(cluster, d, ">") for d in (*DECIDING, subjects.RUNNER,
                                                            subjects.RESULT)]  # fmt: skip
    followed += [subjects.wildcard(cluster, subjects.ACTION, kind, ">") for kind in (CREATE, TEAM)]
    followed.append(allocation)
    for subject in followed:
        await nc.subscribe(subject, cb=on_any)
    await load(nc, view, cluster=cluster, objects=False)
    await nc.jetstream().subscribe(
        subjects.wildcard(cluster, subjects.K8S, ">"),
        cb=on_object,
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,  # current state, then every change
        stream=stream(cluster, streams.K8S),
    )


async def count_streams(nc: NATS, view: View, *, cluster: str) -> None:
    """Bring the counts of the ``COUNTED`` domains to their streams' last sequence."""
    js = nc.jetstream()
    for domain, what in COUNTED.items():
        with contextlib.suppress(nats.errors.Error):
            seq = (await js.stream_info(stream(cluster, what))).state.last_seq
            view.counted.setdefault(domain, seq)  # the first sight is no rate
            view.counts[domain] = seq


def worth_a_line(subject: str, data: bytes) -> bool:
    """The recent lines: the services' decisions, and what the actuator could not do."""
    domain = subject.split(".")[2]
    if domain in DECIDING:
        return True
    if domain != subjects.RESULT:
        return False  # actions: their results say what came of them
    try:
        payload = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return True  # not ours to judge: show it
    if not isinstance(payload, dict):
        return True
    if subject.split(".")[3] == EVENT and payload.get("outcome") == "dropped":
        return False  # an Event over the actuator's budget: the budget doing its job
    return payload.get("outcome") in NOTABLE


def describe(subject: str, data: bytes) -> str:
    """One line for a decision, action or result: when, its type, what it is about and
    why, in full (the screen wraps it; nothing is cut)."""
    try:
        payload = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return f"{subject} (not JSON)"
    if not isinstance(payload, dict):
        return f"{subject} {payload!r}"
    kind = payload.get("type", "?")
    about = "/".join(subject.split(".")[4:])
    at = payload.get("at")
    when = dt.datetime.fromtimestamp(at) if isinstance(at, int | float) else dt.datetime.now()
    extra = "".join(
        f" {key}={payload[key]}" for key in ("outcome", "reason", "error") if payload.get(key)
    )
    if isinstance(payload.get("serving"), bool):  # admission's webhook, at its start
        port = f" on :{payload['port']}" if payload.get("port") else ""
        about = ("serving" if payload["serving"] else "OFF") + port
    return f"{when:%H:%M:%S} {kind:<28} {about}{extra}"
