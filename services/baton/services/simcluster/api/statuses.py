"""Pod status as a kubelet writes it: admission shortfall, Running, Succeeded, Failed."""

from __future__ import annotations

from typing import Any

from baton.services.simcluster.clock import timestamp

Obj = dict[str, Any]


def shortfall(
    *, allocatable: dict[str, int], used: dict[str, int], pods: int, requests: dict[str, int]
) -> tuple[str, int, int, int] | None:
    """The first resource the node lacks: (name, requested, used, allocatable)."""
    wanted = {**requests, "pods": 1}
    for name, amount in wanted.items():
        if amount <= 0:
            continue
        capacity = allocatable.get(name, 0)
        in_use = pods if name == "pods" else used.get(name, 0)
        if in_use + amount > capacity:
            return name, amount, in_use, capacity
    return None


def pod_ip(n: int) -> str:
    return f"10.{128 + ((n >> 16) & 127)}.{(n >> 8) & 255}.{n & 255}"


def running(pod: Obj, ip: str, host_ip: str) -> None:
    now = timestamp()
    status = pod.setdefault("status", {})
    status.update(
        phase="Running",
        startTime=status.get("startTime", now),
        podIP=ip,
        podIPs=[{"ip": ip}],
        hostIP=host_ip,
    )
    conditions(status, now, ready="True", reason="")
    status["containerStatuses"] = [
        {
            "name": c.get("name", ""),
            "image": c.get("image", ""),
            "imageID": c.get("image", ""),
            "containerID": f"containerd://sim-{pod['metadata'].get('uid', '')[:8]}-{i}",
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": now}},
        }
        for i, c in enumerate(pod.get("spec", {}).get("containers") or ())
    ]


def succeeded(pod: Obj) -> None:
    now = timestamp()
    status = pod.setdefault("status", {})
    status["phase"] = "Succeeded"
    conditions(status, now, ready="False", reason="PodCompleted")
    for c in status.get("containerStatuses") or ():
        started = (c.get("state") or {}).get("running", {}).get("startedAt", now)
        c.update(
            ready=False,
            started=False,
            state={
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": started,
                    "finishedAt": now,
                }
            },
        )


def failed(pod: Obj, message: str, *, exit_code: int = 1) -> None:
    """The containers exited with ``exit_code``; ``message`` is their termination message."""
    now = timestamp()
    status = pod.setdefault("status", {})
    status.update(phase="Failed", message=message)
    conditions(status, now, ready="False", reason="PodFailed")
    for c in status.get("containerStatuses") or ():
        started = (c.get("state") or {}).get("running", {}).get("startedAt", now)
        terminated = {
            "exitCode": exit_code,
            "reason": "Error",
            "message": message,
            "startedAt": started,
            "finishedAt": now,
        }
        c.update(ready=False, started=False, state={"terminated": terminated})


def conditions(status: Obj, now: str, *, ready: str, reason: str) -> None:
    wanted = {
        "PodScheduled": "True",
        "Initialized": "True",
        "ContainersReady": ready,
        "Ready": ready,
    }
    current = {c.get("type"): c for c in status.get("conditions") or ()}
    conditions = [c for t, c in current.items() if t not in wanted]
    for type_, value in wanted.items():
        old = current.get(type_) or {}
        since = old.get("lastTransitionTime", now) if old.get("status") == value else now
        entry = {"type": type_, "status": value, "lastProbeTime": None, "lastTransitionTime": since}
        if reason and value == "False":
            entry["reason"] = reason
        conditions.append(entry)
    status["conditions"] = conditions
