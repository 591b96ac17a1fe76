"""JSON encoding of bus payloads, and the typed error for payloads we cannot read.

Each payload is a tagged ``msgspec.Struct``; the tag (``type``) names the event and
its schema version (``k8s.pod.v1``). A consumer decodes with the closed union for
its stream; anything else is ``Undecodable``, which the bus dead-letters with the
reason instead of crashing. A Kubernetes object event that decodes but says what no
real object can (``proto.bounds``: a node of 1,000 GPUs) is ``Unbelievable``, an
``Undecodable``: every consumer refuses it the same way, so none believes it.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from baton.proto.bounds import impossible
from baton.proto.k8s import ObjectEvent

T = TypeVar("T")

_encoder = msgspec.json.Encoder()


class Undecodable(ValueError):
    """A payload that is not valid for the expected type (the sender's fault)."""


class Unbelievable(Undecodable):
    """A valid object event whose values no real object has (``proto.bounds``)."""


def encode(event: msgspec.Struct) -> bytes:
    return _encoder.encode(event)


_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}


def decode(data: bytes, type_: type[T] | Any) -> T:
    """Decode ``data`` as ``type_`` (a Struct or a union of tagged Structs)."""
    decoder = _decoders.get(type_)
    if decoder is None:
        decoder = _decoders[type_] = msgspec.json.Decoder(type_)
    try:
        event = decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise Undecodable(_explain(data, exc)) from exc
    except msgspec.DecodeError as exc:
        raise Undecodable(f"not JSON: {exc}") from exc
    if isinstance(event, ObjectEvent) and (why := impossible(event)):  # type: ignore[arg-type]
        raise Unbelievable(f"out of bounds: {why}")
    return event  # type: ignore[no-any-return]


def _explain(data: bytes, exc: msgspec.ValidationError) -> str:
    """Say whether the type is unknown, the version is wrong, or a field is bad."""
    message = str(exc)
    if "Invalid value" in message and "`$.type`" in message:
        try:
            tag = msgspec.json.decode(data).get("type")
        except (msgspec.DecodeError, AttributeError):
            tag = None
        if isinstance(tag, str) and "." in tag:
            name, _, version = tag.rpartition(".")
            return f"unknown event type or unsupported schema version {tag!r} ({name} {version})"
    return message


def field_error(exc: msgspec.ValidationError) -> str:
    """msgspec's ``Expected `float` <= 1 - at `$.tiers[0].minimum``` as a person reads it:
    ``tiers[0].minimum: Expected float <= 1`` (``<root>`` when no field is named)."""
    what, sep, where = str(exc).rpartition(" - at ")
    if not sep:
        return str(exc)
    path = where.strip("`").removeprefix("$").removeprefix(".") or "<root>"
    return f"{path}: {what.replace('`', '')}"
