"""The health core: pure ``(state, event, now) -> (state, outputs)``.

Evidence comes in (node conditions, GPU and node reports, Xids, heartbeat silences,
preflight pods); each input updates one node's signals (``nodes``) and moves that
node through the state machine (``moving``, ``states``). A ``Tick`` moves the nodes
whose time came (a duration held, a grace over, a check overdue), starts preflight
pods in free test slots and periodic checks of idle nodes (``checks``). The rails
(``rails``) hold back verdicts past a domain's level and pace returns. No I/O, no
clock: replaying the same inputs gives the same decisions.
"""

from __future__ import annotations

from baton.proto import keys
from baton.proto.actions import ActionResult
from baton.proto.health import Control, Evidence, HealthPolicy, Heard, Note, Silence
from baton.proto.k8s import Node, NodeEvent, PodEvent, ResourceSliceEvent
from baton.proto.runner import Tick
from baton.proto.telemetry import GpuReport, NodeReport, XidEvent
from baton.services.health.core import checks, devices, moving, rules, sweeping
from baton.services.health.core.model import State, initial
from baton.services.health.core.moving import Output, decide
from baton.services.health.core.nodes import OUT, Check, NodeRecord, read_note
from baton.services.health.core.rails import domains

__all__ = ["Input", "Output", "State", "initial", "step", "wants_tick"]

Input = (
    NodeEvent | PodEvent | GpuReport | NodeReport | XidEvent | Silence | Heard | Control
    | ActionResult | ResourceSliceEvent | Tick
)  # fmt: skip
Policy = HealthPolicy


def wants_tick(state: State, now: float) -> bool:
    """Time alone would move some node; an idle healthy cluster gets no ticks."""
    return state.slots_changed or any(rec.deadline <= now for rec in state.nodes.values())


def step(state: State, event: Input, now: float) -> tuple[State, tuple[Output, ...]]:
    s, policy = state, state.policy
    out: list[Output] = []
    match event:
        case Tick():
            out = cycle(s, now)
        case NodeEvent(op="delete", node=node):
            forget(s, node.name)
        case NodeEvent(node=node):
            out = on_node(s, node, now)
        case PodEvent():
            out = on_pod(s, event, now)
            out += sweeping.on_pod(s, event.pod, deleted=event.op == "delete", now=now)
        case GpuReport(node=name):
            rec = s.record(name)
            rec.sync("telemetry.gpu", rules.gpu_signals(event, policy), now, policy)
            devices.on_gpus(rec.devices, event)
            rec.sync("dra", devices.signals(rec.devices), now, policy)
            out = decide(s, rec, now)
        case NodeReport(node=name):
            rec = s.record(name)
            rec.sync("telemetry.node", rules.node_signals(event, policy), now, policy)
            devices.on_node(rec.devices, event)
            rec.sync("dra", devices.signals(rec.devices), now, policy)
            out = decide(s, rec, now)
        case ResourceSliceEvent():
            out = on_slice(s, event, now)
        case XidEvent(node=name):
            out = on_xid(s, event, now)
        case Silence(node=name):
            rec = s.record(name)
            detail = f"no heartbeat for {now - event.last_beat:.0f} s"
            rec.start("heartbeat", rules.HEARTBEAT, detail, now=now, source="health.silence",
                      policy=policy)  # fmt: skip
            out = decide(s, rec, now)
        case Heard(node=name):
            rec = s.record(name)
            rec.end("heartbeat")
            out = decide(s, rec, now)
        case Control():
            s.paused, s.pause_reason = event.paused, event.reason
            out = [o for rec in list(s.nodes.values()) for o in decide(s, rec, now)]
        case ActionResult():
            out = on_result(s, event, now)
    out += promote(s, now)
    return s, tuple(out)


# -- object events --------------------------------------------------------------------


def on_node(s: State, node: Node, now: float) -> list[Output]:
    s.view.upsert_node(node)
    rec = s.record(node.name)
    first = not rec.seen
    rec.seen, rec.uid = True, node.uid
    rec.opt_out = node.labels.get(keys.HEALTH_OPT_OUT) == "true"
    rec.cordoned = node.unschedulable
    paths = s.view.nodes[node.name].paths
    rack = paths[2] if len(paths) > 2 else None
    block = paths[1] if len(paths) > 1 else None
    s.rails.place(node.name, domains(rack=rack, block=block, pool=node.labels.get(keys.POOL, "")))
    label = node.labels.get(keys.REMEDIATION, "")
    if rec.state == "remediating" and rec.label:
        rec.label_seen |= label == rec.label
        rec.fixed |= rec.label_seen and not label
    rec.sync("k8s.node", rules.condition_signals(node.conditions), now, s.policy)
    shown = rec.shown
    rec.shown = frozenset(t.key for t in node.taints if t.key in keys.HEALTH_TAINTS)
    if first:
        restore(s, rec, node, now)
    out = decide(s, rec, now)
    if keys.PREFLIGHT in rec.shown - shown and rec.state == "validating":
        s.slots_changed = True  # its preflight taint is on: the pod may be asked (next tick)
    return out


