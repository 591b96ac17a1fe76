"""``pods/<name>/eviction`` as the API server answers it (no PodDisruptionBudgets here).

Before the graceful delete, a pod that has not finished gets the ``DisruptionTarget``
condition (reason ``EvictionByEvictionAPI``), as the API server adds it since
Kubernetes 1.26: a Job's ``podFailurePolicy`` can then tell an eviction from a crash
(``onPodConditions: [{type: DisruptionTarget}]``).
"""

from __future__ import annotations

from typing import Any

from baton.services.simcluster.api.store import Store
from baton.services.simcluster.clock import timestamp

DISRUPTION_TARGET = "DisruptionTarget"


def evict(
    store: Store, namespace: str | None, name: str, *, grace: int | None, dry_run: bool = False
) -> None:
    """``dry_run``: answered as if done, nothing changed (``dryRun=All``)."""
    pod = store.get("pods", namespace, name)
    if not dry_run and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
        store.mutate("pods", namespace, name, disrupted)
    store.delete("pods", namespace, name, grace_seconds=grace, dry_run=dry_run)


def disrupted(pod: dict[str, Any]) -> None:
    status = pod.setdefault("status", {})
    kept = [c for c in status.get("conditions") or () if c.get("type") != DISRUPTION_TARGET]
    entry = {"type": DISRUPTION_TARGET, "status": "True", "reason": "EvictionByEvictionAPI",
             "message": "Eviction API: evicting", "lastProbeTime": None,
             "lastTransitionTime": timestamp()}  # fmt: skip
    status["conditions"] = [*kept, entry]
