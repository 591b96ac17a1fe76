"""Growing: a waiting gang's pool grows by its whole need, or none does and the reason is
published; scale-ups in flight are followed until their nodes are Ready, or reverted.
See ``core`` for the cycle this is part of (steps 1 and 2)."""

from __future__ import annotations

from baton.proto import keys
from baton.proto.actions import ActionResult
from baton.proto.autoscaler import ScaledUp, ScaleRefused, ScaleReverted
from baton.proto.placement import Need
from baton.services.autoscaler.core.state import (
    BALLOON_PREFIX,
    QUOTA_EXCEEDED,
    Output,
    Plan,
    State,
    autoscaled,
    domain_of,
    pool_shape,
    ready,
    replicas_of,
    scale_action,
    welcomes,
)


def follow_plans(state: State, now: float) -> list[Output]:
    outputs: list[Output] = []
    for gang, plan in sorted(state.plans.items()):
        md = state.pools.get(plan.pool)
        if md is None:
            del state.plans[gang]
            continue
        have = ready(state, plan.pool)
        if have >= plan.target:
            del state.plans[gang]  # joined: the gang service places the gang now
            state.waiting.pop(gang, None)
            continue
        if md.reason == QUOTA_EXCEEDED and state.asked.get(plan.pool) is None:
            why = f"the cloud's quota for pool {plan.pool} is reached: {md.message}"
        elif now - plan.at >= state.policy.provisioning_timeout_s:
            why = (
                f"{plan.target - have} of {plan.nodes} nodes not Ready after "
                f"{state.policy.provisioning_timeout_s:g}s"
            )
        else:
            continue
        missing = min(plan.nodes, plan.target - have)
        replicas = max(md.min_size or 0, replicas_of(state, md) - missing)
        state.asked[plan.pool] = replicas
        state.backoff[plan.pool] = now + state.policy.backoff_s
        del state.plans[gang]
        action = scale_action(md, replicas, now, reason=f"revert for {gang}: {why}",
                        key=("revert", plan.action_id))  # fmt: skip
        outputs += [
            action,
            ScaleReverted(
                gang=gang,
                pool=plan.pool,
                nodes=missing,
                replicas=replicas,
                reason=why,
                action_id=action.id,
                at=now,
            ),
        ]
    return outputs


def joining(state: State) -> int:
    """Nodes asked for by scale-ups in flight and not Ready yet, cluster-wide."""
    short: dict[str, int] = {}
    for plan in state.plans.values():
        short[plan.pool] = max(short.get(plan.pool, 0), plan.target)
    return sum(max(0, t - ready(state, p)) for p, t in short.items())


def scale_up(state: State, now: float) -> list[Output]:
    outputs: list[Output] = []
    p = state.policy
    state.asks = [(at, n) for at, n in state.asks if now - at < p.join_interval_s]
    budget = p.max_joining - max(joining(state), sum(n for _, n in state.asks))
    # real gangs first (oldest first), then balloons' deficits
    order = sorted(
        (g for g in state.waiting if g not in state.plans),
        key=lambda g: (g.startswith(BALLOON_PREFIX), state.arrived.get(g, now), g),
    )
    for gang in order:
        need = state.waiting[gang]
        if gang in state.queued:
            why = "waits on its team's quota, not on capacity"
        elif gang in state.skip:
            why = state.skip[gang]
        else:
            choice = choose(state, gang, need, now)
            if isinstance(choice, str):
                why = choice
            elif need.nodes > budget and budget < p.max_joining:
                why = (
                    f"paced: {p.max_joining - budget} nodes asked for or joining, at most "
                    f"{p.max_joining} a {p.join_interval_s:g}s interval"
                )
            else:
                key, domain = choice
                outputs += _grow(state, gang, need, key, domain, now)
                budget -= need.nodes
                continue
        outputs += _refused(state, gang, need, why, now)
    return outputs


