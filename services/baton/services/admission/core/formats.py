"""Gang formats at the webhook: which gang a new pod names, and what is wrong with a pod or
a group object, in one voice for every format (docs/gang.md, "Gang formats").

The bus side decides membership in ``libs.kube.slimming.gang_ref``; this module reads
the same keys from the AdmissionReview's JSON to refuse, at creation, what would
otherwise wait forever or lose all-or-nothing silently. Pure functions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from baton.libs.kube.quantities import InvalidQuantity, canonical, parse_quantity
from baton.proto import keys
from baton.proto.k8s import MAX_GANG_MEMBERS, MAX_NODE_GPUS, SCHEDULER_NAME
from baton.services.admission.core.gangs import Gang, Member
from baton.services.admission.core.members import sized_by
from baton.services.admission.core.objects import KGroupPolicy, KObject, KPod
from baton.services.admission.core.state import State
from baton.services.admission.teams import is_label_key


@dataclass(frozen=True, slots=True)
class Named:
    """One format's claim that a pod belongs to a gang."""

    name: str
    where: str  # how the pod says it, for messages: "label scheduling.x-k8s.io/pod-group"
    count: str | None = None  # the member count the pod itself gives, as written
    count_key: str = ""  # where that count goes


def claims(pod: KPod) -> list[Named]:
    """Every gang the pod names, in the order ``gang_ref`` prefers them."""
    labels, notes = pod.metadata.labels or {}, pod.metadata.annotations or {}
    found: list[Named] = []
    if name := labels.get(keys.POD_GROUP):
        found.append(Named(name, f"label {keys.POD_GROUP}"))
    group = pod.spec.scheduling_group
    if group is not None and group.pod_group_name:
        found.append(Named(group.pod_group_name, "spec.schedulingGroup.podGroupName"))
    for key in (keys.VOLCANO_GROUP, keys.VOLCANO_GROUP_ALIAS):
        if name := notes.get(key):
            count = notes.get(keys.VOLCANO_MIN_MEMBER)
            found.append(Named(name, f"annotation {key}", count, keys.VOLCANO_MIN_MEMBER))
            break
    if name := labels.get(keys.KUEUE_GROUP):
        count = notes.get(keys.KUEUE_TOTAL, labels.get(keys.KUEUE_TOTAL))
        found.append(Named(name, f"label {keys.KUEUE_GROUP}", count, keys.KUEUE_TOTAL))
    if (name := labels.get(keys.JOBSET_NAME)) and keys.GANG_MEMBERS in notes:
        where = f"label {keys.JOBSET_NAME}"
        found.append(Named(name, where, notes[keys.GANG_MEMBERS], keys.GANG_MEMBERS))
    return found


def gang_of(pod: KPod) -> Named | None:
    found = claims(pod)
    return found[0] if found else None


def membership_problem(pod: KPod) -> str | None:
    """A pod in two gangs, or a gang whose size nothing can ever tell."""
    found = claims(pod)
    if len({n.name for n in found}) > 1:
        listed = " and ".join(f"{n.name!r} ({n.where})" for n in found)
        return f"it names gangs {listed}; a pod belongs to one gang: keep one of them"
    for claim in found:
        if claim.count is not None and not _positive(claim.count):
            return f'{claim.count_key}: {claim.count!r} is not a whole number of members (e.g. "4")'
        if claim.count is not None and (
            problem := members_problem(int(claim.count), what=claim.count_key)
        ):
            return problem
        if claim.count_key == keys.KUEUE_TOTAL and claim.count is None:
            return (
                f"{claim.where} names gang {claim.name!r} but not its size: add annotation "
                f'{keys.KUEUE_TOTAL}: "<members>" (the same on every member)'
            )
    return None


def count(claim: Named) -> int:
    """The member count the pod gives itself (0: none, or not valid)."""
    return int(claim.count) if claim.count is not None and _positive(claim.count) else 0


def min_resources(raw: dict[str, str | int | float] | None) -> dict[str, int]:
    """``spec.minResources`` in canonical units; raises InvalidQuantity naming a bad one
    (a negative one too: a gang's minimum cannot be below nothing)."""
    found: dict[str, int] = {}
    for name, value in (raw or {}).items():
        found[name] = canonical(name, str(value))
        if found[name] < 0:
            raise InvalidQuantity(f"spec.minResources {name}: {value!r} is negative")
    return found


