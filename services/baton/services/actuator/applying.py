"""Applying each action kind to the API, idempotently: the API state decides "already".

``apply(session, action)`` returns the outcome and error, or raises ``ApiError`` (the
shell maps its policy: ``backoff``/``reread`` -> retry later, ``gone``/``fail`` ->
failed). Patches carry the resourceVersion they were computed from; a 409 means
someone changed the object in between, so it is read again and recomputed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from baton.libs.kube.quantities import parse_quantity
from baton.proto.actions import (
    Annotate,
    AnyAction,
    BindGang,
    Cordon,
    CreatePod,
    DeletePod,
    Evict,
    EvictGang,
    MarkNode,
    Outcome,
    RecordEvent,
    RecreatePod,
    ScaleMachineDeployment,
    SetGroupStatus,
    SetLabels,
    SetPodCondition,
    SetTaint,
    SetTeamStatus,
)
from baton.proto.k8s import GPU
from baton.services.actuator import binding, podspec, recreating, reporting, teams
from baton.services.actuator.calling import MERGE, ApiError, Obj, Session, node_gate, seen
from baton.services.actuator.core.eventing import EventWrite

REREADS = 5
CAPI = ("cluster.x-k8s.io", "v1beta1")
Applied = tuple[Outcome, str]


async def apply(
    s: Session, action: AnyAction, *, bind_concurrency: int = 64, event: EventWrite | None = None
) -> Applied:
    """``event``: for a RecordEvent, which Event object and count the core planned."""
    match action:
        case BindGang():
            return await binding.bind_gang(s, action, concurrency=bind_concurrency)
        case EvictGang():
            pods = [(p.namespace, p.pod, p.uid) for p in action.pods]
            return await binding.evict_all(
                s, pods, concurrency=bind_concurrency, grace_seconds=action.grace_seconds
            )
        case Evict():
            return await binding.evict_all(s, [(action.namespace, action.pod, action.uid)])
        case SetTaint():
            return await _on_node(s, action.node, _taints(action))
        case SetLabels():
            return await _on_node(s, action.node, _meta("labels", action.labels))
        case MarkNode():
            return await _on_node(s, action.node, _marks(action))
        case Cordon():
            return await _on_node(s, action.node, _cordon(action))
        case Annotate():
            return await _annotate(s, action)
        case CreatePod():
            return await _create_pod(s, action)
        case RecreatePod():
            return await recreating.recreate_pod(s, action)
        case DeletePod():
            return await _delete_pod(s, action)
        case ScaleMachineDeployment():
            return await _scale(s, action)
        case SetGroupStatus():
            return await reporting.set_group_status(s, action)
        case SetPodCondition():
            return await reporting.set_pod_condition(s, action, concurrency=bind_concurrency)
        case RecordEvent():
            return await reporting.record_event(s, action, event)
        case SetTeamStatus():
            return await teams.set_team_status(s, action)
    raise TypeError(f"no applier for {type(action).__name__}")  # a bug: the union grew


Compute = Callable[[Obj], Obj | None]


async def _converge(
    s: Session, read: Callable[[], Awaitable[Obj]], compute: Compute,
    patch: Callable[[Obj], Awaitable[Obj]],
) -> Applied:  # fmt: skip
    """Read, compute the patch (None: already so), patch with the read resourceVersion."""
    for _ in range(REREADS):
        obj = await read()
        body = compute(obj)
        if body is None:
            return "already", ""
        meta = body.setdefault("metadata", {})
        meta["resourceVersion"] = obj.get("metadata", {}).get("resourceVersion", "")
        try:
            await patch(body)
        except ApiError as exc:
            if exc.status == 409:
                continue
            raise
        return "applied", ""
    raise ApiError(409, f"still conflicting after {REREADS} re-reads", reason="Conflict")


async def _on_node(s: Session, node: str, compute: Compute) -> Applied:
    core = s.api.core
    return await _converge(
        s, lambda: s.call("get", core.read_node, node), compute,
        lambda body: _patch_node(s, node, body),
    )  # fmt: skip


async def _patch_node(s: Session, node: str, body: Obj) -> Obj:
    patched = await s.call("patch", s.api.core.patch_node, node, body, _content_type=MERGE)
    s.api.nodes_seen.pop(node, None)  # the next bind there reads the node again
    return patched


def _taints(action: SetTaint) -> Compute:
    t = action.taint
    mine = {"key": t.key, "effect": t.effect, **({"value": t.value} if t.value else {})}

    def compute(node: Obj) -> Obj | None:
        taints: list[dict[str, Any]] = node.get("spec", {}).get("taints") or []
        same = [x for x in taints if x.get("key") == t.key and x.get("effect") == t.effect]
        others = [x for x in taints if x not in same]
        if action.present:
            if len(same) == 1 and same[0].get("value", "") == t.value:
                return None
            return {"spec": {"taints": [*others, mine]}}
        return {"spec": {"taints": others}} if same else None

    return compute


def _marks(action: MarkNode) -> Compute:
    """Taints, labels and annotations of one ``MarkNode``, in one patch (None: all so)."""

    def entry(t: Any) -> dict[str, Any]:
        return {"key": t.key, "effect": t.effect, **({"value": t.value} if t.value else {})}

    wanted = [entry(t) for t in action.taints]
    gone = {(t.key, t.effect) for t in (*action.untaint, *action.taints)}
    labels, notes = _meta("labels", action.labels), _meta("annotations", action.annotations)

    def compute(node: Obj) -> Obj | None:
        have: list[dict[str, Any]] = node.get("spec", {}).get("taints") or []
        kept = [x for x in have if (x.get("key"), x.get("effect")) not in gone]
        after = kept + wanted
        body: Obj = {}
        if sorted(map(_taint_key, after)) != sorted(map(_taint_key, have)):
            body["spec"] = {"taints": after}
        for part in (labels(node), notes(node)):
            if part is not None:
                body.setdefault("metadata", {}).update(part["metadata"])
        return body or None

    return compute


def _taint_key(t: dict[str, Any]) -> tuple[str, str, str]:
    return (str(t.get("key", "")), str(t.get("effect", "")), str(t.get("value", "")))


def _cordon(action: Cordon) -> Compute:
    def compute(node: Obj) -> Obj | None:
        if bool(node.get("spec", {}).get("unschedulable")) == action.unschedulable:
            return None
        return {"spec": {"unschedulable": action.unschedulable}}

    return compute


def _meta(field: str, want: dict[str, str | None]) -> Compute:
    """Set (value) or remove (None) keys of metadata.labels / metadata.annotations."""

    def compute(obj: Obj) -> Obj | None:
        have: dict[str, str] = obj.get("metadata", {}).get(field) or {}
        if all(have.get(k) == v for k, v in want.items()):
            return None
        return {"metadata": {field: dict(want)}}

    return compute


async def _annotate(s: Session, action: Annotate) -> Applied:
    ns, name, compute = action.namespace, action.name, _meta("annotations", action.annotations)
    if action.kind == "Node":
        return await _on_node(s, name, compute)
    if action.kind == "Machine":
        custom = s.api.custom
        where = (*CAPI, ns, "machines", name)
        return await _converge(
            s, lambda: s.call("get", custom.get_namespaced_custom_object, *where), compute,
            lambda b: s.call("patch", custom.patch_namespaced_custom_object, *where, b,
                             _content_type=MERGE),
        )  # fmt: skip
    if action.kind == "Pod":
        core = s.api.core
        return await _converge(
            s, lambda: s.call("get", core.read_namespaced_pod, name, ns), compute,
            lambda b: s.call("patch", core.patch_namespaced_pod, name, ns, b, _content_type=MERGE),
        )  # fmt: skip
    custom = s.api.custom
    get, patch = custom.get_namespaced_custom_object, custom.patch_namespaced_custom_object

    async def on(version: tuple[str, str]) -> Applied:
        where = (*version, ns, "podgroups", name)
        return await _converge(
            s, lambda: s.call("get", get, *where), compute,
            lambda b: s.call("patch", patch, *where, b, _content_type=MERGE),
        )  # fmt: skip

    return await reporting.on_pod_group(s, action.api, on)


async def _create_pod(s: Session, action: CreatePod) -> Applied:
    body = podspec.from_template(action.pod)
    node, wants = action.pod.node_name, action.pod.requests.get(GPU, 0)
    if node and wants:  # bound by name (health's preflight): no scheduler checks the fit
        async with node_gate(s.api, node).alone():  # no gang bind onto the node meanwhile
            free = await _gpus_free(s, node)
            if free < wants:
                return "failed", (
                    f"node {node} has {free} GPU(s) free and the pod asks for {wants}: not "
                    "created (its kubelet would fail it, or the pods already there)"
                )
            return await _create(s, action, body)
    return await _create(s, action, body)


async def _create(s: Session, action: CreatePod, body: Obj) -> Applied:
    try:
        await s.call("create", s.api.core.create_namespaced_pod, action.pod.namespace, body)
    except ApiError as exc:
        if exc.status == 409 and action.pod.name:
            return "already", ""
        raise
    return "applied", ""


async def _gpus_free(s: Session, node: str) -> int:
    """The node's allocatable GPUs less what its running and pending pods request, read
    from the API now (a gang bound there a moment ago is counted)."""
    got = await s.call("get", s.api.core.read_node, node)
    got.setdefault("metadata", {}).setdefault("name", node)
    seen(s.api, got)  # in the gate: a bind after this create sees the node's taints
    allocatable = parse_quantity(str(got.get("status", {}).get("allocatable", {}).get(GPU, "0")))
    listed = await s.call("list", s.api.core.list_pod_for_all_namespaces,
                          field_selector=f"spec.nodeName={node}")  # fmt: skip
    used = 0
    for pod in listed.get("items", []):
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for container in pod.get("spec", {}).get("containers", []):
            stated = container.get("resources") or {}
            value = (stated.get("requests") or {}).get(GPU) or (stated.get("limits") or {}).get(GPU)
            used += int(parse_quantity(str(value))) if value else 0
    return int(allocatable) - int(used)


async def _delete_pod(s: Session, action: DeletePod) -> Applied:
    options: Obj = {}
    if action.grace_seconds is not None:
        options["gracePeriodSeconds"] = action.grace_seconds
    try:
        await s.call(
            "delete", s.api.core.delete_namespaced_pod, action.pod, action.namespace, body=options
        )
    except ApiError as exc:
        if exc.status == 404:
            return "already", ""
        raise
    return "applied", ""


async def _scale(s: Session, action: ScaleMachineDeployment) -> Applied:
    custom = s.api.custom
    where = (*CAPI, action.namespace, "machinedeployments", action.name)

    def compute(scale: Obj) -> Obj | None:
        current = scale.get("spec", {}).get("replicas")
        return None if current == action.replicas else {"spec": {"replicas": action.replicas}}

    get = custom.get_namespaced_custom_object_scale
    patch = custom.patch_namespaced_custom_object_scale
    return await _converge(
        s, lambda: s.call("get", get, *where), compute,
        lambda b: s.call("patch", patch, *where, b, _content_type=MERGE),
    )  # fmt: skip
