"""What ``baton up`` shows: a view of the cluster and the services, built from bus events.

Pure: events go in (``apply``), text comes out (``render``). The view reads the
bridge's events, so the status display costs the API server nothing.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import TypeVar

from proto.k8s import (
    GPU,
    SCHEDULER_NAME,
    K8sEvent,
    Node,
    NodeEvent,
    Pod,
    PodEvent,
    PodGroup,
    PodGroupEvent,
)

TERMINAL = {"Succeeded", "Failed"}
T = TypeVar("T")


@dataclass
class ServiceHealth:
    name: str
    alive: bool
    ready: bool
    detail: str = ""


@dataclass
class View:
    nodes: dict[str, Node] = field(default_factory=dict)
    pods: dict[str, Pod] = field(default_factory=dict)
    groups: dict[str, PodGroup] = field(default_factory=dict)
    recent: deque[str] = field(default_factory=lambda: deque(maxlen=12))
    counts: Counter[str] = field(default_factory=Counter)  # bus messages by domain
    counted: Counter[str] = field(default_factory=Counter)  # counts at the last rate update
    rates: dict[str, float] = field(default_factory=dict)  # messages/s by domain

    def apply(self, event: K8sEvent) -> None:
        match event:
            case NodeEvent(node=node):
                _put(self.nodes, node.name, node, event.op)
            case PodEvent(pod=pod):
                _put(self.pods, pod.key, pod, event.op)
            case PodGroupEvent(pod_group=group):
                _put(self.groups, group.key, group, event.op)

    def note(self, line: str) -> None:
        self.recent.append(line)


def _put(table: dict[str, T], key: str, value: T, op: str) -> None:
    if op == "delete":
        table.pop(key, None)
    else:
        table[key] = value


def gpu_usage(view: View) -> tuple[int, int]:
    total = sum(n.allocatable.get(GPU, 0) for n in view.nodes.values())
    used = sum(
        p.requests.get(GPU, 0)
        for p in view.pods.values()
        if p.node_name and p.phase not in TERMINAL and not p.terminating
    )
    return used, total


def gang_states(view: View) -> Counter[str]:
    """Each gang (PodGroup, or a lone Baton pod) as running, waiting or done, by its pods."""
    members: dict[str, list[Pod]] = {key: [] for key in view.groups}
    for pod in view.pods.values():
        if pod.gang:
            members.setdefault(f"{pod.namespace}/{pod.gang}", []).append(pod)
        elif pod.scheduler_name == SCHEDULER_NAME:
            members[pod.key] = [pod]
    states: Counter[str] = Counter()
    for pods in members.values():
        live = [p for p in pods if p.phase not in TERMINAL and not p.terminating]
        if pods and not live:
            states["done"] += 1
        elif any(p.node_name for p in live):
            states["running"] += 1
        else:
            states["waiting"] += 1
    return states


def render(view: View, services: list[ServiceHealth], *, elapsed: float) -> str:
    ready = sum(1 for n in view.nodes.values() if n.ready and not n.unschedulable)
    tainted = sum(1 for n in view.nodes.values() if n.taints)
    used, total = gpu_usage(view)
    phases: Counter[str] = Counter(p.phase for p in view.pods.values())
    pending = [p for p in view.pods.values() if p.phase == "Pending"]
    unbound = sum(1 for p in pending if not p.node_name)
    share = f"{100 * used / total:.0f}%" if total else "-"
    gangs = gang_states(view)
    lines = [
        f"baton up  {elapsed:6.0f}s",
        f"nodes     {len(view.nodes)} ({ready} ready, {tainted} tainted)",
        f"gpus      {used}/{total} allocated ({share})",
        "pods      " + _phases(phases) + f"  (unbound {unbound})",
        "gangs     " + "  ".join(f"{k} {gangs.get(k, 0)}" for k in ("waiting", "running", "done")),
        "bus       " + _rates(view.rates),
        "services  " + "  ".join(_health(s) for s in services),
        "recent:",
        *(f"  {line}" for line in view.recent),
    ]
    return "\n".join(lines)


def _phases(phases: Counter[str]) -> str:
    order = ["Pending", "Running", "Succeeded", "Failed"]
    return "  ".join(f"{phase.lower()} {phases.get(phase, 0)}" for phase in order)


def _rates(rates: dict[str, float]) -> str:
    if not rates:
        return "quiet"
    busiest = sorted(rates.items(), key=lambda kv: -kv[1])
    return "  ".join(f"{domain} {rate:.0f}/s" for domain, rate in busiest)


def _health(service: ServiceHealth) -> str:
    mark = "ok" if service.alive and service.ready else ("starting" if service.alive else "DOWN")
    return f"{service.name}:{mark}"
