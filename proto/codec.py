"""JSON encoding of bus payloads, and the typed error for payloads we cannot read.

Each payload is a tagged ``msgspec.Struct``; the tag (``type``) names the event and
its schema version (``k8s.pod.v1``). A consumer decodes with the closed union for
its stream; anything else is ``Undecodable``, which the bus dead-letters with the
reason instead of crashing.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

T = TypeVar("T")

_encoder = msgspec.json.Encoder()


class Undecodable(ValueError):
    """A payload that is not valid for the expected type (the sender's fault)."""


def encode(event: msgspec.Struct) -> bytes:
    return _encoder.encode(event)


_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}


def decode(data: bytes, type_: type[T] | Any) -> T:
    """Decode ``data`` as ``type_`` (a Struct or a union of tagged Structs)."""
    decoder = _decoders.get(type_)
    if decoder is None:
        decoder = _decoders[type_] = msgspec.json.Decoder(type_)
    try:
        return decoder.decode(data)  # type: ignore[no-any-return]
    except msgspec.ValidationError as exc:
        raise Undecodable(_explain(data, exc)) from exc
    except msgspec.DecodeError as exc:
        raise Undecodable(f"not JSON: {exc}") from exc


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
