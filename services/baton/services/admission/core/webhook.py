"""AdmissionReview v1 for pods and PodGroups: pure mutate and validate functions.

``review(state, body, ...)`` answers from the core's in-memory state and returns the
response body plus the decision event to publish. No I/O here; the shell serves it
over HTTPS.

Mutating (pods in a team's namespace): label ``baton.io/team``, tolerate the team's
taint (and its lenders' when the team may borrow), require nodes of those teams, set
``schedulerName: baton`` for gang members of every format, mark pods that will borrow
(``baton.io/borrowing: "true"``, optionally a low PriorityClass) and add
``kubernetes.io/egress-bandwidth`` when the team has a limit.

Validating: Baton-managed pods in no team, gangs larger than the team could ever
get, tolerations of another team's taint, and malformed ``baton.io/`` annotations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from baton.libs.kube.quantities import InvalidQuantity
from baton.proto import keys
from baton.proto.admission import Kind, PodMutated, PodRejected
from baton.proto.k8s import SCHEDULER_NAME
from baton.services.admission.core import formats, groups, shapes, updates
from baton.services.admission.core.formats import managed
from baton.services.admission.core.objects import (
    KObject,
    KPod,
    KPodGroup,
    KToleration,
    KUpstreamPodGroup,
    KWorkload,
    PatchOp,
    Request,
    Response,
    Review,
    ReviewOut,
    Status,
    encode_patch,
)
from baton.services.admission.core.patching import affinity_patch, map_patch
from baton.services.admission.core.state import State
from baton.services.admission.teams import is_default

Policy = Literal["baton-closed", "closed", "open"]


class BadReview(ValueError):
    """The request body is not an AdmissionReview v1 (the caller's fault)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    body: bytes
    event: PodMutated | PodRejected | None


@dataclass(frozen=True, slots=True)
class Options:
    policy: Policy = "baton-closed"
    borrow_priority_class: str = ""


_review = msgspec.json.Decoder(Review)
_out = msgspec.json.Encoder()

# (API group, kind) -> how the webhook reads the object and what it calls it
OBJECTS: dict[tuple[str, str], tuple[msgspec.json.Decoder[Any], Kind]] = {
    ("", "Pod"): (msgspec.json.Decoder(KPod), "Pod"),
    ("scheduling.x-k8s.io", "PodGroup"): (msgspec.json.Decoder(KPodGroup), "PodGroup"),
    ("scheduling.k8s.io", "PodGroup"): (msgspec.json.Decoder(KUpstreamPodGroup), "PodGroup"),
    # Volcano's spec has scheduler-plugins' minMember and minResources (queue and
    # priorityClassName are not read): the same checks, the same messages
    ("scheduling.volcano.sh", "PodGroup"): (msgspec.json.Decoder(KPodGroup), "PodGroup"),
    ("scheduling.k8s.io", "Workload"): (msgspec.json.Decoder(KWorkload), "Workload"),
}


def review(
    state: State | None, body: bytes, *, mutate: bool, now: float, options: Options = Options()
) -> Verdict:
    """Answer one AdmissionReview; ``state`` None means the bus state is not loaded yet."""
    try:
        body.decode("utf-8")  # JSON is UTF-8; msgspec would raise on a raw object later
    except UnicodeDecodeError as exc:
        raise BadReview(f"body is not UTF-8 JSON: {exc.reason} at byte {exc.start}") from None
    try:
        request = _review.decode(body).request
        if request is None:
            raise BadReview("AdmissionReview has no request")
        decoder, kind = OBJECTS.get((request.kind.group, request.kind.kind), OBJECTS["", "Pod"])
        obj: KObject = decoder.decode(request.object)
    except msgspec.DecodeError as exc:  # ValidationError included
        raise BadReview(f"not an AdmissionReview v1 for a Pod or PodGroup: {exc}") from None
    except RecursionError:
        raise BadReview("not an AdmissionReview v1: JSON nested too deeply") from None
    namespace = request.namespace or obj.metadata.namespace
    name = request.name or obj.metadata.name or obj.metadata.generate_name
    if request.operation == "UPDATE" and not mutate:
        message = updates.problem(request, obj, decoder)
        if message is None:
            return _answer(request, allowed=True)
        team = state.team_of(namespace) if state is not None else ""
        rejected = PodRejected(at=now, kind=kind, namespace=namespace, name=name, team=team,
                               message=f"{kind} {namespace}/{name}: {message}")  # fmt: skip
        return Verdict(_encode(request, allowed=False, message=rejected.message), rejected)
    if request.operation != "CREATE":  # an UPDATE is not mutated (a pod's spec is fixed)
        return _answer(request, allowed=True)
    if state is None:
        return _not_ready(request, obj, options.policy)
    try:
        if mutate:
            ops, team, borrowing = (
                mutate_pod(state, obj, namespace, options)
                if isinstance(obj, KPod)
                else mutate_pod_group(state, obj, namespace)
            )
            event = PodMutated(
                at=now,
                kind=kind,
                namespace=namespace,
                name=name,
                team=team,
                paths=tuple(op.path for op in ops),
                borrowing=borrowing,
            )
            return Verdict(_encode(request, allowed=True, patch=ops), event if ops else None)
        message = validate(state, obj, namespace)
    except InvalidQuantity as exc:
        message = f"{kind} {namespace}/{name}: {exc}"
    if message is None:
        return _answer(request, allowed=True)
    rejected = PodRejected(
        at=now,
        kind=kind,
        namespace=namespace,
        name=name,
        team=state.team_of(namespace),
        message=message,
    )
    return Verdict(_encode(request, allowed=False, message=message), rejected)


def _not_ready(request: Request, obj: KObject, policy: Policy) -> Verdict:
    closed = policy == "closed" or (policy == "baton-closed" and managed(obj))
    if not closed:
        return _answer(request, allowed=True)
    return Verdict(
        _encode(
            request,
            allowed=False,
            code=503,
            reason="ServiceUnavailable",
            message=(
                "Baton admission is starting and has not loaded the cluster state yet; "
                "retry in a few seconds"
            ),
        ),
        None,
    )


# -- mutating -------------------------------------------------------------------------


def mutate_pod(
    state: State, pod: KPod, namespace: str, options: Options = Options()
) -> tuple[list[PatchOp], str, bool]:
    team = state.team_of(namespace)
    if not team:
        return [], "", False
    meta, spec = pod.metadata, pod.spec
    labels = {keys.TEAM: team} if not is_default(state.config) else {}
    claim = formats.gang_of(pod)
    gang = claim.name if claim is not None else ""
    borrowing = will_borrow(
        state, team=team, gang=f"{namespace}/{gang}" if gang else "", gpus=pod.gpus(keys.GPU),
        pod=meta.name or meta.generate_name,
    )  # fmt: skip
    annotations: dict[str, str] = {keys.BORROWING: "true"} if borrowing else {}
    limit = state.specs[team].egress.limit
    if limit and keys.EGRESS_BANDWIDTH not in (meta.annotations or {}):
        annotations[keys.EGRESS_BANDWIDTH] = limit
    ops = map_patch("/metadata/labels", meta.labels, labels)
    ops += map_patch("/metadata/annotations", meta.annotations, annotations)
    usable = _usable_teams(state, team, borrowing or managed(pod))
    ops += _toleration_patch(state, spec.tolerations, usable)
    if not is_default(state.config):
        ops += affinity_patch(spec.affinity, key=keys.TEAM, values=usable)
    if claim is not None and spec.scheduler_name != SCHEDULER_NAME:
        ops.append(PatchOp(op="add", path="/spec/schedulerName", value=SCHEDULER_NAME))
    if borrowing and options.borrow_priority_class and not spec.priority_class_name:
        ops.append(
            PatchOp(op="add", path="/spec/priorityClassName", value=options.borrow_priority_class)
        )
    return ops, team, borrowing


def mutate_pod_group(
    state: State, group: KPodGroup | KUpstreamPodGroup | KWorkload, namespace: str
) -> tuple[list[PatchOp], str, bool]:
    team = state.team_of(namespace)
    if not team or is_default(state.config):
        return [], team, False
    return map_patch("/metadata/labels", group.metadata.labels, {keys.TEAM: team}), team, False


def will_borrow(state: State, *, team: str, gang: str, gpus: int, pod: str = "") -> bool:
    """Whether a new pod's gang runs (or will likely run) on GPUs lent by other teams:
    what the gang counts with this pod in (its members as they ask, never minMember x
    this pod's GPUs) beyond what is left of the team's quota."""
    if state.borrow_limit(team) == 0:
        return False
    known = state.gangs.get(gang) if gang else None
    if known is not None and known.admitted:
        return known.borrowed > 0
    need = formats.joined(known, pod=pod, gpus=gpus).gpus if known is not None else gpus
    return state.used.get(team, 0) + need > state.quota(team)


def _usable_teams(state: State, team: str, may_borrow: bool) -> tuple[str, ...]:
    """The team's nodes, plus its lenders' when it may run there: a Baton-managed pod of
    a team that may borrow always may (admission decides when it admits the gang, and
    gang placement keeps it to its team's nodes or to the lenders'); another pod only
    when it is predicted to borrow (the default scheduler places it)."""
    return (team, *state.lenders(team)) if may_borrow else (team,)


def _toleration_patch(
    state: State, have: list[KToleration] | None, teams: tuple[str, ...]
) -> list[PatchOp]:
    tainted = [t for t in teams if t in state.specs and state.specs[t].taint]
    if is_default(state.config) or not tainted:
        return []
    present = {(t.key, t.value) for t in have or []}
    wanted = [
        {"key": keys.TEAM, "operator": "Equal", "value": t, "effect": "NoSchedule"}
        for t in tainted
        if (keys.TEAM, t) not in present
    ]
    if not wanted:
        return []
    if have is None:
        return [PatchOp(op="add", path="/spec/tolerations", value=wanted)]
    return [PatchOp(op="add", path="/spec/tolerations/-", value=w) for w in wanted]


# -- validating -----------------------------------------------------------------------


def validate_pod(state: State, pod: KPod, namespace: str) -> str | None:
    meta = pod.metadata
    team = state.team_of(namespace)
    where = f"pod {namespace}/{meta.name or meta.generate_name}"
    if not team and managed(pod):
        return (
            f"{where}: namespace {namespace!r} belongs to no team, so Baton cannot schedule "
            "it; ask your platform team to add the namespace to a team "
            "(teams[].namespaces in the Baton team config)"
        )
    if problem := groups.annotation_problem(meta.annotations or {}, meta.labels or {}, team):
        return f"{where}: {problem}"
    if problem := _toleration_problem(state, pod.spec.tolerations or [], team, namespace):
        return f"{where}: {problem}"
    if problem := _node_name_problem(state, pod, team):
        return f"{where}: {problem}"
    if not managed(pod):
        return None
    if problem := formats.membership_problem(pod):
        return f"{where}: {problem}"
    if problem := formats.containers_gpus_problem(pod) or formats.gpus_problem(pod.gpus(keys.GPU)):
        return f"{where}: {problem}"
    if problem := _quota_problem(state, pod, namespace, team):
        return f"{where}: {problem}"
    if problem := shapes.never_fits(shapes.requests(pod), shapes.shapes(state)):
        return f"{where}: {problem}"
    return None


def _quota_problem(state: State, pod: KPod, namespace: str, team: str) -> str | None:
    """A Baton pod whose gang (itself, for a lone pod) its team could never hold."""
    claim = formats.gang_of(pod)
    if not team:
        return None
    if claim is None:  # a lone Baton pod is a gang of one
        return formats.too_big(
            state, team=team, need=pod.gpus(keys.GPU), how="one pod", fix="ask for fewer GPUs"
        )
    gang = state.gangs.get(f"{namespace}/{claim.name}")
    if gang is None or not gang.team:
        return None  # its first member: what the others ask is not known yet
    name = pod.metadata.name or pod.metadata.generate_name
    problem = formats.joining_problem(state, gang, pod=name, gpus=pod.gpus(keys.GPU))
    return f"gang {namespace}/{claim.name} {problem}" if problem else None


def validate(state: State, obj: KObject, namespace: str) -> str | None:
    """The validating webhook's answer for any object it reviews (None: allowed)."""
    if isinstance(obj, KPod):
        return validate_pod(state, obj, namespace)
    return groups.validate(state, obj, namespace)


def _node_name_problem(state: State, pod: KPod, team: str) -> str | None:
    """A preset ``spec.nodeName`` skips every scheduler, taints and quota included: Baton's
    pods and GPU pods may not set it, nor may any pod name another team's node."""
    node = pod.spec.node_name
    if not node:
        return None
    if managed(pod) or pod.gpus(keys.GPU) > 0:
        what = "a Baton gang member" if managed(pod) else "a GPU pod"
        return (
            f"it sets spec.nodeName {node!r}, but {what} is placed by Baton so that it counts "
            "against its team's quota and stays on the team's nodes; remove spec.nodeName"
        )
    owner = state.node_team.get(node, "")
    if is_default(state.config) or not owner or owner in (team, *state.lenders(team)):
        return None
    return (
        f"it sets spec.nodeName {node!r}, a node of team {owner!r}, but its namespace belongs "
        f"to {f'team {team!r}' if team else 'no team'}; remove spec.nodeName"
    )


def _toleration_problem(
    state: State, tolerations: list[KToleration], team: str, namespace: str
) -> str | None:
    if is_default(state.config):
        return None
    allowed = {team, *state.lenders(team)} if team else set()
    for t in tolerations:
        if t.key != keys.TEAM:
            continue
        if t.operator == "Exists":
            return (
                f"toleration {keys.TEAM} Exists would let it run on every team's nodes; "
                "remove it (Baton adds the toleration for your team)"
            )
        if t.value not in allowed:
            owner = f"team {team!r}" if team else "no team"
            return (
                f"it tolerates team {t.value!r}'s nodes (toleration {keys.TEAM}={t.value}) "
                f"but namespace {namespace!r} belongs to {owner}; remove the toleration "
                "(Baton adds the one for your team)"
            )
    return None


# -- responses ------------------------------------------------------------------------


def _answer(request: Request, *, allowed: bool) -> Verdict:
    return Verdict(_encode(request, allowed=allowed), None)


def _encode(
    request: Request,
    *,
    allowed: bool,
    patch: list[PatchOp] | None = None,
    message: str = "",
    code: int = 403,
    reason: str = "Forbidden",
) -> bytes:
    response = Response(
        uid=request.uid,
        allowed=allowed,
        status=None if allowed else Status(code=code, message=message, reason=reason),
        patch_type="JSONPatch" if patch else None,
        patch=encode_patch(patch) if patch else None,
    )
    return _out.encode(ReviewOut(response=response))
