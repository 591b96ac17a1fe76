"""The validating webhook on an UPDATE of a pod or a gang object. Pure.

An UPDATE is not mutated (a pod's spec is fixed once created) and is refused only when
it gives the object a shape Baton cannot honour that it did not have before: a gang
grown past ``MAX_GANG_MEMBERS``, a minimum below 1, a topology Baton cannot keep, a
GPU request that is negative, fractional, or more than a node has, in any container or
init container. What depends on the team and its quota (checked at creation) is not
asked again: Baton's own writes (the actuator marks a gang admitted, a quota shrinks)
must not be refused for what was decided before, and an object that already had the
problem (made before Baton's webhook ran) can still be changed, e.g. deleted by its
finalizer's owner.
"""

from __future__ import annotations

from typing import Any

import msgspec

from baton.libs.kube.quantities import InvalidQuantity
from baton.proto import keys
from baton.services.admission.core import formats, groups
from baton.services.admission.core.objects import KObject, KPod, Request


def problem(request: Request, new: KObject, decoder: msgspec.json.Decoder[Any]) -> str | None:
    """Why this UPDATE is refused (None: allowed). ``decoder`` decodes the old object."""
    found = _shape(new)
    if found is None:
        return None
    try:
        old: KObject | None = decoder.decode(request.old_object)
    except msgspec.DecodeError:
        old = None
    if old is not None and _shape(old) == found:
        return None  # it had that already: this update does not make it worse
    return found


def _shape(obj: KObject) -> str | None:
    try:
        return shape_problem(obj)
    except InvalidQuantity as exc:
        return str(exc)


def shape_problem(obj: KObject) -> str | None:
    """What no team or quota could make right (``InvalidQuantity``: not a quantity)."""
    if isinstance(obj, KPod):
        if not formats.managed(obj):
            return None
        return formats.containers_gpus_problem(obj) or formats.gpus_problem(obj.gpus(keys.GPU))
    return groups.shape_problem(obj)
