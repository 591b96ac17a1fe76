"""The node agent's decisions: readings in, telemetry out, ``step(state, reading, now)``.

Pure: no I/O, no clock (``now`` comes in), the state is never changed in place.

| reading | what the core does |
|---|---|
| ``Gpus``, ``Host``, ``Pods`` | keep it; publish the GPU / node report if it changed |
| ``XidSeen`` | publish an ``XidEvent`` once: drop a ``seq`` at or below the source's mark, and |
|  | one the other source already published for the same GPU and Xid within the merge window |
| ``Backend`` | note the backend (un)available; the next heartbeat says so |
| ``Tick`` | heartbeat every ``heartbeat_s``; republish a report unchanged for ``refresh_s`` |
| ``Power`` | simulated nodes: off publishes nothing until on; on is a fresh agent |

Zombie GPU memory: memory of processes whose pod (the process's own, else the pod that
holds the GPU) is not among the running pods; unknown (None) without a ``Pods`` reading.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from baton.proto import telemetry as t
from baton.services.agent.core import changes
from baton.services.agent.core.readings import (
    AnyReading,
    Backend,
    Gpus,
    GpuSample,
    Host,
    Pods,
    Power,
    Tick,
    XidSeen,
)


class Config(msgspec.Struct, frozen=True, kw_only=True):
    node: str
    version: str = ""
    backends: tuple[str, ...] = ()  # the backends the agent runs
    heartbeat_s: float = 60.0  # the keep-alive: health's liveness is derived from it
    refresh_s: float = 300.0  # republish an unchanged report this often
    temperature_deadband_c: float = 3.0
    disk_deadband: float = 0.01
    xid_merge_s: float = 5.0  # one Xid seen by NVML and the kernel log is published once


class Publish(msgspec.Struct, frozen=True, kw_only=True):
    event: t.AnyTelemetry
    msg_id: str


class SeenXid(msgspec.Struct, frozen=True):
    at: float
    gpu: str  # bus id, or "#<index>"
    xid: int
    source: str


class State(msgspec.Struct, frozen=True, kw_only=True):
    config: Config
    started: float
    up: bool = True
    gpus: Gpus | None = None
    host: Host | None = None
    pods: Pods | None = None
    backends: dict[str, str] = {}  # name -> "" (in use) or why it is unavailable
    sent_gpu: t.GpuReport | None = None
    sent_gpu_at: float = 0.0
    sent_node: t.NodeReport | None = None
    sent_node_at: float = 0.0
    marks: dict[str, int] = {}  # Xid source -> highest seq seen
    recent: tuple[SeenXid, ...] = ()  # Xids published within the merge window
    beats: int = 0
    beat_at: float | None = None


Outputs = list[Publish]


def initial(config: Config, *, started: float) -> State:
    return State(config=config, started=started, backends=dict.fromkeys(config.backends, ""))


def step(state: State, reading: AnyReading, now: float) -> tuple[State, Outputs]:
    if not state.up and not isinstance(reading, Power):
        return state, []  # a powered-off node says nothing
    handler: Callable[[State, Any, float], tuple[State, Outputs]] = HANDLERS[type(reading)]
    return handler(state, reading, now)


def _on_gpus(state: State, reading: Gpus, now: float) -> tuple[State, Outputs]:
    old = state.gpus
    same = old is not None and (old.gpus, old.expected, old.found) == (
        reading.gpus, reading.expected, reading.found
    )  # fmt: skip
    return _kept(msgspec.structs.replace(state, gpus=reading), now, same=same)


def _on_host(state: State, reading: Host, now: float) -> tuple[State, Outputs]:
    old = state.host
    same = old is not None and (old.disks, old.nics) == (reading.disks, reading.nics)
    return _kept(msgspec.structs.replace(state, host=reading), now, same=same)


def _on_pods(state: State, reading: Pods, now: float) -> tuple[State, Outputs]:
    old = state.pods
    same = old is not None and (old.running, old.gpu_owner) == (reading.running, reading.gpu_owner)
    return _kept(msgspec.structs.replace(state, pods=reading), now, same=same)


def _kept(state: State, now: float, *, same: bool) -> tuple[State, Outputs]:
    """A reading equal to the last one cannot change a report: skip building them."""
    return (state, []) if same else _report(state, now)


def _on_backend(state: State, reading: Backend, now: float) -> tuple[State, Outputs]:
    backends = {**state.backends, reading.name: reading.reason}
    return msgspec.structs.replace(state, backends=backends), []


def _on_power(state: State, reading: Power, now: float) -> tuple[State, Outputs]:
    if reading.up == state.up:
        return state, []
    if reading.up:
        return initial(state.config, started=now), []
    return msgspec.structs.replace(state, up=False), []


def _on_tick(state: State, reading: Tick, now: float) -> tuple[State, Outputs]:
    outputs: Outputs = []
    if state.beat_at is None or now - state.beat_at >= state.config.heartbeat_s:
        state = msgspec.structs.replace(state, beats=state.beats + 1, beat_at=now)
        beat = heartbeat(state, now)
        outputs.append(Publish(event=beat, msg_id=t.msg_id(beat, sent=now)))
    if _refresh_due(state, now):
        state, reports = _report(state, now)
        outputs += reports
    return state, outputs


def _on_xid(state: State, reading: XidSeen, now: float) -> tuple[State, Outputs]:
    if reading.seq <= state.marks.get(reading.source, -1):
        return state, []  # seen already (a relist, a repeated read)
    marks = {**state.marks, reading.source: reading.seq}
    gpu = reading.gpu if reading.gpu >= 0 else gpu_index(state.gpus, reading.bus_id)
    bus_id = reading.bus_id or bus_of(state.gpus, gpu)
    seen = SeenXid(reading.at, bus_id or f"#{gpu}", reading.xid, reading.source)
    window = state.config.xid_merge_s
    recent = tuple(x for x in state.recent if abs(reading.at - x.at) < window)
    state = msgspec.structs.replace(state, marks=marks, recent=recent)
    if any((x.gpu, x.xid) == (seen.gpu, seen.xid) and x.source != seen.source for x in recent):
        return state, []  # the other source published this one
    event = t.XidEvent(
        node=state.config.node, at=reading.at, xid=reading.xid, source=reading.source,
        gpu=gpu, bus_id=bus_id, text=reading.text, pid=reading.pid, process=reading.process,
        seq=reading.seq, gpu_instance=reading.gpu_instance,
    )  # fmt: skip
    state = msgspec.structs.replace(state, recent=(*recent, seen))
    return state, [Publish(event=event, msg_id=t.msg_id(event, sent=now))]


HANDLERS: dict[type, Callable[[State, Any, float], tuple[State, Outputs]]] = {
    Gpus: _on_gpus,
    Host: _on_host,
    Pods: _on_pods,
    XidSeen: _on_xid,
    Backend: _on_backend,
    Power: _on_power,
    Tick: _on_tick,
}


def _report(state: State, now: float) -> tuple[State, Outputs]:
    """Publish each report that changed, or that has not been published for ``refresh_s``."""
    config = state.config
    bands = changes.deadbands(
        temperature_c=config.temperature_deadband_c, disk_ratio=config.disk_deadband
    )
    outputs: Outputs = []
    gpu = gpu_report(state)
    if gpu is not None and _due(state.sent_gpu, gpu, state.sent_gpu_at, now, config, bands):
        state = msgspec.structs.replace(state, sent_gpu=gpu, sent_gpu_at=now)
        outputs.append(Publish(event=gpu, msg_id=t.msg_id(gpu, sent=now)))
    node = node_report(state)
    if node is not None and _due(state.sent_node, node, state.sent_node_at, now, config, bands):
        state = msgspec.structs.replace(state, sent_node=node, sent_node_at=now)
        outputs.append(Publish(event=node, msg_id=t.msg_id(node, sent=now)))
    return state, outputs


def _refresh_due(state: State, now: float) -> bool:
    every = state.config.refresh_s
    return (state.sent_gpu is not None and now - state.sent_gpu_at >= every) or (
        state.sent_node is not None and now - state.sent_node_at >= every
    )


def _due(
    sent: Any, report: Any, sent_at: float, now: float, config: Config, bands: dict[str, float]
) -> bool:
    if sent is None or now - sent_at >= config.refresh_s:
        return True
    return changes.differs(sent, report, bands)


def gpu_report(state: State) -> t.GpuReport | None:
    """None until the GPUs were read, and while they cannot be (no NVML: ``found`` None)."""
    if state.gpus is None or state.gpus.found is None:
        return None
    gpus = tuple(
        msgspec.structs.replace(s.status, zombie_mib=zombie_mib(s, state.pods))
        for s in state.gpus.gpus
    )
    return t.GpuReport(node=state.config.node, at=state.gpus.at, gpus=gpus)


def node_report(state: State) -> t.NodeReport | None:
    host, gpus = state.host, state.gpus
    if host is None and gpus is None:
        return None
    return t.NodeReport(
        node=state.config.node,
        at=max(r.at for r in (host, gpus) if r is not None),
        disks=host.disks if host else (),
        nics=host.nics if host else (),
        gpus_expected=gpus.expected if gpus else None,
        gpus_found=gpus.found if gpus else None,
    )


def heartbeat(state: State, now: float) -> t.Heartbeat:
    return t.Heartbeat(
        node=state.config.node,
        at=now,
        seq=state.beats,
        started=state.started,
        version=state.config.version,
        backends=tuple(sorted(n for n, why in state.backends.items() if not why)),
        unavailable={n: why for n, why in sorted(state.backends.items()) if why},
        every_s=state.config.heartbeat_s,
    )


def zombie_mib(sample: GpuSample, pods: Pods | None) -> int | None:
    """Memory held on this GPU by processes of no running pod; None without pods."""
    if pods is None:
        return None
    owner = pods.gpu_owner.get(sample.status.uuid, "")
    return sum(p.used_mib for p in sample.processes if (p.pod or owner) not in pods.running)


def gpu_index(gpus: Gpus | None, bus_id: str) -> int:
    for sample in gpus.gpus if gpus and bus_id else ():
        if sample.status.bus_id == bus_id:
            return sample.status.index
    return -1


def bus_of(gpus: Gpus | None, index: int) -> str:
    for sample in gpus.gpus if gpus and index >= 0 else ():
        if sample.status.index == index:
            return sample.status.bus_id
    return ""


def publishes(outputs: Sequence[Publish]) -> list[t.AnyTelemetry]:
    """The events of ``outputs`` (for tests and ``--once``)."""
    return [o.event for o in outputs]
