"""Server-side printing: objects as meta.k8s.io/v1 ``Table``s, as kubectl asks for them.

kubectl sends ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io,...`` and prints
the columns the server chooses. The columns and cells follow upstream's printers
(``pkg/printers/internalversion/printers.go`` for pods and nodes; the CRDs'
``additionalPrinterColumns`` for podgroups and machinedeployments); every other
resource gets NAME and AGE. As upstream, every cell is sent, wide ones (priority 1)
included; kubectl drops those unless ``-o wide``.

Pure functions: dicts in, Table dict out, ``now`` (epoch seconds) given by the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from baton.services.simcluster.api.conversions import EVENTS_V1

Obj = dict[str, Any]
Column = dict[str, Any]
CellsOf = Callable[[Obj, float], list[Any]]

_NAME_DOC = "Name must be unique within a namespace."
_AGE_DOC = (
    "CreationTimestamp is a timestamp representing the server time when this object was created."
)
TABLE_API_VERSION = "meta.k8s.io/v1"


def _col(
    name: str, doc: str = "", *, type_: str = "string", fmt: str = "", wide: bool = False
) -> Column:
    return {
        "name": name,
        "type": type_,
        "format": fmt,
        "description": doc,
        "priority": 1 if wide else 0,
    }


NAME = _col("Name", _NAME_DOC, fmt="name")
AGE = _col("Age", _AGE_DOC)


def wants_table(accept: str) -> bool:
    """True when the Accept header asks for a meta.k8s.io Table first (as kubectl does)."""
    for part in accept.split(","):
        params = {
            k.strip(): v.strip() for k, _, v in (p.partition("=") for p in part.split(";")[1:])
        }
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
            return params.get("v", "v1") in ("v1", "v1beta1")
    return False


def human_duration(seconds: float) -> str:
    """Upstream's ``duration.HumanDuration``: 45s, 3m20s, 12m, 5h3m, 2d4h, 400d, 3y."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def age(stamp: str | None, now: float) -> str:
    """Upstream's ``translateTimestampSince``: ``<unknown>`` without a timestamp."""
    if not stamp:
        return "<unknown>"
    try:
        then = datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return "<unknown>"
    return human_duration(now - then)


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _name_age(obj: Obj, now: float) -> list[Any]:
    meta = _meta(obj)
    return [meta.get("name", ""), age(meta.get("creationTimestamp"), now)]


# --- pods -------------------------------------------------------------------------

POD_COLUMNS = (
    NAME,
    _col("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    _col("Status", "The aggregate status of the containers in this pod."),
    _col(
        "Restarts",
        "The number of times the containers in this pod have been restarted and when "
        "the last container in this pod has restarted.",
    ),
    AGE,
    _col("IP", "podIP address allocated to the pod.", wide=True),
    _col("Node", "NodeName is a request to schedule this pod onto a specific node.", wide=True),
    _col("Nominated Node", "nominatedNodeName is set when this pod preempts others.", wide=True),
    _col("Readiness Gates", "If specified, all readiness gates will be evaluated.", wide=True),
)


def _pod_status(pod: Obj) -> tuple[str, int, int, float | None]:
    """(STATUS reason, ready containers, restarts, last restart epoch) as upstream."""
    status = pod.get("status") or {}
    phase = status.get("phase", "")
    reason = status.get("reason") or phase
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    ready = restarts = 0
    last: float | None = None
    running = False
    for cs in reversed(status.get("containerStatuses") or []):
        restarts += int(cs.get("restartCount", 0))
        finished = ((cs.get("lastState") or {}).get("terminated") or {}).get("finishedAt")
        if finished:
            when = datetime.fromisoformat(finished).timestamp()
            last = when if last is None else max(last, when)
        state = cs.get("state") or {}
        waiting, terminated = state.get("waiting"), state.get("terminated")
        if waiting and waiting.get("reason"):
            reason = waiting["reason"]
        elif terminated and terminated.get("reason"):
            reason = terminated["reason"]
        elif terminated:
            signal = terminated.get("signal", 0)
            reason = f"Signal:{signal}" if signal else f"ExitCode:{terminated.get('exitCode', 0)}"
        elif cs.get("ready") and "running" in state:
            running = True
            ready += 1
    if reason == "Completed" and running:
        conds = status.get("conditions") or []
        reason = "Running" if any(c.get("type") == "Ready" for c in conds) else "NotReady"
    if _meta(pod).get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"
    return reason, ready, restarts, last


def pod_cells(pod: Obj, now: float) -> list[Any]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    reason, ready, restarts, last = _pod_status(pod)
    restarts_text = str(restarts)
    if restarts and last is not None:
        restarts_text = f"{restarts} ({human_duration(now - last)} ago)"
    ips = status.get("podIPs") or []
    ip = ips[0].get("ip", "") if ips else status.get("podIP", "")
    gates = spec.get("readinessGates") or []
    gates_text = "<none>"
    if gates:
        true = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
        gates_text = f"{sum(g.get('conditionType') in true for g in gates)}/{len(gates)}"
    return [
        _meta(pod).get("name", ""),
        f"{ready}/{len(spec.get('containers') or [])}",
        reason,
        restarts_text,
        age(_meta(pod).get("creationTimestamp"), now),
        ip or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        gates_text,
    ]


def _pod_conditions(pod: Obj) -> list[Obj] | None:
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Succeeded":
        message = "The pod has completed successfully."
    elif phase == "Failed":
        message = "The pod failed."
    else:
        return None
    return [{"type": "Completed", "status": "True", "reason": phase, "message": message}]


# --- nodes ------------------------------------------------------------------------

NODE_COLUMNS = (
    NAME,
    _col("Status", "The status of the node"),
    _col("Roles", "The roles of the node"),
    AGE,
    _col("Version", "Kubelet Version reported by the node."),
    _col("Internal-IP", "List of addresses reachable to the node.", wide=True),
    _col("External-IP", "List of addresses reachable to the node.", wide=True),
    _col("OS-Image", "OS Image reported by the node from /etc/os-release.", wide=True),
    _col("Kernel-Version", "Kernel Version reported by the node.", wide=True),
    _col("Container-Runtime", "Container runtime version reported by the node.", wide=True),
)


def node_status(node: Obj) -> str:
    """Ready / NotReady / Unknown, plus SchedulingDisabled when cordoned."""
    conds = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conds if c.get("type") == "Ready"), None)
    if ready is None:
        parts = ["Unknown"]
    else:
        parts = ["Ready" if ready.get("status") == "True" else "NotReady"]
    if (node.get("spec") or {}).get("unschedulable"):
        parts.append("SchedulingDisabled")
    return ",".join(parts)


