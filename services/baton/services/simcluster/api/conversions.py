"""Resources that are another version's view of the same stored objects.

Upstream, ``events.k8s.io/v1`` Events and core ``v1`` Events are one store seen
through two schemas, and every served version of a multi-version kind
(``scheduling.k8s.io`` ``v1beta1`` and ``v1alpha2`` workloads) reads and writes the
same objects. simcluster stores one form (the storage resource's) and converts at
the API edge: ``out`` turns a stored object into the view's form, ``into`` turns a
request body into the stored form, and ``fields`` maps the view's field selector
names onto the stored ones. Pure functions over plain dicts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

# events.k8s.io/v1 field <-> core v1 Event field (the rest share their names)
EVENT_FIELDS: tuple[tuple[str, str], ...] = (
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
)
_SHARED_EVENT_FIELDS = (
    "metadata",
    "related",
    "reason",
    "type",
    "eventTime",
    "series",
    "action",
    "reportingInstance",
)


@dataclass(frozen=True, slots=True)
class Conversion:
    out: Callable[[Obj], Obj]  # stored -> as this resource serves it
    into: Callable[[Obj], Obj]  # as a client sent it -> stored
    fields: Mapping[str, str] = field(default_factory=dict)  # selector name -> stored name

    def field_selector(self, text: str) -> str:
        """``regarding.name=x,type!=Normal`` in the stored resource's field names."""
        if not text or not self.fields:
            return text
        return ",".join(_rename_term(term, self.fields) for term in text.split(","))


def _rename_term(term: str, names: Mapping[str, str]) -> str:
    match = re.match(r"^\s*([^=!\s]+)(.*)$", term)
    if match is None:
        return term
    return names.get(match.group(1), match.group(1)) + match.group(2)


def version_view(api_version: str) -> Conversion:
    """Another served version of the same kind, with the same schema."""

    def out(obj: Obj) -> Obj:
        return {**obj, "apiVersion": api_version}

    return Conversion(out=out, into=lambda obj: obj)


def _event_out(core: Obj) -> Obj:
    new: Obj = {"apiVersion": "events.k8s.io/v1", "kind": "Event"}
    for name in _SHARED_EVENT_FIELDS:
        if name in core:
            new[name] = core[name]
    for view, stored in EVENT_FIELDS:
        if stored in core:
            new[view] = core[stored]
    return new


def _event_into(event: Obj) -> Obj:
    core: Obj = {"apiVersion": "v1", "kind": "Event"}
    for name in _SHARED_EVENT_FIELDS:
        if name in event:
            core[name] = event[name]
    for view, stored in EVENT_FIELDS:
        if view in event:
            core[stored] = event[view]
    return core


EVENTS_V1 = Conversion(
    out=_event_out,
    into=_event_into,
    fields={
        "regarding.kind": "involvedObject.kind",
        "regarding.namespace": "involvedObject.namespace",
        "regarding.name": "involvedObject.name",
        "regarding.uid": "involvedObject.uid",
        "regarding.apiVersion": "involvedObject.apiVersion",
        "regarding.resourceVersion": "involvedObject.resourceVersion",
        "regarding.fieldPath": "involvedObject.fieldPath",
        "reportingController": "reportingComponent",
        "deprecatedSource": "source",
    },
)
