"""Updates the API server refuses, as a ValidatingAdmissionPolicy that denies them would.

A test (or a person trying Baton's rollbacks) names one object, ``POST
/sim/v1/refusals {"resource": "resourceclaims", "namespace": "ns", "name": "x"}``, and
from then on every update of it, status included, is answered ``403 Forbidden`` with
the policy's message, until the same request with ``"heal": true``. Creates and
deletes pass: the policy denies UPDATE, as most real policies on status do.
"""

from __future__ import annotations

from typing import Any

from baton.services.simcluster.api.objects import ApiError
from baton.services.simcluster.api.resources import Resource

POLICY = "simcluster-refusals"


class Refusals:
    """An admission hook (``ApiServer.admission``) and the objects it refuses."""

    def __init__(self) -> None:
        self.refused: dict[tuple[str, str, str], str] = {}  # (plural, ns, name) -> message

    def refuse(self, resource: str, namespace: str, name: str, message: str) -> None:
        self.refused[(resource, namespace, name)] = message

    def heal(self, resource: str, namespace: str, name: str) -> bool:
        return self.refused.pop((resource, namespace, name), None) is not None

    async def __call__(
        self,
        operation: str,
        res: Resource,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        *,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        if operation != "UPDATE" or not self.refused:
            return obj
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        message = self.refused.get((res.plural, meta.get("namespace", ""), name))
        if message is None:
            return obj
        raise ApiError(
            403,
            "Forbidden",
            f'{res.plural}{"." + res.group if res.group else ""} "{name}" is forbidden: '
            f"ValidatingAdmissionPolicy '{POLICY}' denied request: {message}",
        )
