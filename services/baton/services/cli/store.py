"""``baton up``'s JetStream store: room enough to start, and a server whose JetStream
broke on a full store restarted once there is room again.

After a write error on a full disk, nats-server 2.15 leaves the stream broken (its
publishes time out) even once space returns, until it restarts; older servers disable
JetStream altogether. Every service then stores nothing. ``baton up`` asks the
server's ``/healthz`` (monitoring port) every status refresh: when it has failed for
``DOWN_S`` and the store has ``ROOM_BYTES`` free, it stops nats-server, and the
supervisor starts it again on the same store (the deploy StatefulSet's liveness probe,
the same ``/healthz``, has the kubelet do that).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from baton.libs.bus.streams import HISTORY_SIZING, history_bytes

DOWN_S = 10.0  # JetStream silent this long, connected: disabled
ROOM_BYTES = 64 * 1024**2  # free space that counts as "space returned"
RESERVABLE = 0.75  # nats-server lets JetStream reserve this share of the free disk


def store_problem(store: Path, *, nodes: int, free: int | None = None) -> str:
    """Why a JetStream store at ``store`` cannot hold Baton's streams for ``nodes`` nodes
    ('' when it can): nats-server reserves at most 75% of the free disk, and HISTORY
    reserves its ``max_bytes``."""
    where = store if store.exists() else store.parent
    if free is None:
        free = shutil.disk_usage(where).free
    needed = history_bytes(nodes)
    if free * RESERVABLE >= needed:
        return ""
    return (
        f"the JetStream store {store} has {free / 1024**3:.2f} GiB free; Baton's streams "
        f"reserve {needed / 1024**3:.2f} GiB for {nodes} nodes ({HISTORY_SIZING}) and "
        f"nats-server lets them use 75% of the free space, so it needs "
        f"{needed / RESERVABLE / 1024**3:.2f} GiB free: free space, or pass --store on a "
        "larger disk"
    )


@dataclass
class Disabled:
    """Whether nats-server's JetStream is disabled and should be restarted."""

    store: Path
    down_since: float | None = None

    def verdict(self, *, answers: bool, connected: bool, now: float, free: int) -> bool:
        """True when nats-server should restart now (the clock starts again after)."""
        if answers or not connected:  # not serving: the supervisor restarts a dead one
            self.down_since = None
            return False
        if self.down_since is None:
            self.down_since = now
        if now - self.down_since >= DOWN_S and free >= ROOM_BYTES:
            self.down_since = None
            return True
        return False

    async def check(self, http: aiohttp.ClientSession, *, monitor: int, now: float) -> bool:
        """Ask nats-server's ``/healthz`` on its monitoring port ``monitor``."""
        try:
            async with http.get(f"http://127.0.0.1:{monitor}/healthz") as response:
                answers, connected = response.status == 200, True
        except (aiohttp.ClientError, TimeoutError):
            answers, connected = False, False  # not serving: the supervisor's case
        free = shutil.disk_usage(self.store).free if self.store.exists() else 0
        return self.verdict(answers=answers, connected=connected, now=now, free=free)
