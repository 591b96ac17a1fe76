"""Writing what Baton decided where Kubernetes users look: PodGroup status, pods'
``PodScheduled`` condition, Events (``events.k8s.io/v1``).

Each reads before it writes and reports ``already`` when the object already says so;
a condition keeps the API's ``lastTransitionTime`` while its status is unchanged, as
the API conventions ask. Every PodGroup API is written: scheduler-plugins'
(``scheduling.x-k8s.io/v1alpha1``), upstream's (``scheduling.k8s.io``, whichever
version is served: v1beta1, else v1alpha2) and Volcano's (``scheduling.volcano.sh/v1beta1``).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from baton.proto.actions import (
    Outcome,
    PodRef,
    RecordEvent,
    SetGroupStatus,
    SetPodCondition,
    StatusCondition,
)
from baton.proto.k8s import PLUGINS_API, UPSTREAM_API, VOLCANO_API
from baton.services.actuator.calling import MERGE, ApiError, Obj, Session
from baton.services.actuator.core.eventing import EventWrite

Applied = tuple[Outcome, str]
UPSTREAM_VERSIONS = ("v1beta1", "v1alpha2")
NOTE_LIMIT = 1024  # the events API refuses a longer note
INSTANCE = os.environ.get("HOSTNAME") or socket.gethostname()


def group_versions(api: str) -> list[tuple[str, str]]:
    """(group, version) to try for a PodGroup of ``api``, in order."""
    if api == UPSTREAM_API:
        return [(UPSTREAM_API, v) for v in UPSTREAM_VERSIONS]
    group, _, version = (api or PLUGINS_API).partition("/")
    return [(group, version)]


async def on_pod_group(
    s: Session, api: str, call: Callable[[tuple[str, str]], Awaitable[Applied]]
) -> Applied:
    """Run ``call`` against the first served version of the PodGroup's API (404 from a
    version that is not served moves to the next; from the last, the object is gone)."""
    versions = group_versions(api)
    for i, version in enumerate(versions):
        try:
            return await call(version)
        except ApiError as exc:
            if exc.status != 404 or i == len(versions) - 1:
                raise
    raise AssertionError("unreachable")


# -- PodGroup status ----------------------------------------------------------------


async def set_group_status(s: Session, action: SetGroupStatus) -> Applied:
    custom = s.api.custom
    get, patch = (
        custom.get_namespaced_custom_object_status,
        custom.patch_namespaced_custom_object_status,
    )

    async def write(version: tuple[str, str]) -> Applied:
        where = (*version, action.namespace, "podgroups", action.name)
        for _ in range(5):
            obj = await s.call("get", get, *where)
            meta = obj.get("metadata", {})
            if action.uid and meta.get("uid") != action.uid:
                return "failed", f"PodGroup {action.namespace}/{action.name} was replaced"
            have: Obj = obj.get("status") or {}
            want = _group_status(action, have)
            if all(have.get(k) == v for k, v in want.items()):
                return "already", ""
            body = {
                "metadata": {"resourceVersion": meta.get("resourceVersion", "")},
                "status": want,
            }
            try:
                await s.call("patch", patch, *where, body, _content_type=MERGE)
            except ApiError as exc:
                if exc.status == 409:
                    continue
                raise
            return "applied", ""
        raise ApiError(409, "still conflicting after 5 re-reads", reason="Conflict")

    return await on_pod_group(s, action.api, write)


def _group_status(action: SetGroupStatus, have: Obj) -> Obj:
    status = action.status
    want: Obj = {"conditions": conditions(have.get("conditions") or [], status.conditions)}
    if action.api == VOLCANO_API:  # Volcano's phase and counts (no ``scheduled``)
        want.update(
            phase=status.phase, running=status.running, succeeded=status.succeeded,
            failed=status.failed,
        )  # fmt: skip
    elif action.api != UPSTREAM_API:  # scheduler-plugins' phase and counts
        want.update(
            phase=status.phase, scheduled=status.scheduled, running=status.running,
            succeeded=status.succeeded, failed=status.failed,
        )  # fmt: skip
    return want


def conditions(have: list[Obj], wanted: tuple[StatusCondition, ...]) -> list[Obj]:
    """``have`` with each wanted condition set by type; an unchanged status keeps its
    lastTransitionTime."""
    out = {c.get("type"): c for c in have}
    for c in wanted:
        old = out.get(c.type) or {}
        since = old.get("lastTransitionTime") if old.get("status") == c.status else None
        entry: Obj = {
            "type": c.type,
            "status": c.status,
            "lastTransitionTime": since or stamp(c.since),
        }
        if c.reason:
            entry["reason"] = c.reason
        if c.message:
            entry["message"] = c.message
        out[c.type] = {**old, **entry} if old.get("status") == c.status else entry
    return list(out.values())


# -- pod conditions -------------------------------------------------------------------


async def set_pod_condition(
    s: Session, action: SetPodCondition, *, concurrency: int = 64
) -> Applied:
    gate = asyncio.Semaphore(concurrency)

    async def one(pod: PodRef) -> bool:
        async with gate:
            return await _pod_condition(s, action, pod)

    written = await asyncio.gather(*(one(p) for p in action.pods))
    return ("applied" if any(written) else "already"), ""


async def _pod_condition(s: Session, action: SetPodCondition, pod: PodRef) -> bool:
    """True when it wrote. A pod gone, replaced or bound meanwhile is left alone."""
    core, ns = s.api.core, action.namespace
    for _ in range(5):
        try:
            obj = await s.call("get", core.read_namespaced_pod_status, pod.name, ns)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        meta, spec = obj.get("metadata", {}), obj.get("spec", {})
        if (pod.uid and meta.get("uid") != pod.uid) or spec.get("nodeName"):
            return False
        have = (obj.get("status") or {}).get("conditions") or []
        want = conditions(have, (action.condition,))
        if want == have:
            return False
        body = {"metadata": {"resourceVersion": meta.get("resourceVersion", "")},
                "status": {"conditions": want}}  # fmt: skip
        try:
            await s.call("patch", core.patch_namespaced_pod_status, pod.name, ns, body,
                         _content_type=MERGE)  # fmt: skip
        except ApiError as exc:
            if exc.status == 409:
                continue
            if exc.status == 404:
                return False
            raise
        return True
    raise ApiError(409, f"pod {ns}/{pod.name}: still conflicting after 5 re-reads")


# -- Events -----------------------------------------------------------------------------


async def record_event(s: Session, action: RecordEvent, write: EventWrite | None) -> Applied:
    """Create the Event, or patch its series; a series whose Event is gone (the API
    server's event TTL) is created again with its count."""
    if write is None:  # a redelivery the core did not plan: write it as a first occurrence
        write = EventWrite(name=_name(action), count=1, first=action.at, last=action.at)
    events, namespace = s.api.events, action.regarding.namespace or "default"
    if write.count > 1:
        patch = {
            "series": {"count": write.count, "lastObservedTime": stamp(write.last, micro=True)},
            "deprecatedCount": write.count,  # kubectl's count and LAST SEEN
            "deprecatedLastTimestamp": stamp(write.last),
        }
        try:
            await s.call("patch", events.patch_namespaced_event, write.name, namespace, patch,
                         _content_type=MERGE)  # fmt: skip
            return "applied", ""
        except ApiError as exc:
            if exc.status != 404:
                raise
    try:
        await s.call("create", events.create_namespaced_event, namespace, event_body(action, write))
    except ApiError as exc:
        if exc.status == 409:
            return "already", ""
        raise
    return "applied", ""


def event_body(action: RecordEvent, write: EventWrite) -> Obj:
    ref = action.regarding
    regarding: Obj = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name}
    if ref.namespace:
        regarding["namespace"] = ref.namespace
    if ref.uid:
        regarding["uid"] = ref.uid
    body: Obj = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": write.name, "namespace": ref.namespace or "default"},
        "eventTime": stamp(write.first, micro=True),
        "reportingController": action.controller,
        "reportingInstance": f"{action.controller.rpartition('/')[2]}-{INSTANCE}"[:128],
        "action": action.action or action.reason,
        "reason": action.reason,
        "note": action.note[:NOTE_LIMIT],
        "type": action.event_type,
        "regarding": regarding,
        # the core/v1 fields kubectl get events prints and sorts by (lastTimestamp, count,
        # source), as kube-scheduler's events carry them
        "deprecatedFirstTimestamp": stamp(write.first),
        "deprecatedLastTimestamp": stamp(write.last),
        "deprecatedCount": write.count,
        "deprecatedSource": {"component": action.controller},
    }
    if write.count > 1:
        body["series"] = {"count": write.count, "lastObservedTime": stamp(write.last, micro=True)}
    return body


def _name(action: RecordEvent) -> str:
    return f"{action.regarding.name[:200]}.{action.id.rpartition('-')[2][:16]}"


def stamp(at: float, *, micro: bool = False) -> str:
    """RFC 3339 as the API writes it (``MicroTime`` for event times)."""
    moment = datetime.fromtimestamp(at, tz=UTC)
    if micro:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
