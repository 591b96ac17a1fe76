"""``kubernetes.io/egress-bandwidth`` kept at each pod's limit, for clusters that shape with
Cilium's bandwidth manager (which follows the annotation live) instead of the agent.

The annotation is the pod's own cap until the service first writes it; then the
service saves that cap in ``baton.io/egress-cap`` and marks the value it wrote in
``baton.io/egress-limit`` (so it never reads its own limit back as a cap). A pod is
annotated again only when its limit moved beyond the hysteresis from the annotated
value, at most ``annotate_per_round`` pods a round (by uid) and each pod at most once
every ``annotate_every_s``, through the actuator (``Annotate``, lowest priority).
"""

from __future__ import annotations

from baton.proto import keys
from baton.proto.actions import Annotate
from baton.proto.bandwidth import BandwidthPolicy
from baton.services.bandwidth.core.ledger import Shaped
from baton.services.bandwidth.core.policy import parse_rate
from baton.services.bandwidth.core.state import State

_UNITS = ((10**9, "G"), (10**6, "M"), (10**3, "k"))


def due(state: State, now: float) -> list[Annotate]:
    """Annotate actions for the pods whose annotation lags their limit, within the budget."""
    policy = state.policy
    budget = policy.annotate_per_round
    out: list[Annotate] = []
    for uid in sorted(state.due):
        pod, limit = state.pods.get(uid), state.published.get(uid)
        if pod is None or limit is None or not lags(pod, limit, policy):
            del state.due[uid]
            continue
        last = state.annotated.get(uid)
        if last is not None and now - last < policy.annotate_every_s:
            continue
        if budget <= 0:
            break
        budget -= 1
        state.annotated[uid] = now
        out.append(_annotate(pod, limit, now))
    return out


def lags(pod: Shaped, limit: int, policy: BandwidthPolicy) -> bool:
    if not pod.ours:
        return True  # no annotation yet, or the pod's own cap: take it over
    try:
        current = parse_rate(pod.egress)
    except ValueError:
        return True
    return abs(limit - current) > max(policy.hysteresis * current, policy.hysteresis_bps)


def quantity(bps: int) -> str:
    """Bits per second as a Kubernetes quantity the CNI plugin and Cilium read (``25M``)."""
    for unit, suffix in _UNITS:
        if bps and bps % unit == 0:
            return f"{bps // unit}{suffix}"
    return str(bps)


def _annotate(pod: Shaped, limit: int, now: float) -> Annotate:
    text = quantity(limit)
    notes: dict[str, str | None] = {keys.EGRESS_BANDWIDTH: text, keys.EGRESS_LIMIT: text}
    if not pod.ours:
        notes[keys.EGRESS_CAP] = pod.cap or None
    return Annotate(
        id=f"bandwidth:egress:{pod.uid}:{int(now * 1000)}", by="bandwidth", at=now,
        priority="balloon", reason=f"egress limit {text}", kind="Pod",
        namespace=pod.namespace, name=pod.name, annotations=notes,
    )  # fmt: skip
