"""Team taints: which team owns each node, and the label and taint actions that show it.

A node belongs to the team owning its ``baton.io/pool`` label value; otherwise to a
team that asked for ``nodes: N`` (nodes in no owned pool, assigned by name and kept:
a new node never moves an assigned one); otherwise to nobody. The default config (no
teams) owns every node and writes nothing. Moving a node only changes its label and
``NoSchedule`` taint, so running pods stay; new pods follow the new owner.
"""

from __future__ import annotations

from baton.libs.view import NodeView
from baton.proto import ids, keys
from baton.proto.actions import SetLabels, SetTaint
from baton.proto.admission import NodeTeamChanged
from baton.proto.k8s import Node, Taint
from baton.services.admission.core.state import State, node_gpus
from baton.services.admission.teams import is_default

Output = SetLabels | SetTaint | NodeTeamChanged


def owner(state: State, node: NodeView) -> str:
    if is_default(state.config):
        return state.config.teams[0].name
    if node.pool in state.pool_team:
        return state.pool_team[node.pool]
    return state.counted.get(node.name, "")


def upsert(state: State, node: Node, now: float) -> list[Output]:
    """A node appeared or changed: assign it if a team is short of nodes, then reconcile."""
    state.view.upsert_node(node)
    if _poolless(state, state.nodes[node.name]) and node.name not in state.counted:
        for team in state.config.teams:
            if team.nodes and _count(state, team.name) < team.nodes:
                _assign(state, node.name, team.name)
                break
    return reconcile(state, node.name, now)


def delete(state: State, name: str, now: float) -> list[Output]:
    state.view.delete_node(name)
    state.asked.pop(name, None)
    team = _unassign(state, name)
    _set_owner(state, name, "")
    state.node_team.pop(name, None)
    if not team:
        return []
    outputs: list[Output] = []
    for node_name in _fill(state, team):
        outputs.extend(reconcile(state, node_name, now))
    return outputs


def reassign_all(state: State, now: float) -> list[Output]:
    """After a config change: drop count assignments that no longer hold, refill, reconcile."""
    wanted = {t.name: t.nodes for t in state.config.teams}
    for name in sorted(state.counted):
        node = state.nodes.get(name)
        assigned = state.counted[name]
        if (
            node is None
            or not _poolless(state, node)
            or _count(state, assigned) > wanted.get(assigned, 0)
        ):
            _unassign(state, name)
    for team in state.config.teams:
        if team.nodes:
            _fill(state, team.name)
    outputs: list[Output] = []
    for name in sorted(state.nodes):
        outputs.extend(reconcile(state, name, now))
    return outputs


def reconcile(state: State, name: str, now: float) -> list[Output]:
    """Ask the actuator for the label and taint the node's owner wants, once per observation."""
    known = state.nodes[name]
    node, team = known.node, owner(state, known)
    previous = state.node_team.get(name, "")
    if team != previous or name not in state.node_team:
        _set_owner(state, name, team)
    elif state.contribution.get(name, ("", 0))[1] != (node_gpus(known) if team else 0):
        _set_owner(state, name, team)  # same owner, its GPUs changed
    outputs: list[Output] = []
    if team != previous and name in state.node_team:
        outputs.append(NodeTeamChanged(at=now, node=name, team=team, previous=previous))
    state.node_team[name] = team
    if is_default(state.config) and keys.TEAM not in node.labels and not _team_taints(node):
        return outputs
    spec = state.specs.get(team)
    want_label = None if is_default(state.config) or not team else team
    want_taint = team if spec is not None and spec.taint and not is_default(state.config) else ""
    have_taint = _team_taints(node)
    label_ok = node.labels.get(keys.TEAM) == want_label
    taint_ok = have_taint == ((want_taint,) if want_taint else ())
    if label_ok and taint_ok:
        state.asked.pop(name, None)
        return outputs
    seen = node.resource_version  # one ask per observation of the node
    ask = f"{want_label}|{want_taint}|{seen}"
    if state.asked.get(name) == ask:
        return outputs
    state.asked[name] = ask
    reason = f"owned by team {team!r}" if team else "owned by no team"
    if not label_ok:
        outputs.append(
            SetLabels(
                id=ids.make("label", name, want_label or "", seen),
                by="admission",
                at=now,
                priority="admission",
                reason=reason,
                node=name,
                labels={keys.TEAM: want_label},
            )
        )
    if not taint_ok:
        taint = Taint(key=keys.TEAM, value=want_taint or "", effect="NoSchedule")
        outputs.append(
            SetTaint(
                id=ids.make("taint", name, want_taint, seen),
                by="admission",
                at=now,
                priority="admission",
                reason=reason,
                node=name,
                taint=taint,
                present=bool(want_taint),
            )
        )
    return outputs


def _team_taints(node: Node) -> tuple[str, ...]:
    return tuple(t.value for t in node.taints if t.key == keys.TEAM and t.effect == "NoSchedule")


def _set_owner(state: State, name: str, team: str) -> None:
    """Move the node's GPUs to ``team``'s capacity."""
    contribution, capacity = state.contribution, state.capacity
    old_team, old_gpus = contribution.pop(name, ("", 0))
    if old_team:
        capacity[old_team] = capacity.get(old_team, 0) - old_gpus
    node = state.nodes.get(name)
    if team and node is not None:
        gpus = node_gpus(node)
        capacity[team] = capacity.get(team, 0) + gpus
        contribution[name] = (team, gpus)


def _poolless(state: State, node: NodeView) -> bool:
    return node.pool not in state.pool_team


def _count(state: State, team: str) -> int:
    return state.counts.get(team, 0)


def _assign(state: State, name: str, team: str) -> None:
    state.counted[name] = team
    state.counts[team] = state.counts.get(team, 0) + 1


def _unassign(state: State, name: str) -> str:
    if name not in state.counted:
        return ""
    team = state.counted.pop(name)
    state.counts[team] -= 1
    return team


def _fill(state: State, team: str) -> list[str]:
    """Assign unowned pool-less nodes (by name) to ``team`` up to its ``nodes`` count."""
    spec = state.specs.get(team)
    want = spec.nodes if spec is not None else 0
    added: list[str] = []
    if _count(state, team) >= want:
        return added
    for name in sorted(state.nodes):
        if _count(state, team) >= want:
            break
        if name not in state.counted and _poolless(state, state.nodes[name]):
            _assign(state, name, team)
            added.append(name)
    return added
