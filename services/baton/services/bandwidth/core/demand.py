"""A pod's want (bits per second) from its measured internet egress.

| measurement                                   | want                          |
|-----------------------------------------------|-------------------------------|
| none, or older than ``stale_s``               | ``floor_bps``                 |
| used >= ``saturated`` x its published limit   | unbounded (held at its limit) |
| otherwise                                     | max(floor, used x (1 + headroom)) |

Then never more than the pod's own cap (``kubernetes.io/egress-bandwidth``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from baton.proto.bandwidth import BandwidthPolicy
from baton.services.bandwidth.core.fairshare import INF


def want(
    policy: BandwidthPolicy,
    *,
    used_bps: float | None,
    limit_bps: int | None,
    cap_bps: float = INF,
) -> float:
    """``used_bps`` None: no fresh measurement. ``limit_bps`` None: nothing published yet."""
    floor = float(policy.floor_bps)
    if used_bps is None:
        wanted = floor
    elif limit_bps is not None and used_bps >= policy.saturated * limit_bps:
        wanted = INF
    else:
        wanted = max(floor, used_bps * (1.0 + policy.headroom))
    return min(wanted, cap_bps)


def wants(
    policy: BandwidthPolicy,
    *,
    uids: Sequence[str],
    caps: Sequence[float],
    used: Mapping[str, tuple[float, float]],
    published: Mapping[str, int],
    oldest: float,
) -> list[float]:
    """``want`` for many pods at once (the same table; one loop with no calls per pod).

    ``used``: uid -> (bits per second, measured at); older than ``oldest`` is ignored.
    """
    floor, grow, saturated = float(policy.floor_bps), 1.0 + policy.headroom, policy.saturated
    out: list[float] = []
    append = out.append
    for uid, cap in zip(uids, caps, strict=True):
        measured = used.get(uid)
        if measured is None or measured[1] < oldest:
            wanted = floor
        else:
            limit = published.get(uid)
            rate = measured[0]
            if limit is not None and rate >= saturated * limit:
                wanted = INF
            else:
                wanted = rate * grow
                if wanted < floor:
                    wanted = floor
        append(wanted if wanted < cap else cap)
    return out
