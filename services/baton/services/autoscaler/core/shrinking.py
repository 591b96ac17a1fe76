"""Shrinking: a node of an autoscaled pool idle for ``unneeded_s`` (or one health asked
to replace) goes, one machine at a time: marked ``cluster.x-k8s.io/delete-machine``,
then its pool shrinks by one once the mark is applied; a replaced node's pool grows back
once it is gone. See ``core`` for the cycle this is part of (step 3)."""

from __future__ import annotations

from baton.proto import ids, keys
from baton.proto.actions import ActionResult, Annotate, MarkNode
from baton.proto.autoscaler import NodeReplaced, ScaledDown
from baton.services.autoscaler.core.state import (
    BY,
    Deletion,
    Output,
    State,
    autoscaled,
    replicas_of,
    scale_action,
)


def idle_candidate(state: State, name: str) -> bool:
    """A Ready node with no pod on it (DaemonSet and static pods aside), of an autoscaled
    pool above its min size."""
    if state.policy.unneeded_s <= 0:
        return False
    md = state.pools.get(state.pool_of.get(name, ""))
    nv = state.view.nodes.get(name)
    return (
        md is not None
        and autoscaled(md)
        and replicas_of(state, md) > (md.min_size or 0)
        and nv is not None
        and nv.node.ready
        and all(_daemon(state, k) for k in state.view.on_node.get(name, ()))
    )


def _daemon(state: State, pod: str) -> bool:
    found = state.view.pods.get(pod)
    return found is not None and found.daemon


def scale_down(state: State, now: float) -> list[Output]:
    for name in list(state.idle_since):
        if not idle_candidate(state, name):
            del state.idle_since[name]
    for name in state.pool_of:
        if name not in state.idle_since and idle_candidate(state, name):
            state.idle_since[name] = now
    d = state.deletion
    if d is not None:
        if now - d.at < state.policy.deletion_timeout_s:
            return []
        state.deletion = None  # the machine never went: try another (or it) again
    for name in sorted(state.replacing, key=lambda n: (state.replacing[n], n)):
        key = state.pool_of.get(name, "")
        if key not in state.pools:
            continue  # not a node of a pool we know: a fixer's job
        return _mark(state, name, key, now, idle=0.0, replace=True)
    growing = {p.pool for p in state.plans.values()}
    due = sorted(
        (since, name)
        for name, since in state.idle_since.items()
        if now - since >= state.policy.unneeded_s
    )
    for since, name in due:
        key = state.pool_of[name]
        md = state.pools[key]
        if key in growing or key in state.asked:
            continue
        if replicas_of(state, md) - 1 < (md.min_size or 0):
            continue
        return _mark(state, name, key, now, idle=now - since)
    return []


def _mark(
    state: State, name: str, key: str, now: float, *, idle: float, replace: bool = False
) -> list[Output]:
    why = "health asked to replace it" if replace else f"idle for {idle:.0f}s"
    mark = MarkNode(
        id=ids.make("delete-machine", name, now),
        by=BY,
        at=now,
        priority="health" if replace else "scaling",
        reason=f"{why}: its machine goes first when {key} shrinks",
        node=name,
        annotations={keys.DELETE_MACHINE: "true"},
    )
    state.deletion = Deletion(node=name, pool=key, at=now, mark_id=mark.id, idle_s=idle,
                              replace=replace)  # fmt: skip
    state.replacing.pop(name, None)
    machine = state.view.nodes[name].node.annotations.get(keys.MACHINE, "")
    if not machine or not state.policy.mark_machines:
        return [mark]
    on_machine = Annotate(
        id=ids.make("delete-machine", machine, now), by=BY, at=now, priority=mark.priority,
        reason=mark.reason, kind="Machine", namespace=state.pools[key].namespace, name=machine,
        annotations={keys.DELETE_MACHINE: "true"}, api="cluster.x-k8s.io/v1beta1",
    )  # fmt: skip
    return [on_machine, mark]


def marked(state: State, result: ActionResult, now: float) -> list[Output]:
    """The result of the delete-machine mark: applied, the pool shrinks by one."""
    d = state.deletion
    if d is None or result.action_id != d.mark_id or result.fenced:
        return []  # fenced: a deposed leader's copy; this leader's own is judged apart
    if result.outcome not in ("applied", "already"):
        state.deletion = None  # the mark did not hold: decide again later
        return []
    if d.scaled:
        return []
    md = state.pools.get(d.pool)
    if md is None:
        state.deletion = None
        return []
    d.scaled = True
    replicas = replicas_of(state, md) - 1
    state.asked[d.pool] = replicas
    why = f"replace {d.node} (health)" if d.replace else f"remove idle node {d.node}"
    action = scale_action(md, replicas, now, reason=why, key=("down", d.node))
    down = ScaledDown(node=d.node, pool=d.pool, replicas=replicas, idle_s=d.idle_s,
                      action_id=action.id, replace=d.replace, at=now)  # fmt: skip
    return [action, down]


def grow_back(state: State, d: Deletion, now: float) -> list[Output]:
    """The node health asked to replace is gone: its pool gets its machine back."""
    md = state.pools.get(d.pool)
    if md is None:
        return []
    replicas = replicas_of(state, md) + 1
    state.asked[d.pool] = replicas
    action = scale_action(
        md, replicas, now, reason=f"replacement for {d.node}", key=("back", d.node)
    )
    back = NodeReplaced(node=d.node, pool=d.pool, replicas=replicas, action_id=action.id, at=now)
    return [action, back]
