"""Every node's kubelet: bound pods start, run for their duration, finish, terminate.

Follows the store's changes (a listener). When a pod is first seen bound
(``spec.nodeName``) the node's kubelet admits it against its allocatable resources,
as the kubelet does: if it does not fit, the pod fails with reason ``OutOf<resource>``
(``OutOfnvidia.com/gpu``); otherwise it goes Running after ``pod_start_s``, and
Succeeded after the ``sim.baton.io/duration-seconds`` annotation (none: runs until
deleted). A pod with a ``deletionTimestamp`` is removed after ``termination_s`` (or its
grace period, if shorter). Pods of a node that is deleted are removed, as the pod
garbage collector does; pods of a NotReady node keep running until someone evicts them.
A running pod is on its node's hardware (listed, one process on each GPU it holds).
A preflight pod (label ``baton.io/preflight: "true"``) runs ``preflight_s`` and ends
Succeeded if the node's hardware is healthy, Failed with the problems named if not.
Timers are event-loop callbacks, not tasks, so 100k pods cost little.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import structlog

from baton.services.simcluster.api import statuses
from baton.services.simcluster.api.store import ApiError, Store
from baton.services.simcluster.clock import Clock
from baton.services.simcluster.world import dra, hardware, quantities
from baton.services.simcluster.world.hardware_feed import HardwareFeed
from baton.services.simcluster.world.spec import Delays
from baton.services.simcluster.world.workload import DURATION_ANNOTATION

log = structlog.get_logger("simcluster.kubelet")
TERMINAL = ("Succeeded", "Failed")
PREFLIGHT_LABEL = "baton.io/preflight"
EXIT_CODE_ANNOTATION = "sim.baton.io/exit-code"  # how the pod's containers end (default 0)
GPU = "nvidia.com/gpu"
Obj = dict[str, Any]


@dataclass(slots=True)
class NodeBook:
    allocatable: dict[str, int]
    ip: str = ""
    used: dict[str, int] = field(default_factory=dict)
    pods: set[str] = field(default_factory=set)


@dataclass(slots=True)
class PodTrack:
    node: str
    requests: dict[str, int]
    timer: asyncio.TimerHandle | None = None
    done: bool = False
    terminating: bool = False
    claims: bool = False  # spec.resourceClaims: starts once they are allocated and reserved


class Kubelets:
    def __init__(
        self, store: Store, *, clock: Clock, delays: Delays, hardware: HardwareFeed | None = None
    ) -> None:
        self._store = store
        self._clock = clock
        self._delays = delays
        self._hardware = hardware or HardwareFeed()
        self.nodes: dict[str, NodeBook] = {}
        self._pods: dict[str, PodTrack] = {}
        self._ips = 0
        self._waiting: dict[str, set[str]] = {}  # node not (yet) known -> pods bound to it
        self.on_claims: dict[str, str] = {}  # pod -> what its ResourceClaims still lack
        self._claim = dra.claim_reader(store)

    # following the store

    def on_change(self, event: str, res: str, obj: Obj) -> None:
        if res == "pods":
            self._on_pod(event, obj)
        elif res == "nodes":
            self._on_node(event, obj)
        elif res == "resourceclaims" and self.on_claims:
            for key in list(self.on_claims):
                self._start(key)

    def _on_node(self, event: str, node: Obj) -> None:
        name = node["metadata"]["name"]
        if event == "DELETED":
            book = self.nodes.pop(name, None)
            for key in sorted(book.pods if book else ()):
                namespace, _, pod = key.partition("/")
                self._remove(namespace, pod)  # pod GC: orphaned pods go
            return
        status = node.get("status") or {}
        allocatable = quantities.parse_all(status.get("allocatable"))
        book = self.nodes.get(name)
        if book is None:
            ip = next(
                (
                    a["address"]
                    for a in status.get("addresses") or ()
                    if a.get("type") == "InternalIP"
                ),
                "",
            )
            self.nodes[name] = NodeBook(allocatable=allocatable, ip=ip)
            for key in sorted(self._waiting.pop(name, ())):
                self._admit_later(key, name)
        else:
            book.allocatable = allocatable

    def _on_pod(self, event: str, pod: Obj) -> None:
        meta = pod["metadata"]
        key = f"{meta.get('namespace', '')}/{meta['name']}"
        track = self._pods.get(key)
        if event == "DELETED":
            if track is not None:
                self._forget(key, track)
            return
        if meta.get("deletionTimestamp"):
            self._terminate(key, pod, track)
            return
        node = (pod.get("spec") or {}).get("nodeName")
        if track is None and node:
            self._admit(key, pod, node)
        elif key in self.on_claims:  # its claim statuses may have come
            self._start(key)

    # the pod lifecycle

    def _admit(self, key: str, pod: Obj, node: str) -> None:
        book = self.nodes.get(node)
        phase = (pod.get("status") or {}).get("phase")
        if phase in TERMINAL:
            return
        if book is None:  # no kubelet there yet: the pod waits for the node to join
            self._waiting.setdefault(node, set()).add(key)
            return
        requests = quantities.pod_requests(pod)
        short = statuses.shortfall(
            allocatable=book.allocatable, used=book.used, pods=len(book.pods), requests=requests
        )
        if short is not None:
            self._pods[key] = PodTrack(node=node, requests={}, done=True)
            self._reject(pod, short, node)
            return
        claims = bool((pod.get("spec") or {}).get("resourceClaims"))
        track = PodTrack(node=node, requests=requests, claims=claims)
        self._pods[key] = track
        for name, amount in requests.items():
            book.used[name] = book.used.get(name, 0) + amount
        book.pods.add(key)
        track.timer = self._clock.call_later(self._delays.pod_start_s, self._start, key)

    def _admit_later(self, key: str, node: str) -> None:
        namespace, _, name = key.partition("/")
        try:
            pod = self._store.get("pods", namespace, name)
        except ApiError:
            return
        bound_here = (pod.get("spec") or {}).get("nodeName") == node
        if bound_here and key not in self._pods and not pod["metadata"].get("deletionTimestamp"):
            self._admit(key, pod, node)

    def _start(self, key: str) -> None:
        track = self._pods.get(key)
        if track is None or track.done or track.terminating:
            return
        track.timer = None
        namespace, _, name = key.partition("/")
        if track.claims and self._lacks_claims(key, namespace, name, track.node):
            return
        book = self.nodes.get(track.node)
        self._ips += 1
        ip, host_ip = statuses.pod_ip(self._ips), book.ip if book else ""
        try:
            pod = self._store.mutate(
                "pods", namespace, name, lambda p: statuses.running(p, ip, host_ip)
            )
        except ApiError:
            return
        gpus = track.requests.get(GPU, 0)
        if not gpus and track.claims:  # its GPUs came through DRA claims: those given
            on, mig = dra.devices_allocated(pod, self._claim)
            self._hardware.pod_started(track.node, key, gpus=len(on), on=on, mig=mig)
        else:
            self._hardware.pod_started(track.node, key, gpus=gpus)
        preflight = (pod["metadata"].get("labels") or {}).get(PREFLIGHT_LABEL) == "true"
        duration = (pod["metadata"].get("annotations") or {}).get(DURATION_ANNOTATION)
        if duration is None and not preflight:
            return
        try:
            seconds = self._delays.preflight_s if duration is None else float(duration)
        except ValueError:
            log.warning("bad duration annotation", pod=key, value=duration)
            return
        done = self._preflight_done if preflight else self._finish
        track.timer = self._clock.call_later(seconds, done, key)

    def _lacks_claims(self, key: str, namespace: str, name: str, node: str) -> bool:
        """Whether the pod waits for its ResourceClaims (noted in ``on_claims``), as the
        kubelet's DRA manager keeps it from starting until they are prepared."""
        try:
            pod = self._store.get("pods", namespace, name)
        except ApiError:
            self.on_claims.pop(key, None)
            return True
        lacking = dra.waiting_on(pod, node, self._claim)
        if lacking:
            self.on_claims[key] = lacking
        else:
            self.on_claims.pop(key, None)
        return bool(lacking)

    def _preflight_done(self, key: str) -> None:
        """A preflight check ends: Succeeded on healthy hardware, else Failed saying why."""
        track = self._pods.get(key)
        if track is None or track.terminating or track.node not in self._hardware:
            self._finish(key)
            return
        found = hardware.problems(self._hardware.machine(track.node))
        if not found:
            self._finish(key)
            return
        track.timer = None
        self._release(key, track)
        message = "preflight failed: " + "; ".join(found)
        log.info("preflight failed", pod=key, node=track.node, problems=len(found))
        namespace, _, name = key.partition("/")
        try:
            self._store.mutate("pods", namespace, name, lambda p: statuses.failed(p, message))
        except ApiError:
            return

    def _finish(self, key: str) -> None:
        track = self._pods.get(key)
        if track is None or track.terminating:
            return
        track.timer = None
        self._release(key, track)
        namespace, _, name = key.partition("/")
        try:
            self._store.mutate("pods", namespace, name, _ended)
        except ApiError:
            return

    def _reject(self, pod: Obj, short: tuple[str, int, int, int], node: str) -> None:
        resource, requested, used, capacity = short
        message = (
            f"Pod was rejected: Node didn't have enough resource: {resource}, "
            f"requested: {requested}, used: {used}, capacity: {capacity}"
        )
        meta = pod["metadata"]
        log.info("pod rejected", pod=meta["name"], reason=f"OutOf{resource}", node=node)

        def failed(p: Obj) -> None:
            status = p.setdefault("status", {})
            status.update(phase="Failed", reason=f"OutOf{resource}", message=message)

        try:
            self._store.mutate("pods", meta.get("namespace"), meta["name"], failed)
        except ApiError:
            return

    def _terminate(self, key: str, pod: Obj, track: PodTrack | None) -> None:
        if track is not None and track.terminating:
            return
        if track is None:
            track = PodTrack(node=(pod.get("spec") or {}).get("nodeName") or "", requests={})
            self._pods[key] = track
        if track.timer is not None:
            track.timer.cancel()
        track.terminating = True
        grace = pod["metadata"].get("deletionGracePeriodSeconds")
        delay = (
            self._delays.termination_s if grace is None else min(grace, self._delays.termination_s)
        )
        namespace, _, name = key.partition("/")
        track.timer = self._clock.call_later(delay, self._remove, namespace, name)

    def _remove(self, namespace: str, name: str) -> None:
        try:
            self._store.delete("pods", namespace, name, grace_seconds=0)
        except ApiError:
            return

    def _release(self, key: str, track: PodTrack) -> None:
        if track.done:
            return
        track.done = True
        self._hardware.pod_stopped(track.node, key)
        book = self.nodes.get(track.node)
        if book is None:
            return
        for name, amount in track.requests.items():
            book.used[name] = book.used.get(name, 0) - amount
        book.pods.discard(key)

    def _forget(self, key: str, track: PodTrack) -> None:
        if track.timer is not None:
            track.timer.cancel()
        self._release(key, track)
        del self._pods[key]
        self.on_claims.pop(key, None)

    # inspection

    def pod_count(self, node: str) -> int:
        book = self.nodes.get(node)
        return len(book.pods) if book else 0

    def used(self, node: str) -> dict[str, int]:
        book = self.nodes.get(node)
        return {k: v for k, v in (book.used if book else {}).items() if v}

    def close(self) -> None:
        for track in self._pods.values():
            if track.timer is not None:
                track.timer.cancel()


def _ended(pod: Obj) -> None:
    """Succeeded, or Failed with the exit code ``sim.baton.io/exit-code`` gives."""
    code = (pod["metadata"].get("annotations") or {}).get(EXIT_CODE_ANNOTATION, "0")
    if code.strip() in ("", "0") or not code.strip().isdigit():
        statuses.succeeded(pod)
        return
    statuses.failed(pod, f"container exited with code {code}", exit_code=int(code))