def upstream_problem(policy: KGroupPolicy, *, what: str) -> str | None:
    """An upstream PodGroup's spec or a Workload template: a gang minimum and a topology
    constraint Baton can honour."""
    gang = policy.scheduling_policy.gang
    if gang is not None and gang.min_count < 1:
        return f"{what}schedulingPolicy.gang.minCount must be at least 1, got {gang.min_count}"
    if gang is not None and (
        problem := members_problem(gang.min_count, what=f"{what}schedulingPolicy.gang.minCount")
    ):
        return problem
    constraints = policy.scheduling_constraints
    topology = constraints.topology or [] if constraints is not None else []
    if len(topology) > 1:
        return f"{what}schedulingConstraints.topology: Baton honours one topology constraint"
    for constraint in topology:
        if not is_label_key(constraint.key):
            return (
                f"{what}schedulingConstraints.topology[0].key: {constraint.key!r} is not a "
                "node label key (e.g. topology.kubernetes.io/zone)"
            )
    return None


def gpus_problem(per_pod: int) -> str | None:
    """A pod's GPU request no node could ever satisfy (or that is not a request at all)."""
    if per_pod < 0:
        return (
            f"it requests {per_pod} {keys.GPU}; a request cannot be negative: set "
            f"resources.limits {keys.GPU} to the GPUs each pod needs (0 for none)"
        )
    if per_pod > MAX_NODE_GPUS:
        return (
            f"it requests {per_pod} {keys.GPU} but no node has more than {MAX_NODE_GPUS}; "
            "a pod runs on one node: split the work into more pods (a gang)"
        )
    return None


def managed(obj: KObject) -> bool:
    """Baton-managed: a group object, a pod naming a gang in any format Baton reads, or a
    pod asking for Baton's scheduler."""
    if not isinstance(obj, KPod):
        return True
    return obj.spec.scheduler_name == SCHEDULER_NAME or bool(claims(obj))


def containers_gpus_problem(pod: KPod) -> str | None:
    """Each container's and init container's GPUs, as written: a whole number (the API
    server takes extended resources only whole; rounded up here, 0.5 would become a
    GPU asked of a node), not negative, at most a node's."""
    spec = pod.spec
    for field, containers in (("containers", spec.containers),
                              ("initContainers", spec.init_containers)):  # fmt: skip
        for i, container in enumerate(containers):
            for part in ("requests", "limits"):
                value = (getattr(container.resources, part) or {}).get(keys.GPU)
                if value is None:
                    continue
                exact = parse_quantity(str(value))
                where = f"{field}[{i}] ({container.name!r}) resources.{part}"
                if exact.denominator != 1:
                    return (
                        f"{where} asks for {value} {keys.GPU}: GPUs are whole devices; "
                        "ask for a whole number (1, 2, ...)"
                    )
                if problem := gpus_problem(int(exact)):
                    return f"{where}: {problem}"
    return None


def members_problem(count: int, *, what: str) -> str | None:
    if count > MAX_GANG_MEMBERS:
        return (
            f"{what} {count} is more than the {MAX_GANG_MEMBERS} members a gang may have "
            f"(Baton binds a gang in one all-or-nothing action of at most {MAX_GANG_MEMBERS} "
            f"pods); split the job into gangs of at most {MAX_GANG_MEMBERS}, or set {what} "
            "to the number of pods the job runs"
        )
    return None


def too_big(state: State, *, team: str, need: int, how: str, fix: str) -> str | None:
    """The one message for a gang larger than its team could ever run, whatever says
    its size (minMember, minCount, minResources, Kueue's total count...)."""
    if need <= state.ceiling(team) or not state.fixed_ceiling(team):
        return None
    return (
        f"needs {need} GPUs ({how}) but team {team!r} can never get more than "
        f"{state.ceiling(team)} (a gang runs within its quota, {state.quota(team)}, or wholly "
        f"on borrowed GPUs, at most {state.borrow_limit(team)}); {fix} or ask for a larger quota"
    )


def joined(gang: Gang, *, pod: str, gpus: int) -> Gang:
    """A copy of ``gang`` with a new pending member (what it would be once the pod is in)."""
    member = Member(gpus=gpus, priority=0, phase="Pending", uid="", node="")
    return dataclasses.replace(gang, members={**gang.members, pod: member})


def joining_problem(state: State, gang: Gang, *, pod: str, gpus: int) -> str | None:
    """A pod joining a known gang that the team could then never hold: the gang's
    demand (``spec.minResources``, ``baton.io/gpus-per-pod`` x minMember, else its
    minMember smallest members) or every live member's GPUs with this pod's, whichever
    is more, counted shape by shape (never minMember x the largest pod)."""
    trial = joined(gang, pod=pod, gpus=gpus)
    how, fix = sized_by(trial, joining=True)
    return too_big(state, team=gang.team, need=trial.gpus, how=how, fix=fix)


def _positive(value: str) -> bool:
    return value.isdigit() and int(value) > 0
