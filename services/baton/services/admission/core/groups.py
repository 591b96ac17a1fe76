"""The validating webhook for group objects: scheduler-plugins' PodGroup, upstream
Kubernetes' PodGroup and Workload. One voice for every format: what is wrong and what
to do (docs/admission.md, docs/gang.md "Gang formats"). Pure functions.
"""

from __future__ import annotations

from baton.proto import durations, keys
from baton.services.admission.core import formats
from baton.services.admission.core.objects import (
    KGroupPolicy,
    KPodGroup,
    KUpstreamPodGroup,
    KWorkload,
)
from baton.services.admission.core.state import State
from baton.services.admission.teams import is_label_key

TOPOLOGY_KEYS = (keys.TOPOLOGY_REQUIRED, keys.TOPOLOGY_PREFERRED)
Group = KPodGroup | KUpstreamPodGroup | KWorkload
WHAT = {KPodGroup: "PodGroup", KUpstreamPodGroup: "PodGroup", KWorkload: "Workload"}


def validate(state: State, obj: Group, namespace: str) -> str | None:
    meta = obj.metadata
    team = state.team_of(namespace)
    where = f"{WHAT[type(obj)]} {namespace}/{meta.name}"
    if not team:
        return (
            f"{where}: namespace {namespace!r} belongs to no team; ask your platform team "
            "to add it to a team (teams[].namespaces in the Baton team config)"
        )
    annotations = meta.annotations or {}
    if problem := annotation_problem(annotations, meta.labels or {}, team):
        return f"{where}: {problem}"
    match obj:
        case KPodGroup():
            problem = _plugins_problem(state, obj, team)
        case KUpstreamPodGroup():
            problem = formats.upstream_problem(obj.spec, what="spec.") or _size_problem(
                state, obj, team
            )
        case KWorkload():
            problem = next(
                filter(None, (_template_problem(t, i) for i, t in enumerate(_templates(obj)))),
                None,
            )
    return f"{where}: {problem}" if problem else None


def shape_problem(obj: Group) -> str | None:
    """What makes a gang object one Baton cannot place, whoever's team and quota: its
    size (at most ``MAX_GANG_MEMBERS``), timeout and topology (checked on UPDATEs too)."""
    match obj:
        case KPodGroup():
            return _plugins_shape(obj)
        case KUpstreamPodGroup():
            return formats.upstream_problem(obj.spec, what="spec.")
        case KWorkload():
            found = (_template_problem(t, i) for i, t in enumerate(_templates(obj)))
            return next(filter(None, found), None)
    return None


def _plugins_shape(group: KPodGroup) -> str | None:
    spec = group.spec
    if spec.min_member < 1:
        return f"spec.minMember must be at least 1, got {spec.min_member}"
    if problem := formats.members_problem(spec.min_member, what="spec.minMember"):
        return problem
    if spec.schedule_timeout_seconds is not None and spec.schedule_timeout_seconds < 1:
        return (
            f"spec.scheduleTimeoutSeconds must be at least 1, got {spec.schedule_timeout_seconds}"
        )
    return None


def _plugins_problem(state: State, group: KPodGroup, team: str) -> str | None:
    spec = group.spec
    if problem := _plugins_shape(group):
        return problem
    floor = formats.min_resources(spec.min_resources).get(keys.GPU, 0)
    if problem := formats.too_big(
        state, team=team, need=floor, how="spec.minResources", fix="lower spec.minResources"
    ):
        return problem
    per_pod = (group.metadata.annotations or {}).get(keys.GPUS_PER_POD)
    if per_pod is None or floor:  # minResources, when given, is the gang's demand
        return None
    return formats.too_big(
        state, team=team, need=int(per_pod) * spec.min_member,
        how=f"minMember {spec.min_member} x {per_pod}, annotation {keys.GPUS_PER_POD}",
        fix=(
            f"lower minMember (members of different sizes: drop {keys.GPUS_PER_POD} and "
            "set spec.minResources to what the minMember members ask together)"
        ),
    )  # fmt: skip


def _size_problem(state: State, group: KUpstreamPodGroup, team: str) -> str | None:
    gang = group.spec.scheduling_policy.gang
    per_pod = (group.metadata.annotations or {}).get(keys.GPUS_PER_POD)
    if gang is None or per_pod is None:
        return None
    return formats.too_big(
        state, team=team, need=int(per_pod) * gang.min_count,
        how=f"minCount {gang.min_count} x {per_pod}", fix="lower minCount",
    )  # fmt: skip


def _templates(workload: KWorkload) -> list[KGroupPolicy]:
    return workload.spec.pod_group_templates or []


def _template_problem(template: KGroupPolicy, index: int) -> str | None:
    return formats.upstream_problem(template, what=f"spec.podGroupTemplates[{index}].")


def annotation_problem(
    annotations: dict[str, str], labels: dict[str, str], team: str
) -> str | None:
    """Baton's own annotations on a pod or a group: malformed, or claiming what Baton sets."""
    if keys.ADMITTED in annotations:
        return (
            f"annotation {keys.ADMITTED} is set by Baton when the team's quota admits the gang; "
            "remove it"
        )
    per_pod = annotations.get(keys.GPUS_PER_POD)
    if per_pod is not None and not per_pod.isdigit():
        return (
            f'annotation {keys.GPUS_PER_POD}: {per_pod!r} is not a whole number of GPUs (e.g. "8")'
        )
    expected = annotations.get(keys.EXPECTED_DURATION)
    if expected is not None:
        try:
            durations.parse(expected)
        except ValueError as error:
            return str(error)
    for key in TOPOLOGY_KEYS:
        value = annotations.get(key)
        if value is not None and not is_label_key(value):
            return (
                f"annotation {key}: {value!r} is not a node label key "
                "(e.g. topology.kubernetes.io/zone)"
            )
    for where, value in (
        ("label", labels.get(keys.TEAM)),
        ("annotation", annotations.get(keys.TEAM)),
    ):
        if value is not None and team and value != team:
            return (
                f"{where} {keys.TEAM}={value!r} does not match the namespace's team "
                f"{team!r}; remove it (Baton sets it)"
            )
    return None