def choose(state: State, gang: str, need: Need, now: float) -> tuple[str, str] | str:
    """The pool that can grow by the whole need (and its domain), or why none can.
    Among those that can, the smallest node that fits, then the name."""
    fits: list[tuple[int, int, str, str]] = []
    why: list[str] = []
    for key in sorted(state.pools):
        md = state.pools[key]
        shape = pool_shape(state, md)
        if gang.startswith(BALLOON_PREFIX):
            if key != state.balloon_pools.get(gang):
                continue
        elif not shape or any(shape.get(r, 0) < n for r, n in need.shape.items()):
            continue  # not the shape the gang asks for: not worth naming
        elif not welcomes(state, md, gang):
            why.append(f"{key}: its nodes do not take the gang's pods (selector, affinity, taints)")
            continue
        if not autoscaled(md):
            why.append(f"{key}: not autoscaled (no min/max size annotations)")
            continue
        domain = ""
        if need.within:
            found = domain_of(state, md, need.within)
            if found is None:
                why.append(f"{key}: spans several {need.within} domains, cannot grow within one")
                continue
            domain = found
        replicas = replicas_of(state, md)
        if replicas + need.nodes > (md.max_size or 0):
            why.append(f"{key}: max size {md.max_size} (at {replicas}, needs {need.nodes} more)")
            continue
        if md.reason == QUOTA_EXCEEDED:
            why.append(f"{key}: cloud quota reached ({md.message or md.reason})")
            continue
        if state.backoff.get(key, 0.0) > now:
            why.append(f"{key}: backing off after a failed scale-up until {state.backoff[key]:.0f}")
            continue
        fits.append((shape.get(keys.GPU, 0), shape.get("cpu", 0), key, domain))
    if fits:
        _, _, key, domain = min(fits)
        return key, domain
    if not why:
        asked = ", ".join(f"{r} {n}" for r, n in sorted(need.shape.items()))
        return f"no pool has nodes of the shape needed ({asked or 'unknown'})"
    count = f"{need.nodes} node{'' if need.nodes == 1 else 's'}"
    return f"no pool can grow by {count}: " + "; ".join(why)


def _grow(
    state: State,
    gang: str,
    need: Need,
    key: str,
    domain: str,
    now: float,
) -> list[Output]:
    md = state.pools[key]
    replicas = replicas_of(state, md) + need.nodes
    others = sum(p.nodes for p in state.plans.values() if p.pool == key)
    target = ready(state, key) + others + need.nodes
    state.asked[key] = replicas
    where = f" in {need.within}={domain}" if need.within else ""
    action = scale_action(md, replicas, now, reason=f"{need.nodes} nodes for {gang}{where}",
                    key=("up", gang, replicas, now))  # fmt: skip
    state.asks.append((now, need.nodes))
    state.plans[gang] = Plan(gang=gang, pool=key, nodes=need.nodes, target=target,
                             replicas=replicas, at=now, action_id=action.id)  # fmt: skip
    state.refused.pop(gang, None)
    up = ScaledUp(gang=gang, pool=key, nodes=need.nodes, replicas=replicas,
                  action_id=action.id, within=need.within, domain=domain, at=now)  # fmt: skip
    return [action, up]


def _refused(state: State, gang: str, need: Need, why: str, now: float) -> list[Output]:
    if state.refused.get(gang) == why:
        return []
    state.refused[gang] = why
    return [ScaleRefused(gang=gang, nodes=need.nodes, reason=why, at=now)]


def failed(state: State, result: ActionResult, now: float) -> list[Output] | None:
    """A scale-up the actuator could not apply (None: not one of ours, or applied): the
    pool was never asked, so nothing to revert; it backs off and the gang is told why."""
    plan = next((p for p in state.plans.values() if p.action_id == result.action_id), None)
    if plan is None or result.outcome not in ("failed", "stale") or result.fenced:
        return None  # fenced: a deposed leader's copy; this leader's own is judged apart
    del state.plans[plan.gang]
    state.asked.pop(plan.pool, None)
    state.backoff[plan.pool] = now + state.policy.backoff_s
    why = f"the scale request for {plan.pool} failed: {result.error or result.outcome}"
    state.refused[plan.gang] = why
    return [ScaleRefused(gang=plan.gang, nodes=plan.nodes, reason=why, at=now)]
