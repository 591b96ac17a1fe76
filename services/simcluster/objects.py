"""What the API server does to an object on the way in: names, defaults, validation.

Kept apart from the store so the rules read as a short list: generated names,
DNS-subdomain names, per-resource defaults (a pod gets ``schedulerName``,
``restartPolicy``, a 30 s grace period and phase Pending; a namespace phase Active).
"""

from __future__ import annotations

import random
import re
import time
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


def apply_defaults(res: str, obj: dict[str, Any]) -> None:
    if res == "pods":
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