def _roles(node: Obj) -> str:
    roles: set[str] = set()
    for key, value in (_meta(node).get("labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/") and key.split("/", 1)[1]:
            roles.add(key.split("/", 1)[1])
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    return ",".join(sorted(roles)) or "<none>"


def node_cells(node: Obj, now: float) -> list[Any]:
    status = node.get("status") or {}
    info = status.get("nodeInfo") or {}
    addresses = status.get("addresses") or []

    def address(kind: str) -> str:
        return next((a.get("address", "") for a in addresses if a.get("type") == kind), "<none>")

    return [
        _meta(node).get("name", ""),
        node_status(node),
        _roles(node),
        age(_meta(node).get("creationTimestamp"), now),
        info.get("kubeletVersion", ""),
        address("InternalIP"),
        address("ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


# --- custom resources (as their CRDs' additionalPrinterColumns) ---------------------

PODGROUP_COLUMNS = (
    NAME,
    _col("Phase", "Current phase of the PodGroup."),
    _col("MinMember", "Minimum number of pods to run together.", type_="integer"),
    _col("Age", _AGE_DOC, type_="date"),
)


def podgroup_cells(pg: Obj, now: float) -> list[Any]:
    return [
        _meta(pg).get("name", ""),
        (pg.get("status") or {}).get("phase"),
        (pg.get("spec") or {}).get("minMember"),
        age(_meta(pg).get("creationTimestamp"), now),
    ]


VOLCANO_PODGROUP_COLUMNS = (  # as deploy/crds/scheduling.volcano.sh_podgroups.yaml
    NAME,
    _col("Status", "The gang's phase."),
    _col("MinMember", "Members placed together or not at all.", type_="integer"),
    _col("Runnings", "Members running.", type_="integer"),
    _col("Age", _AGE_DOC, type_="date"),
)


def volcano_podgroup_cells(pg: Obj, now: float) -> list[Any]:
    status = pg.get("status") or {}
    return [
        _meta(pg).get("name", ""),
        status.get("phase"),
        (pg.get("spec") or {}).get("minMember"),
        status.get("running"),
        age(_meta(pg).get("creationTimestamp"), now),
    ]


MACHINEDEPLOYMENT_COLUMNS = (
    NAME,
    _col("Replicas", "Total number of machines targeted by this deployment.", type_="integer"),
    _col("Ready", "Total number of ready machines targeted by this deployment.", type_="integer"),
    _col("Age", _AGE_DOC, type_="date"),
)


def machinedeployment_cells(md: Obj, now: float) -> list[Any]:
    status = md.get("status") or {}
    return [
        _meta(md).get("name", ""),
        status.get("replicas"),
        status.get("readyReplicas"),
        age(_meta(md).get("creationTimestamp"), now),
    ]


TEAM_COLUMNS = (
    NAME,
    _col("Quota", "GPUs the team's gangs may hold within its quota.", type_="integer"),
    _col("Used", "GPUs its in-quota gangs hold.", type_="integer"),
    _col("Borrowed", "GPUs its gangs hold beyond its quota, lent by other teams.", type_="integer"),
    _col("Waiting", "Gangs in its queue.", type_="integer"),
    _col("Head", "The first gang in line (position 0): admitted next when it fits."),
    _col("Age", _AGE_DOC, type_="date"),
    _col("Admitted", "Gangs holding GPUs.", type_="integer", wide=True),
    _col("Borrow Limit", "GPUs it may borrow beyond its quota.", type_="integer", wide=True),
    _col("Next", "The gang at position 1 of its queue.", wide=True),
    _col("Why", "Why the head of its queue waits.", wide=True),
)


def team_cells(team: Obj, now: float) -> list[Any]:
    """As the CRD's columns: a JSONPath that finds nothing is an empty cell."""
    status = team.get("status") or {}
    queue = status.get("queue") or []
    head, following = [*queue, {}, {}][:2]
    return [
        _meta(team).get("name", ""),
        status.get("quota"),
        status.get("used"),
        status.get("borrowed"),
        status.get("waiting"),
        head.get("name"),
        age(_meta(team).get("creationTimestamp"), now),
        status.get("admitted"),
        status.get("borrowLimit"),
        following.get("name"),
        head.get("reason"),
    ]


# --- events (upstream's printEvent) ------------------------------------------------

EVENT_COLUMNS = (
    _col("Last Seen", "Time since the event was last seen (and how often, over how long)."),
    _col("Type", "Normal or Warning."),
    _col("Reason", "Why the event was reported."),
    _col("Object", "The object the event is about."),
    _col("Subobject", "Part of the object (fieldPath).", wide=True),
    _col("Source", "Who reported it.", wide=True),
    _col("Message", "A human-readable description."),
    _col("First Seen", "Time since the event was first seen.", wide=True),
    _col("Count", "How often it was seen.", type_="integer", wide=True),
    _col("Name", _NAME_DOC, wide=True),
)


def event_cells(event: Obj, now: float) -> list[Any]:
    """A core/v1 Event's row; first and last seen fall back to ``eventTime`` and a
    series' ``lastObservedTime``, as upstream's printer does."""
    if "regarding" in event or event.get("apiVersion") == "events.k8s.io/v1":
        event = EVENTS_V1.into(event)  # the events.k8s.io view: print the core fields
    involved = event.get("involvedObject") or {}
    series = event.get("series") or {}
    first = event.get("firstTimestamp") or event.get("eventTime")
    last = series.get("lastObservedTime") or event.get("lastTimestamp") or event.get("eventTime")
    count = series.get("count") or event.get("count") or 1
    seen = age(last, now) if count <= 1 else f"{age(last, now)} (x{count} over {age(first, now)})"
    source = event.get("source") or {}
    reporter = source.get("component") or event.get("reportingComponent") or ""
    host = source.get("host") or event.get("reportingInstance") or ""
    return [
        seen,
        event.get("type", ""),
        event.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        involved.get("fieldPath", ""),
        f"{reporter}, {host}" if host else reporter,
        str(event.get("message", "")).strip(),
        age(first, now),
        count,
        _meta(event).get("name", ""),
    ]


PRINTERS: dict[str, tuple[Sequence[Column], CellsOf]] = {
    "events": (EVENT_COLUMNS, event_cells),
    "pods": (POD_COLUMNS, pod_cells),
    "nodes": (NODE_COLUMNS, node_cells),
    "podgroups": (PODGROUP_COLUMNS, podgroup_cells),
    "podgroups.scheduling.volcano.sh": (VOLCANO_PODGROUP_COLUMNS, volcano_podgroup_cells),
    "machinedeployments": (MACHINEDEPLOYMENT_COLUMNS, machinedeployment_cells),
    "teams": (TEAM_COLUMNS, team_cells),
}
DEFAULT: tuple[Sequence[Column], CellsOf] = ((NAME, AGE), _name_age)


def columns(plural: str) -> list[Column]:
    return list(PRINTERS.get(plural, DEFAULT)[0])


def row(plural: str, obj: Obj, *, now: float, include: str = "Metadata") -> Obj:
    """One TableRow; ``include`` is the request's includeObject (None, Metadata, Object)."""
    out: Obj = {"cells": PRINTERS.get(plural, DEFAULT)[1](obj, now)}
    if plural == "pods":
        conditions = _pod_conditions(obj)
        if conditions:
            out["conditions"] = conditions
    if include == "Object":
        out["object"] = obj
    elif include != "None":
        out["object"] = {
            "kind": "PartialObjectMetadata",
            "apiVersion": TABLE_API_VERSION,
            "metadata": _meta(obj),
        }
    return out


def table(
    plural: str,
    objs: Iterable[Obj],
    *,
    now: float,
    include: str = "Metadata",
    rv: str = "",
    cont: str = "",
) -> Obj:
    """A meta.k8s.io/v1 Table of ``objs`` (a list, one get, or one watch event)."""
    meta: Obj = {}
    if rv:
        meta["resourceVersion"] = rv
    if cont:
        meta["continue"] = cont
    return {
        "kind": "Table",
        "apiVersion": TABLE_API_VERSION,
        "metadata": meta,
        "columnDefinitions": columns(plural),
        "rows": [row(plural, o, now=now, include=include) for o in objs],
    }
