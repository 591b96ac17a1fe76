"""Every kind simcluster validates: (group, kind) -> its structural schema (the core and
custom kinds in :mod:`schemas`, the workload kinds in :mod:`jobschemas`, DRA's in
:mod:`draschemas`). A kind not here is served open and not validated."""

from __future__ import annotations

from baton.services.simcluster.api import draschemas, jobschemas, schemas
from baton.services.simcluster.api.schemas import Obj

SCHEMAS: dict[tuple[str, str], Obj] = {
    **schemas.SCHEMAS,
    **jobschemas.SCHEMAS,
    **draschemas.SCHEMAS,
}


def schema_of(group: str, kind: str) -> Obj | None:
    """The structural schema of a kind, or None where simcluster does not model it."""
    return SCHEMAS.get((group, kind))
