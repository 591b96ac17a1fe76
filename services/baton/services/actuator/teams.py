"""Writing a team as kubectl users see it: the cluster-scoped ``Team``
(``baton.io/v1alpha1``, deploy/crds/baton.io_teams.yaml) and its status subresource.

Created when missing (empty spec: the team file is the source), its status read before
it is written and reported ``already`` when it says the same; deleted when the team
left the team file. A cluster without the CRD answers 404 on create: the action fails
with a message that says to apply deploy/crds/.
"""

from __future__ import annotations

import msgspec

from baton.proto.actions import Outcome, SetTeamStatus
from baton.services.actuator.calling import MERGE, ApiError, Obj, Session

Applied = tuple[Outcome, str]
WHERE = ("baton.io", "v1alpha1", "teams")
MANAGED = {"app.kubernetes.io/managed-by": "baton"}
NO_CRD = "the Team CRD is not installed: kubectl apply -f deploy/crds/baton.io_teams.yaml"


async def set_team_status(s: Session, action: SetTeamStatus) -> Applied:
    custom = s.api.custom
    if action.remove:
        try:
            await s.call("delete", custom.delete_cluster_custom_object, *WHERE, action.team)
        except ApiError as exc:
            if exc.status == 404:
                return "already", ""
            raise
        return "applied", ""
    want: Obj = msgspec.json.decode(msgspec.json.encode(action.status))  # lists, as read
    for _ in range(5):
        obj = await _read_or_create(s, action.team)
        if obj.get("status") == want:
            return "already", ""
        meta = obj.get("metadata", {})
        body = {"metadata": {"resourceVersion": meta.get("resourceVersion", "")}, "status": want}
        try:
            await s.call(
                "patch", custom.patch_cluster_custom_object_status, *WHERE, action.team, body,
                _content_type=MERGE,
            )  # fmt: skip
        except ApiError as exc:
            if exc.status == 409:
                continue
            raise
        return "applied", ""
    raise ApiError(409, "still conflicting after 5 re-reads", reason="Conflict")


async def _read_or_create(s: Session, team: str) -> Obj:
    custom = s.api.custom
    try:
        return await s.call("get", custom.get_cluster_custom_object_status, *WHERE, team)
    except ApiError as exc:
        if exc.status != 404:
            raise
    body = {
        "apiVersion": "/".join(WHERE[:2]),
        "kind": "Team",
        "metadata": {"name": team, "labels": MANAGED},
        "spec": {},
    }
    try:
        return await s.call("create", custom.create_cluster_custom_object, *WHERE, body)
    except ApiError as exc:
        if exc.status == 404:
            raise ApiError(404, NO_CRD, reason="NotFound") from None
        if exc.status == 409:  # created meanwhile: read it
            return await s.call("get", custom.get_cluster_custom_object_status, *WHERE, team)
        raise