def restore(s: State, rec: NodeRecord, node: Node, now: float) -> None:
    """First sight of a node: resume where its annotation (or Baton's taints) say it was,
    or mark a node that joined lately for its first preflight."""
    rec.asked = frozenset(t.key for t in node.taints if t.key in keys.HEALTH_TAINTS)
    rec.label = node.labels.get(keys.REMEDIATION, "")
    note = read_note(node.annotations.get(keys.HEALTH, ""))
    new = now - node.created_at < s.policy.new_node_s
    # A new node that joined under ``baton.io/preflight`` alone (kubelet's
    # ``--register-with-taints``) is validating, as a new node: nothing could land on it,
    # and marking it cost no write. Not a returning one: slow start is for nodes coming
    # back from repair, and held a brand-new cluster's nodes back by the thousand.
    joined = note is None and new and rec.asked == {keys.PREFLIGHT} and not rec.label
    if joined:
        note = Note(state="validating", since=now, reason="a new node, joined under preflight")
    elif note is None and rec.asked:
        note = _from_marks(rec, now)
    if note is not None:
        rec.restore(note, now)
        rec.returning = rec.returning and not joined
        if rec.state in ("suspect", "withheld"):
            rec.state = "healthy"
        if rec.state == "validating":
            rec.check = Check(why="returning" if rec.returning else "first check")
        s.rails.set_out(rec.name, rec.state in OUT)
        rec.label_seen = bool(rec.label) and rec.label == rec.remedy
        rec.recheck_at = (checks.due_at(rec, s.policy) if rec.state == "healthy"
                          else rec.since + s.policy.remediation_recheck_s)  # fmt: skip
        return
    rec.first_check = s.policy.preflight and new and not rec.opt_out
    rec.recheck_at = checks.due_at(rec, s.policy)


def _from_marks(rec: NodeRecord, now: float) -> Note | None:
    """No annotation but Baton's taints: infer the state from them."""
    order = (("remediating", bool(rec.label)), ("draining", keys.DRAINING in rec.asked),
             ("quarantined", keys.UNHEALTHY in rec.asked),
             ("validating", keys.PREFLIGHT in rec.asked))  # fmt: skip
    marks = sorted(rec.asked) + ([f"{keys.REMEDIATION}={rec.label}"] if rec.label else [])
    seen = (Evidence(rule="restored", detail=f"{', '.join(marks)} found on the node", since=now),)
    for state, found in order:
        if found:
            return Note(state=state, since=now,  # type: ignore[arg-type]
                        reason="inferred from Baton's marks on the node", remedy=rec.label,
                        evidence=seen)  # fmt: skip
    return None


def forget(s: State, name: str) -> None:
    s.view.delete_node(name)
    s.rails.remove(name)
    rec = s.nodes.pop(name, None)
    if rec is not None and rec.check is not None:
        s.asks.pop(rec.check.action, None)
    s.freed = True


def on_slice(s: State, event: ResourceSliceEvent, now: float) -> list[Output]:
    """A DRA driver's slice: its devices are compared with the agent's reports."""
    piece, deleted = event.resource_slice, event.op == "delete"
    if not piece.node or (deleted and piece.node not in s.nodes):  # its node is gone
        return []
    rec = s.record(piece.node)
    devices.on_slice(rec.devices, piece, deleted=deleted)
    rec.sync("dra", devices.signals(rec.devices), now, s.policy)
    return decide(s, rec, now)


def on_pod(s: State, event: PodEvent, now: float) -> list[Output]:
    pod, deleted = event.pod, event.op == "delete"
    s.view.apply(event)
    rec = s.nodes.get(pod.node_name) if pod.node_name else None
    if rec is None or rec.state not in ("quarantined", "draining", "validating"):
        return []
    out: list[Output] = []
    if checks.is_preflight(pod) and rec.state == "validating":
        outcome = checks.on_pod(rec, pod, deleted=deleted, now=now, policy=s.policy)
        if outcome == "failed" and rec.check is not None and rec.check.why == "recheck":
            out += _put_off_if_busy(s, rec, now)
        out += decide(s, rec, now)
        if outcome:
            s.slots_changed = True  # a slot is free: the next tick asks for the next pod
        return out
    return decide(s, rec, now)


def on_xid(s: State, event: XidEvent, now: float) -> list[Output]:
    rule = rules.xid_rule(event.xid)
    rec = s.record(event.node)
    key = f"{rule.name}:{event.gpu}"
    if not rule.acts or key in rec.signals:
        return []
    where = f"GPU {event.gpu}" + (f" ({event.bus_id})" if event.bus_id else "")
    if event.gpu_instance >= 0:  # a MIG instance's fault is its GPU's: keyed by the GPU
        where += f", MIG instance {event.gpu_instance}"
    detail = f"{where}: Xid {event.xid}" + (f", {event.text}" if event.text else "")
    rec.start(key, rule, detail, now=now, source="telemetry.xid", policy=s.policy)
    return decide(s, rec, now)


