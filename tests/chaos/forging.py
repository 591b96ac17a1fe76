"""The chaos run's attacks on trust: forged actions and a replica whose clock runs ahead.

- Forged actions, published with the run's (admin's) rights, each on a subject a
  producer may use: a ``create-pod`` body on gang's ``bind-gang`` subject (a pod that
  tolerates everything, pinned to a GPU node), and admission's ``taint`` at epoch 0 and
  at an epoch ahead of its lease. The actuator must refuse each naming why; the check
  also finds neither the pod nor the taint in the API.
- A skewed replica: a lease contender for admission whose wall clock runs
  ``SKEW_TTLS`` TTLs ahead (``Lease(clock=...)``, the real lease code). Beside a
  healthy leader it must not take the lease; once it holds it (both real replicas
  paused) and dies, a real replica must take over within a few TTLs, not ``SKEW_TTLS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass
from typing import Any

import msgspec

from baton.libs.bus import Bus
from baton.libs.runner.leasing import Held, Lease, leases_bucket
from baton.proto.actions import AnyAction, CreatePod, PodTemplate, SetTaint
from baton.proto.k8s import Taint, Toleration

FORGED_TAINT = "chaos.baton.io/forged"
FORGED_POD = "chaos-forged"
SKEW_TTLS = 15  # how far ahead the skewed replica's clock runs, in TTLs
TAKEOVER_TTLS = 6  # a takeover after the skewed leader dies: at most this many TTLs


@dataclass(frozen=True)
class Forgery:
    subject: str
    body: AnyAction
    named: str  # what the actuator's refusal must say


def forgeries(cluster: str, *, node: str, namespace: str, epochs: dict[str, int]) -> list[Forgery]:
    base = f"baton.{cluster}.action"
    pod = PodTemplate(namespace=namespace, name=FORGED_POD, node_name=node,
                      tolerations=(Toleration(operator="Exists"),))  # fmt: skip
    evil = CreatePod(id="chaos-forged-kind", by="gang", at=time.time(),
                     epoch=epochs.get("gang", 0), priority="health", pod=pod)  # fmt: skip
    taint = Taint(key=FORGED_TAINT, effect="NoSchedule")

    def tainting(id_: str, epoch: int) -> SetTaint:
        return SetTaint(id=id_, by="admission", at=time.time(), epoch=epoch, node=node,
                        taint=taint)  # fmt: skip

    ahead = epochs.get("admission", 0) + 1000
    return [
        Forgery(f"{base}.bind-gang.gang.{namespace}.{FORGED_POD}", evil,
                "the body is create-pod, the subject says bind-gang"),
        Forgery(f"{base}.taint.admission.{node}", tainting("chaos-epoch-zero", 0),
                "carries no lease epoch"),
        Forgery(f"{base}.taint.admission.{node}", tainting("chaos-epoch-ahead", ahead),
                "is ahead of its lease's"),
    ]  # fmt: skip


async def forge(bus: Bus, forged: list[Forgery]) -> None:
    for each in forged:
        await bus.publish(each.subject, each.body, msg_id=each.body.id)


def refused(forged: list[Forgery], results: dict[str, Any], pods: list[Any],
            nodes: list[Any]) -> tuple[bool, str]:  # fmt: skip
    """Every forgery answered ``failed`` naming why, and none of them in the API."""
    wrong = []
    for each in forged:
        got = results.get(each.body.id)
        if got is None or got.outcome != "failed" or each.named not in got.error:
            wrong.append(f"{each.body.id}: {got.outcome + ' ' + got.error if got else 'no result'}")
    made = [p.metadata.name for p in pods if p.metadata.name == FORGED_POD]
    tainted = [n.metadata.name for n in nodes
               if any(t.key == FORGED_TAINT for t in (n.spec.taints or []))]  # fmt: skip
    ok = not wrong and not made and not tainted
    return ok, f"{len(forged)} forged; wrong answers {wrong}; pod made {made}; tainted {tainted}"


async def holder(bus: Bus, service: str) -> tuple[int, Held | None]:
    """The lease key's revision and value (0, None when not there)."""
    with contextlib.suppress(Exception):
        kv = await leases_bucket(bus)
        entry = await kv.get(service)
        if entry.value:
            return entry.revision or 0, msgspec.json.decode(entry.value, type=Held)
    return 0, None


async def skewed_replica(
    bus: Bus, *, service: str, ttl: float, pids: list[int], events: list[str], now: float
) -> tuple[bool, float | None]:
    """(whether it left a healthy leader alone, the takeover after it died in seconds;
    None: none within ``SKEW_TTLS`` TTLs). ``pids``: the service's real replicas."""
    skewed = Lease(bus, service, ttl=ttl, clock=lambda: time.time() + SKEW_TTLS * ttl)
    task = asyncio.create_task(skewed.run(), name="skewed-lease")
    try:
        revision, _ = await holder(bus, service)
        deadline = time.monotonic() + 10 * ttl
        moves = 0
        while moves < 9 and time.monotonic() < deadline:  # 3 TTLs of the leader renewing
            await asyncio.sleep(ttl / 6)
            now_rev, _ = await holder(bus, service)
            moves += now_rev != revision
            revision = now_rev
            if skewed.leader:
                break
        left_alone = not skewed.leader and moves >= 9
        for pid in pids:  # both real replicas stop: the skewed one takes the lease
            os.kill(pid, signal.SIGSTOP)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10 * ttl):
                    while not skewed.leader:
                        await skewed.changed.wait()
                        skewed.changed.clear()
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        took = None
        if skewed.leader:
            await asyncio.sleep(ttl / 3)  # it renews once with its skewed clock
            task.cancel()  # it dies without giving the lease up
            await asyncio.gather(task, return_exceptions=True)
            took = await _taken_from(bus, service, skewed.holder, within=SKEW_TTLS * ttl)
        events.append(f"{now:6.1f} s: skewed {service} replica ({SKEW_TTLS} TTLs ahead): "
                      f"{'left' if left_alone else 'TOOK'} the healthy lease; led: "
                      f"{took is not None}, takeover after it died {took} s")  # fmt: skip
        return left_alone, took
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _taken_from(bus: Bus, service: str, holder_: str, *, within: float) -> float | None:
    began = time.monotonic()
    while time.monotonic() - began < within:
        _, held = await holder(bus, service)
        if held is not None and held.holder != holder_ and held.epoch:
            return round(time.monotonic() - began, 2)
        await asyncio.sleep(0.05)
    return None
