"""What the API server does to an object on the way in: names, defaults, validation.

Kept apart from the store so the rules read as a short list: generated names,
DNS-subdomain names, per-resource defaults (a pod gets ``schedulerName``,
``restartPolicy``, a 30 s grace period, requests from limits and phase Pending; a
namespace phase Active), and pod priority from its PriorityClass.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from typing import Any

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"


class ApiError(Exception):
    """An error the API answers with a ``Status`` body: code, reason, message."""

    def __init__(
        self, code: int, reason: str, message: str, *, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def not_found(res: str, name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'{res} "{name}" not found', details={"name": name, "kind": res}
    )


def invalid(kind: str, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 Invalid with one cause per (field, message)."""
    text = "; ".join(f"{f}: {m}" for f, m in causes)
    return ApiError(
        422,
        "Invalid",
        f'{kind} "{name}" is invalid: {text}',
        details={
            "name": name,
            "kind": kind,
            "causes": [
                {"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes
            ],
        },
    )


def timestamp(epoch: float) -> str:
    """RFC 3339 in UTC with second precision, as Kubernetes writes metav1.Time."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def generated_name(prefix: str, rng: random.Random) -> str:
    return prefix + "".join(rng.choice(_SUFFIX) for _ in range(5))


def validate_name(kind: str, name: str) -> None:
    if not name:
        raise invalid(
            kind, name, [("metadata.name", "Required value: name or generateName is required")]
        )
    if len(name) > 253 or not _NAME.match(name):
        raise invalid(
            kind,
            name,
            [
                (
                    "metadata.name",
                    f'Invalid value: "{name}": a lowercase '
                    "RFC 1123 subdomain must consist of lower case alphanumeric "
                    "characters, '-' or '.'",
                )
            ],
        )


def validate(res: str, obj: dict[str, Any]) -> None:
    """Per-resource required fields (light: what a wrong client would trip over)."""
    name = obj["metadata"]["name"]
    if res == "pods" and not (obj.get("spec") or {}).get("containers"):
        raise invalid("Pod", name, [("spec.containers", "Required value")])
    if res == "priorityclasses" and not isinstance(obj.get("value"), int):
        raise invalid("PriorityClass", name, [("value", "Required value")])


# The two classes every cluster has (pkg/apis/scheduling: SystemPriorityClasses).
SYSTEM_PRIORITY_CLASSES: tuple[dict[str, Any], ...] = (
    {
        "metadata": {"name": "system-node-critical"},
        "value": 2000001000,
        "description": "Used for system critical pods that must not be moved from their "
        "current node.",
        "preemptionPolicy": "PreemptLowerPriority",
    },
    {
        "metadata": {"name": "system-cluster-critical"},
        "value": 2000000000,
        "description": "Used for system critical pods that must run in the cluster, but can be "
        "moved to another node if necessary.",
        "preemptionPolicy": "PreemptLowerPriority",
    },
)


def default_requests(pod: dict[str, Any]) -> None:
    """A container's request of a resource that has only a limit is that limit, as the API
    server defaults it (NVIDIA's examples set ``nvidia.com/gpu`` only in limits). Numbers
    become quantity strings (``1`` -> ``"1"``), as the server writes every Quantity."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    for group in ("initContainers", "containers"):
        for container in spec.get(group) or ():
            resources = container.get("resources") if isinstance(container, dict) else None
            if not isinstance(resources, dict):
                continue
            limits = _quantities(resources.get("limits"))
            requests = _quantities(resources.get("requests"))
            for name, amount in limits.items():
                requests.setdefault(name, amount)
            for key, values in (("limits", limits), ("requests", requests)):
                if values:
                    resources[key] = values


def _quantities(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        return {}
    return {name: _quantity_text(amount) for name, amount in raw.items()}


def _quantity_text(amount: Any) -> Any:
    if isinstance(amount, bool) or not isinstance(amount, int | float):
        return amount  # strings stay as written; nonsense is left for the reader to reject
    if float(amount).is_integer():
        return str(int(amount))
    return f"{round(amount * 1000)}m"


def resolve_priority(
    pod: dict[str, Any],
    *,
    find: Callable[[str], dict[str, Any] | None],
    default: dict[str, Any] | None,
) -> None:
    """The Priority admission plugin: ``priorityClassName`` (else the globalDefault class)
    sets ``spec.priority`` and ``preemptionPolicy``; 403 Forbidden for a class that does
    not exist or a priority that contradicts it. A pod with neither a class nor a default
    keeps the priority it states (upstream would require 0)."""
    spec = pod.setdefault("spec", {})
    name = pod["metadata"]["name"]
    wanted = spec.get("priorityClassName")
    pc = find(wanted) if wanted else default
    if wanted and pc is None:
        raise ApiError(
            403,
            "Forbidden",
            f'pods "{name}" is forbidden: no PriorityClass with name {wanted} was found',
            details={"name": name, "kind": "pods"},
        )
    if pc is None:
        return
    value = int(pc.get("value", 0))
    stated = spec.get("priority")
    if stated is not None and stated != value:
        raise ApiError(
            403,
            "Forbidden",
            f'pods "{name}" is forbidden: the integer value of priority ({stated}) must not be '
            f"provided in pod spec; priority admission controller computed {value} from the "
            "given PriorityClass name",
            details={"name": name, "kind": "pods"},
        )
    spec.update(priorityClassName=pc["metadata"]["name"], priority=value)
    spec.setdefault("preemptionPolicy", pc.get("preemptionPolicy", "PreemptLowerPriority"))


def apply_defaults(res: str, obj: dict[str, Any]) -> None:
    if res == "pods":
        default_requests(obj)
        spec = obj.setdefault("spec", {})
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("priority", 0)
        status = obj.get("status") or {}
        status.setdefault("phase", "Pending")
        obj["status"] = status
    elif res == "namespaces":
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj["status"] = {"phase": "Active", **(obj.get("status") or {})}
    elif res == "priorityclasses":
        obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
        obj.setdefault("globalDefault", False)
    elif res == "secrets":  # as the API server: `kubectl create secret generic` sends none
        obj.setdefault("type", "Opaque")
