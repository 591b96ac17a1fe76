"""The reporter core: pure ``(state, event, now) -> (state, outputs)``.

It tells Kubernetes users what Baton decided, where they look: a PodGroup's status
(phase, counts, ``PodGroupScheduled``), the ``PodScheduled`` condition of a waiting
gang's pods, and Events (``table.TABLE``). Inputs are the cluster (pods, PodGroups of
both APIs, nodes) and the decisions of gang and admission; outputs are actions for the
actuator, at its ``status`` priority. The view (``libs.view``) says which pods form
which gang, in every format.

A gang's pods are told at most every ``pod_every`` seconds when what it waits for
changes (a gang of 1,000 pods is 1,000 writes); a pod that joins is told at once. The
PodGroup's own status follows every change (one write; the actuator keeps only the
latest); one whose only change is a number in its message ("uses 506 of its 512 GPU
quota" -> "512 of its 512", "behind 3 earlier gangs" -> "behind 2") at most every
``group_every`` seconds: otherwise every gang in a queue is written again each time a
team's usage or the queue moves, and the API writes grow with waiting gangs x changes.

Bursts are told once they settle: a gang is first told ``settle`` seconds after the
reporter first sees it, its PodGroup's status is written at most once per ``settle``
seconds (the latest at the next tick), and pods that join are told together at most
that often. While a gang's pods and PodGroup are created, and admission and gang look
at it, it passes through several wordings in a few milliseconds ("waiting for all 8
members", "waiting to be placed", "waiting behind 3,286 earlier gangs", ...), and its
counts change with each member bound or recreated; telling each step was up to 16
status writes, and pod conditions and Events, per gang: at 7,500 nodes a burst of 13,000
new gangs put ~3,300 reporter actions a second on the bus. Decisions' own Events
(``table.TABLE``) are not held back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from baton.libs.view import GangView, View, gang_key, quorum
from baton.proto import ids, keys
from baton.proto.actions import (
    GroupStatus,
    ObjectRef,
    PodRef,
    RecordEvent,
    SetGroupStatus,
    SetPodCondition,
    StatusCondition,
)
from baton.proto.admission import GangAdmitted, GangPreempted, GangQueued
from baton.proto.k8s import (
    PLUGINS_API,
    SCHEDULER_NAME,
    Node,
    NodeEvent,
    Pod,
    PodEvent,
    PodGroupEvent,
)
from baton.proto.placement import GangPlaced, GangRestarted, GangUnschedulable
from baton.proto.runner import Tick
from baton.services.reporter.core import telling
from baton.services.reporter.core.table import (
    ASSIGNED,
    RETURNED,
    TABLE,
    WAITING,
    Quarantine,
    Row,
    row_for,
)  # fmt: skip

Decision = (
    GangPlaced | GangUnschedulable | GangRestarted | GangAdmitted | GangQueued | GangPreempted
)
Input = PodEvent | PodGroupEvent | NodeEvent | Decision | Tick
Output = SetGroupStatus | SetPodCondition | RecordEvent
UPSTREAM_VERSION = "scheduling.k8s.io/v1beta1"  # what an Event's ``regarding`` names


class ReportPolicy(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    pod_every: float = 30.0  # a waiting gang's pods are told at most this often
    group_every: float = 30.0  # a PodGroup's status that only recounts: at most this often
    settle: float = 1.0  # a gang first told once seen this long, then at most this often


@dataclass(slots=True)
class Told(GangView):
    """A gang, and what the reporter last told about it."""

    done: set[str] = field(default_factory=set)  # finished members (for the counts)
    queued: str = ""  # admission's waiting reason ('' once admitted)
    verdict: GangUnschedulable | None = None
    placed: str = ""  # how it was placed, for the PodGroupScheduled condition
    status: GroupStatus | None = None  # last status written
    status_at: float = float("-inf")  # when it was written
    status_owed: bool = False  # a new wording of the same status waits for group_every
    marked: dict[str, str] = field(default_factory=dict)  # pod -> its condition's message
    pods_at: float = float("-inf")  # when its pods were last told
    owes: bool = False  # a newer message waits for the pods' interval
    seen_at: float | None = None  # when the reporter first looked at it
    first_owed: bool = False  # its first report waits for ``settle``
    fresh_at: float = float("-inf")  # when pods that joined were last told

    def settle(self, pods: dict[str, Pod]) -> bool:
        return GangView.settle(self, pods) and not self.done


@dataclass(slots=True)
class State:
    policy: ReportPolicy
    view: View[Told]
    quarantined: set[str] = field(default_factory=set)


def initial(policy: ReportPolicy | None = None) -> State:
    return State(policy=policy or ReportPolicy(), view=View(levels=(), new_gang=Told))


def wants_tick(state: State, now: float) -> bool:
    return any(g.owes or g.status_owed or g.first_owed for g in state.view.gangs.values())


def step(state: State, event: Input, now: float) -> tuple[State, tuple[Output, ...]]:
    view, out = state.view, _Out(state, now)
    match event:
        case PodEvent(op=op, pod=pod) if pod.scheduler_name == SCHEDULER_NAME:
            _pod(view, pod, deleted=op == "delete")
            out.report(gang_key(pod))
        case PodGroupEvent(op="delete", pod_group=group):
            view.delete_group(group)
            out.report(group.key)  # its pods now wait for it
        case PodGroupEvent(pod_group=group):
            view.upsert_group(group)
            out.report(group.key)
        case NodeEvent(node=node):
            out.node(node, deleted=event.op == "delete")
        case Tick():
            for key, gang in list(view.gangs.items()):
                if gang.owes or gang.status_owed or gang.first_owed:
                    out.report(key)
        case _ if type(event) in TABLE:
            out.decision(event)
    return state, tuple(out.outputs)


def _pod(view: View[Told], pod: Pod, *, deleted: bool) -> None:
    """Feed the view; keep the gang's finished members (the view drops them) for its
    counts. A deleted pod leaves them first, so a gang with nothing left is dropped."""
    gang = view.gangs.get(gang_key(pod))
    if deleted:
        if gang is not None:
            gang.done.discard(pod.key)
            gang.marked.pop(pod.key, None)
        view.delete_pod(pod)
        return
    view.upsert_pod(pod)
    gang = view.gangs.get(gang_key(pod))
    if gang is None:
        return
    if pod.phase in ("Succeeded", "Failed"):
        gang.done.add(pod.key)
    else:
        gang.done.discard(pod.key)
    if pod.node_name:
        gang.marked.pop(pod.key, None)


class _Out:
    """The outputs of one step, with what building them needs."""

    def __init__(self, state: State, now: float) -> None:
        self.state, self.now = state, now
        self.outputs: list[Output] = []

    # -- decisions --------------------------------------------------------------------

    def decision(self, event: Any) -> None:
        gang = self.state.view.gangs.get(event.gang)
        if gang is None:
            return
        match event:
            case GangUnschedulable():
                gang.verdict = event
            case GangPlaced():
                gang.verdict, gang.placed = None, TABLE[GangPlaced].note(event)
                for binding in event.bindings:
                    ref = ObjectRef(
                        kind="Pod", name=binding.pod, namespace=binding.namespace, uid=binding.uid
                    )
                    self.event(ASSIGNED, ref, ASSIGNED.note(binding))
            case GangAdmitted() | GangPreempted():
                gang.queued = ""
            case GangQueued():
                gang.queued = event.reason
            case GangRestarted():
                gang.placed, gang.verdict = "", None
        row = row_for(event)
        if not (isinstance(event, GangPlaced) and gang.group is None):  # its pods have
            for ref in self.about(gang):  # their Scheduled already: one per pod
                self.event(row, ref, row.note(event))
        self.report(gang.key)

    def node(self, node: Node, *, deleted: bool) -> None:
        on = not deleted and any(t.key == keys.UNHEALTHY for t in node.taints)
        if on == (node.name in self.state.quarantined):
            return
        (self.state.quarantined.add if on else self.state.quarantined.discard)(node.name)
        change = Quarantine(node=node.name, uid=node.uid, on=on, at=self.now)
        row = TABLE[Quarantine] if on else RETURNED
        self.event(row, ObjectRef(kind="Node", name=node.name, uid=node.uid), row.note(change))

    # -- a gang's status and its pods ---------------------------------------------------

    def report(self, key: str) -> None:
        view = self.state.view
        gang = view.gangs.get(key)
        if gang is None:
            return
        if gang.seen_at is None:
            gang.seen_at = self.now
        told = gang.status is not None or gang.marked
        gang.first_owed = not told and self.now - gang.seen_at < self.state.policy.settle
        if gang.first_owed:
            return
        pods = [
            view.pods[k] for k in sorted(gang.pending | gang.bound | gang.done) if k in view.pods
        ]
        need = quorum(gang, view.pods)
        message = telling.waiting(
            key=key, group=gang.group, pods=pods, need=need, queued=gang.queued,
            verdict=gang.verdict,
        )  # fmt: skip
        if gang.group is not None:
            self.status(gang, telling.counts(pods), need, message)
        self.tell_pods(gang, message)

    def status(self, gang: Told, counts: telling.Counts, need: int, message: str) -> None:
        group = gang.group
        assert group is not None
        if group.volcano:
            admitted = group.annotations.get(keys.ADMITTED) == "true"
            status = telling.volcano_status(counts, need, admitted=admitted, message=message,
                                            placed=gang.placed, since=self.now)  # fmt: skip
        else:
            status = telling.group_status(counts, need, message=message, placed=gang.placed,
                                          since=self.now)  # fmt: skip
        if telling.same_status(gang.status, status):
            gang.status_owed = False
            return
        policy = self.state.policy
        recount = telling.same_status(gang.status, status, numbers=False)
        gang.status_owed = self.now - gang.status_at < (
            policy.group_every if recount else policy.settle
        )
        if gang.status_owed:
            return
        gang.status, gang.status_at = status, self.now
        self.outputs.append(
            SetGroupStatus(
                id=_id("status", gang.key, group.uid, self.now, status),
                by="reporter",
                at=self.now,
                priority="status",
                reason=message,
                namespace=group.namespace,
                name=group.name,
                uid=group.uid,
                api=group.api,
                status=status,
            )
        )

    def tell_pods(self, gang: Told, message: str) -> None:
        """Mark the pending pods with the gang's message; those already marked with an
        older one only once ``pod_every`` has passed since the pods were last told."""
        view, policy = self.state.view, self.state.policy
        pending = [view.pods[k] for k in sorted(gang.pending) if k in view.pods]
        if not message:
            gang.owes = False
            return
        stale = [p for p in pending if gang.marked.get(p.key) != message]
        fresh = [p for p in stale if p.key not in gang.marked]
        due = self.now - gang.pods_at >= policy.pod_every
        joined = self.now - gang.fresh_at >= policy.settle
        told = stale if due else fresh if joined else []
        gang.owes = len(told) < len(stale)
        if not told:
            return
        gang.fresh_at = self.now
        if due:
            gang.pods_at = self.now
        for pod in told:
            gang.marked[pod.key] = message
            self.event(WAITING, pod_ref(pod), message)
        condition = StatusCondition(
            type="PodScheduled", status="False", reason="Unschedulable",
            message=f"gang {gang.key}: {message}", since=self.now,
        )  # fmt: skip
        self.outputs.append(
            SetPodCondition(
                id=_id("condition", gang.key, self.now, message, *(p.key for p in told)),
                by="reporter",
                at=self.now,
                priority="status",
                reason=message,
                gang=gang.key,
                namespace=told[0].namespace,
                pods=tuple(PodRef(name=p.name, uid=p.uid) for p in told),
                condition=condition,
            )
        )

    # -- Events -------------------------------------------------------------------------

    def about(self, gang: Told) -> list[ObjectRef]:
        """The gang's group object, or each of its pods when it has none."""
        group = gang.group
        if group is not None:
            version = UPSTREAM_VERSION if group.upstream else group.api or PLUGINS_API
            ref = ObjectRef(kind="PodGroup", name=group.name, namespace=group.namespace,
                            uid=group.uid, api_version=version)  # fmt: skip
            return [ref]
        pods = self.state.view.pods
        return [pod_ref(pods[k]) for k in sorted(gang.pending | gang.bound) if k in pods]

    def event(self, row: Row, ref: ObjectRef, note: str) -> None:
        event_id = _id("event", row.reason, ref.kind, ref.namespace, ref.name, ref.uid,
                       self.now, note)  # fmt: skip
        self.outputs.append(
            RecordEvent(
                id=event_id,
                by="reporter",
                at=self.now,
                priority="status",
                regarding=ref,
                reason=row.reason,
                note=note,
                event_type=row.type,
                action=row.action,
                controller=row.by,
            )
        )


def _id(what: str, *parts: object) -> str:
    """Stable for the same output from the same inputs, and distinct for two outputs of
    one instant (the bridge stamps a whole watch chunk with one ``at``): the content is
    part of the id, so JetStream's dedup never drops a newer status as a repeat."""
    return ids.make(what, *(f"{p:.6f}" if isinstance(p, float) else
                            msgspec.json.encode(p).decode() if isinstance(p, msgspec.Struct)
                            else p for p in parts))  # fmt: skip


def pod_ref(pod: Pod) -> ObjectRef:
    return ObjectRef(kind="Pod", name=pod.name, namespace=pod.namespace, uid=pod.uid)