def on_result(s: State, result: ActionResult, now: float) -> list[Output]:
    if (swept := sweeping.on_result(s, result, now)) is not None:
        return list(swept)
    if result.action_id in s.marks:
        moving.marked(s, result.action_id, result.outcome, now)
        return []
    name = s.asks.get(result.action_id)
    rec = s.nodes.get(name) if name else None
    if rec is None or not checks.on_result(rec, result):
        return []
    return decide(s, rec, now)


def promote(s: State, now: float) -> list[Output]:
    """A node came back (or left): withheld verdicts go through while there is room."""
    if not s.freed:
        return []
    s.freed = False
    held = sorted((r for r in s.nodes.values() if r.state == "withheld"), key=lambda r: r.since)
    return [o for rec in held for o in decide(s, rec, now)]


# -- the cycle --------------------------------------------------------------------------


def cycle(s: State, now: float) -> list[Output]:
    out: list[Output] = []
    for rec in sorted((r for r in s.nodes.values() if r.deadline <= now), key=_by_deadline):
        if rec.remark_at <= now:
            out += moving.mark(s, rec, now, noted=True, again=True)
        if rec.state == "validating":
            out += checks.lost(rec, s.policy, now)
            why = checks.overdue(rec, s.policy, now)
            if why:
                checks.fail(rec, why, now=now, policy=s.policy)
        out += decide(s, rec, now)
    out += start_checks(s, now)
    out += start_rechecks(s, now)
    return out


def start_checks(s: State, now: float) -> list[Output]:
    """Ask for preflight pods on validating nodes while test slots are free. On ticks,
    not on each pod outcome: a pass sorts every validating node, and a new 7,500-node
    cluster has that many, with as many outcomes (three quarters of health's time)."""
    s.slots_changed = False
    validating = [r for r in s.nodes.values() if r.state == "validating" and r.check is not None]
    testing = sum(1 for r in validating if r.check and r.check.pod and not r.check.passed)
    waiting = [r for r in validating if r.check and not r.check.pod and not r.check.passed
               and checks.tainted(r)
               and (r.check.tries == 0 or checks.retry_at(r.check) <= now)]  # fmt: skip
    slots = checks.slots(s.policy, len(s.nodes))
    out: list[Output] = []
    for rec in sorted(waiting, key=_check_order):  # rechecks last: they have fewer slots
        assert rec.check is not None
        if testing >= (s.policy.max_testing if rec.check.why == "recheck" else slots):
            break
        if rec.check.why == "recheck" and checks.workload(s.view, rec.name):
            rec.check.put_off = True
            out += decide(s, rec, now)
            continue
        asked = checks.ask(s.view, rec, rec.check, s.policy, now)
        out += asked.outputs
        if not asked.waiting:
            s.asks[rec.check.action] = rec.name
            testing += 1
        rec.deadline = moving.deadline(s, rec, now)
    return out


def start_rechecks(s: State, now: float) -> list[Output]:
    """Periodic checks of idle nodes due for one, while no other check waits for a slot."""
    if s.paused or not s.policy.preflight:
        return []
    free = s.policy.max_testing - sum(1 for r in s.nodes.values() if r.state == "validating")
    if free <= 0:
        return []
    due = [r for r in s.nodes.values() if r.state == "healthy" and r.seen and not r.opt_out
           and not r.cordoned and r.recheck_at <= now]  # fmt: skip
    idle = [r for r in due if not checks.workload(s.view, r.name)]
    for rec in due:
        if rec not in idle:
            rec.recheck_at = now + s.policy.recheck_retry_s
            rec.deadline = moving.deadline(s, rec, now)
    out: list[Output] = []
    for rec in checks.order(s.view, idle)[:free]:
        words = "never validated" if not rec.validated else f"last validated at {rec.validated:.0f}"
        out += moving.move(s, rec, "validating", f"due for its periodic check ({words})", now)
    out += start_checks(s, now) if out else []
    return out


def _put_off_if_busy(s: State, rec: NodeRecord, now: float) -> list[Output]:
    """A periodic check that failed while work landed on the node proves nothing."""
    if rec.check is not None and checks.workload(s.view, rec.name):
        rec.end("preflight")
        rec.check.put_off = True
    return []


_WHY_ORDER = {"returning": 0, "first check": 1, "recheck": 2}


def _check_order(rec: NodeRecord) -> tuple[int, float, str]:
    why = rec.check.why if rec.check is not None else "recheck"
    return (_WHY_ORDER.get(why, 3), rec.since, rec.name)


def _by_deadline(rec: NodeRecord) -> tuple[float, str]:
    return (rec.deadline, rec.name)
