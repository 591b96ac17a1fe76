"""What ``baton up`` and ``baton status`` show: the cluster and Baton, built from bus events.

Pure: events go in (``apply``, ``record``), a ``Summary`` comes out (``summarize``),
and ``text`` prints it as plain lines (``baton status``, and ``baton up`` when its
output is not a terminal); ``services/baton/services/cli/screen.py`` draws the same summary full
screen. The view reads only the bus, so showing it costs the API server nothing.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec

from baton.libs.view.claimed import Claimed
from baton.proto import keys
from baton.proto.actions import ActionResult, CreatePod, SetTeamStatus, TeamStatus
from baton.proto.admission import (
    GangAdmitted,
    GangPreempted,
    GangQueued,
    GangReleased,
    TeamsLoaded,
    WebhookServing,
)
from baton.proto.bandwidth import Allocation
from baton.proto.health import Control, StateChanged, Withheld
from baton.proto.k8s import (
    GPU,
    SCHEDULER_NAME,
    DeviceClassEvent,
    K8sEvent,
    MachineDeployment,
    MachineDeploymentEvent,
    Node,
    NodeEvent,
    Pod,
    PodEvent,
    PodGroup,
    PodGroupEvent,
    ResourceClaimEvent,
    ResourceSliceEvent,
)
from baton.proto.runner import Started
from baton.proto.teams import TeamConfig, is_default
from baton.services.cli.teams import TeamRow, shown_row, team_rows

TERMINAL = {"Succeeded", "Failed"}
RECENT = 12  # decisions kept on screen
CREATE_POD = str(CreatePod.__struct_config__.tag)  # an ActionResult's action_type
T = TypeVar("T")


@dataclass
class ServiceHealth:
    name: str
    alive: bool
    ready: bool
    detail: str = ""  # e.g. its ops port, or where and when it started
    probed: bool = True  # False: known only from what it left on the bus, not asked

    @property
    def mark(self) -> str:
        if not self.probed:
            return "seen"
        return "ok" if self.alive and self.ready else ("starting" if self.alive else "DOWN")


@dataclass
class View:
    nodes: dict[str, Node] = field(default_factory=dict)
    pods: dict[str, Pod] = field(default_factory=dict)
    groups: dict[str, PodGroup] = field(default_factory=dict)
    pools: dict[str, MachineDeployment] = field(default_factory=dict)  # by name
    recent: deque[str] = field(default_factory=lambda: deque(maxlen=RECENT))
    counts: Counter[str] = field(default_factory=Counter)  # bus messages by domain
    counted: Counter[str] = field(default_factory=Counter)  # counts at the last rate update
    rates: dict[str, float] = field(default_factory=dict)  # messages/s by domain
    teams: TeamConfig | None = None  # admission's, once it started or reloaded
    started: dict[str, Started] = field(default_factory=dict)  # service -> its last start
    queued: dict[str, GangQueued] = field(default_factory=dict)  # gang -> why it waits
    changed: bool = True  # objects or teams changed since the team rows were computed
    seen: dict[str, str] = field(default_factory=dict)  # service -> what the streams say of it
    streams: dict[str, int] = field(default_factory=dict)  # stream -> messages it holds
    withheld: set[str] = field(default_factory=set)  # nodes a health rail holds back
    paused: bool = False  # health's pause switch
    egress: Allocation | None = None  # the bandwidth service's last round
    said: list[str] | None = None  # plain output: decisions not printed yet (None: a screen)
    preflight_asks: dict[str, str] = field(default_factory=dict)  # node -> its last ask's id
    refused: dict[str, str] = field(default_factory=dict)  # create-pod id -> the API's error
    team_status: dict[str, TeamStatus] = field(default_factory=dict)  # as admission shows it
    webhook: WebhookServing | None = None  # whether admission's last start serves its webhook
    claimed: Claimed = field(default_factory=Claimed)  # GPUs pods ask through DRA claims

    def apply(self, event: K8sEvent) -> None:
        match event:
            case NodeEvent(node=node):
                _put(self.nodes, node.name, self.claimed.node(node), event.op)
            case PodEvent(op="delete", pod=pod):
                self.claimed.forget(pod)
                _put(self.pods, pod.key, pod, event.op)
            case PodEvent(pod=pod):  # GPUs claimed through DRA count as requested ones
                _put(self.pods, pod.key, self.claimed.pod(pod), event.op)
            case ResourceSliceEvent() | DeviceClassEvent() | ResourceClaimEvent():
                for pod in self.claimed.apply(event):
                    self.pods[pod.key] = pod
                name = event.resource_slice.node if isinstance(event, ResourceSliceEvent) else ""
                if name in self.nodes:
                    self.nodes[name] = self.claimed.node(self.nodes[name])
            case PodGroupEvent(pod_group=group):
                _put(self.groups, group.key, group, event.op)
            case MachineDeploymentEvent(machine_deployment=md):
                _put(self.pools, md.name, md, event.op)
        self.changed = True

    def record(self, event: Any) -> None:
        """A runner start, an admission or a health decision: what the team, service and
        health lines need."""
        match event:
            case Started(service=service):
                self.started[service] = event
                if service == "admission" and self.teams is None and event.policy:
                    self.teams = _config(event.policy)
                    self.changed = True
            case TeamsLoaded(config=config):
                self.teams, self.changed = config, True
            case Allocation():
                self.egress = event
            case WebhookServing():
                self.webhook = event
            case GangQueued(gang=gang):
                self.queued[gang] = event
            case GangAdmitted(gang=gang) | GangReleased(gang=gang) | GangPreempted(gang=gang):
                self.queued.pop(gang, None)
            case Withheld(node=node):
                self.withheld.add(node)
            case StateChanged(node=node, state=state):
                (self.withheld.add if state == "withheld" else self.withheld.discard)(node)
            case Control(paused=paused):
                self.paused = paused
            case SetTeamStatus(team=team, status=status):
                if event.remove:
                    self.team_status.pop(team, None)
                else:
                    self.team_status[team] = status
            case CreatePod(pod=pod) if pod.labels.get(keys.PREFLIGHT) == "true":
                self.preflight_asks[pod.node_name] = event.id
            case ActionResult(action_id=action_id) if event.action_type == CREATE_POD:
                if event.outcome == "failed":
                    self.refused[action_id] = event.error
                else:
                    self.refused.pop(action_id, None)

    def note(self, line: str, *, decision: bool = False) -> None:
        self.recent.append(line)
        if decision and self.said is not None:
            self.said.append(line)


def _config(policy: dict[str, Any]) -> TeamConfig | None:
    try:
        return msgspec.convert(policy, TeamConfig)
    except msgspec.ValidationError:
        return None


def _put(table: dict[str, T], key: str, value: T, op: str) -> None:
    if op == "delete":
        table.pop(key, None)
    else:
        table[key] = value


def live(pod: Pod) -> bool:
    return pod.phase not in TERMINAL and not pod.terminating


def gpu_usage(view: View) -> tuple[int, int]:
    total = sum(n.allocatable.get(GPU, 0) for n in view.nodes.values())
    used = sum(p.requests.get(GPU, 0) for p in view.pods.values() if p.node_name and live(p))
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
        running = [p for p in pods if live(p)]
        if pods and not running:
            states["done"] += 1
        elif any(p.node_name for p in running):
            states["running"] += 1
        else:
            states["waiting"] += 1
    return states


@dataclass(frozen=True)
class Summary:
    title: str
    endpoints: tuple[tuple[str, str], ...]  # (what, where): NATS, KUBECONFIG, ops ports, ...
    capacity: tuple[str, ...]
    health: tuple[str, ...]
    workload: tuple[str, ...]
    webhook: tuple[str, ...]  # whether it serves, and gangs' pods that never passed it
    teams: tuple[TeamRow, ...] | None  # None: no admission service on this bus
    egress: tuple[str, ...]  # each team's share of the internet egress and its use
    services: tuple[ServiceHealth, ...]
    bus: str
    recent: tuple[str, ...]


def summarize(
    view: View,
    services: list[ServiceHealth],
    *,
    title: str,
    teams: tuple[TeamRow, ...] | None,
    endpoints: tuple[tuple[str, str], ...] = (),
) -> Summary:
    """``teams``: from ``teams_now`` (a pass over every object: callers choose how often)."""
    return Summary(
        title=title,
        endpoints=endpoints,
        capacity=capacity_lines(view),
        health=health_lines(view),
        workload=workload_lines(view),
        webhook=webhook_lines(view),
        teams=teams,
        egress=egress_lines(view.egress),
        services=tuple(services),
        bus=_rates(view.rates) if view.rates else _sizes(view.streams),
        recent=tuple(view.recent),
    )


def teams_now(view: View, *, now: float, replay: bool = True) -> tuple[TeamRow, ...] | None:
    """The team rows, or None when no admission service has said what the teams are:
    as admission last showed each team (its ``SetTeamStatus``), or, until it has shown
    every one, from a replay of its core over every object (``replay``: ``baton status``,
    once; ``baton up`` waits for admission instead: at 7,500 nodes and 11,000 gangs a
    replay every 2 s took a core's third while admission caught up)."""
    view.changed = False
    if view.teams is None:
        return None
    if all(t.name in view.team_status for t in view.teams.teams):
        return tuple(shown_row(t.name, view.team_status[t.name]) for t in view.teams.teams)
    return team_rows(view, view.teams, now=now) if replay else None


def capacity_lines(view: View) -> tuple[str, ...]:
    ready = sum(1 for n in view.nodes.values() if n.ready and not n.unschedulable)
    used, total = gpu_usage(view)
    share = f"{100 * used / total:.0f}%" if total else "-"
    lines = [
        f"nodes {len(view.nodes)} ({ready} ready)  gpus {used}/{total} allocated ({share})",
    ]
    pools: dict[str, list[Node]] = {}
    for node in view.nodes.values():
        pools.setdefault(node.labels.get(keys.POOL, "(no pool)"), []).append(node)
    used_on: Counter[str] = Counter()
    for pod in view.pods.values():
        if pod.node_name and live(pod):
            used_on[pod.node_name] += pod.requests.get(GPU, 0)
    for pool, nodes in sorted(pools.items()):
        gpus = sum(n.allocatable.get(GPU, 0) for n in nodes)
        busy = sum(used_on[n.name] for n in nodes)
        line = f"pool {pool}: {len(nodes)} nodes, {busy}/{gpus} gpus"
        if (md := view.pools.get(pool)) is not None:
            line += f"  (machines {md.ready_replicas} ready / {md.replicas} asked"
            if md.max_size is not None:
                line += f", size {md.min_size or 0}..{md.max_size}"
            line += f"{', ' + md.reason if md.reason else ''})"
        lines.append(line)
    return tuple(lines)


def health_nodes(view: View) -> dict[str, list[str]]:
    """Nodes by what Baton's health marks on them say (names sorted)."""
    found: dict[str, list[str]] = {"quarantined": [], "draining": [], "remediating": [],
                                   "validating": []}  # fmt: skip
    for name, node in sorted(view.nodes.items()):
        taints = {t.key for t in node.taints}
        if keys.REMEDIATION in node.labels:
            found["remediating"].append(name)
        elif keys.DRAINING in taints:
            found["draining"].append(name)
        elif keys.UNHEALTHY in taints:
            found["quarantined"].append(name)
        if keys.PREFLIGHT in taints:
            found["validating"].append(name)
    return found


def preflight_refused(view: View) -> dict[str, str]:
    """Validating nodes whose last preflight pod the API server refused to create, and
    its error (health asks again, backing off; the node stays out of service until then)."""
    validating = health_nodes(view)["validating"]
    return {name: view.refused[ask] for name in validating
            if (ask := view.preflight_asks.get(name)) in view.refused}  # fmt: skip


def health_lines(view: View) -> tuple[str, ...]:
    """Nodes out of service, and why: the health service's states as its marks show them
    (with the first names), the verdicts its rails hold back, not Ready, cordoned."""
    parts = []
    for state, names in health_nodes(view).items():
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        parts.append(f"{state} {len(names)}" + (f" ({shown})" if names else ""))
    parts.append(f"withheld {len(view.withheld)}")
    if refused := preflight_refused(view):
        names = sorted(refused)
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        why = Counter(refused.values()).most_common(1)[0][0]
        parts.append(f"preflight pod refused {len(names)} ({shown}): {why}")
    parts.append(f"not ready {sum(1 for n in view.nodes.values() if not n.ready)}")
    parts.append(f"cordoned {sum(1 for n in view.nodes.values() if n.unschedulable)}")
    return ("  ".join(parts) + ("  PAUSED" if view.paused else ""),)


def workload_lines(view: View) -> tuple[str, ...]:
    phases: Counter[str] = Counter(p.phase for p in view.pods.values())
    unbound = sum(1 for p in view.pods.values() if p.phase == "Pending" and not p.node_name)
    gangs = gang_states(view)
    order = ("Pending", "Running", "Succeeded", "Failed")
    return (
        "pods  " + "  ".join(f"{p.lower()} {phases.get(p, 0)}" for p in order)
        + f"  (unbound {unbound})",
        "gangs " + "  ".join(f"{k} {gangs.get(k, 0)}" for k in ("waiting", "running", "done")),
    )  # fmt: skip


def unhooked(view: View) -> list[Pod]:
    """Unbound pods of gangs, in a team's namespace, that kept another scheduler: the
    webhook hands every one to Baton (``schedulerName: baton``), so these never passed
    it, and Baton never places them."""
    teams = view.teams
    spaces = None if teams is None or is_default(teams) else {
        ns for team in teams.teams for ns in team.namespaces}  # fmt: skip
    return sorted(
        (p for p in view.pods.values()
         if p.gang and not p.node_name and p.phase == "Pending"
         and p.scheduler_name != SCHEDULER_NAME and (spaces is None or p.namespace in spaces)),
        key=lambda p: p.key,
    )  # fmt: skip


def webhook_lines(view: View) -> tuple[str, ...]:
    """Whether admission serves its webhook, and the pods that show it is not called."""
    lines = []
    if (said := view.webhook) is not None:
        where = f" on {said.instance}" if said.instance else ""
        lines.append(f"serving on :{said.port}{where}" if said.serving else
                     f"OFF{where}: {said.reason}; quotas and team taints still run")  # fmt: skip
    if missed := unhooked(view):
        first = missed[0]
        lines.append(
            f"{len(missed)} pods of gangs never passed it and wait for no scheduler "
            f"({first.key} kept schedulerName {first.scheduler_name}): is it registered? "
            "kubectl get mutatingwebhookconfiguration baton -o yaml; baton install-webhook"
        )
    return tuple(lines)


def egress_lines(allocation: Allocation | None) -> tuple[str, ...]:
    """Each team's share of the egress capacity, and what it sends and may send (Mbit/s)."""
    if allocation is None:
        return ("(no bandwidth service on this bus)",)
    cap, m = allocation.capacity_bps or 1, 1e6
    return tuple(
        f"{t.team} {100 * t.assigned_bps // cap}%  uses {t.used_bps / m:.0f} of "
        f"{t.assigned_bps / m:.0f} Mbit/s  ({t.pods} pods, {t.tier}, weight {t.weight:g})"
        for t in allocation.teams
    ) or (f"no shaped pods; capacity {cap / m:.0f} Mbit/s",)


def _sizes(sizes: dict[str, int]) -> str:
    if not sizes:
        return "quiet"
    return "  ".join(f"{name.upper()} {count} msgs" for name, count in sizes.items())


def _rates(rates: dict[str, float]) -> str:
    busiest = sorted(rates.items(), key=lambda kv: -kv[1])
    return "  ".join(f"{domain} {rate:.0f}/s" for domain, rate in busiest)


def text(summary: Summary) -> str:
    """The summary as plain lines, for scripts and logs: nothing is cut short."""
    lines = [summary.title]
    lines += [f"  {what:<12} {where}" for what, where in summary.endpoints]
    lines += ["capacity", *(f"  {line}" for line in summary.capacity)]
    lines += ["health    " + "  ".join(summary.health)]
    lines += ["workload", *(f"  {line}" for line in summary.workload)]
    lines += ["webhook", *(f"  {line}" for line in summary.webhook)] if summary.webhook else []
    if summary.teams is None:
        lines.append("teams     (no admission service on this bus)")
    else:
        lines.append("teams")
        lines += [f"  {row.line()}" for row in summary.teams]
    lines += ["egress", *(f"  {line}" for line in summary.egress)]
    lines.append("services  " + "  ".join(f"{s.name}:{s.mark}" for s in summary.services))
    lines += [f"  {s.name}: {s.detail}" for s in summary.services if s.detail]
    lines.append("bus       " + summary.bus)
    lines += ["recent:", *(f"  {line}" for line in summary.recent)]
    return "\n".join(lines)
