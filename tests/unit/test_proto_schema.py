"""The JSON Schemas in proto/baton/proto/schemas match the event types, and every type is
named once."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from baton.proto import codec, schema
from baton.proto.deadletter import DeadLetter

pytestmark = pytest.mark.unit


def test_schema_files_are_fresh() -> None:
    stale = schema.stale()
    assert not stale, f"stale JSON Schemas {stale}; refresh with: {schema.REFRESH}"


def test_every_event_type_has_a_versioned_unique_tag() -> None:
    types = schema.event_types()
    assert {"k8s.pod.v1", "action.bind-gang.v1", "result.v1", "deadletter.v1"} <= set(types)
    assert len(set(types.values())) == len(types)  # one tag, one class


def test_each_schema_pins_its_type_tag() -> None:
    for name, text in schema.generate().items():
        tag = name.removesuffix(".json")
        document = json.loads(text)
        definitions = document["$defs"]
        root = definitions[document["$ref"].rsplit("/", 1)[-1]]
        assert root["properties"]["type"] == {"enum": [tag]}, name


def test_stale_reports_missing_changed_and_leftover_files(tmp_path: Path) -> None:
    schema.write(tmp_path)
    assert schema.stale(tmp_path) == []
    (tmp_path / "k8s.pod.v1.json").write_text("{}\n")
    (tmp_path / "k8s.gone.v1.json").write_text("{}\n")
    (tmp_path / "result.v1.json").unlink()
    assert schema.stale(tmp_path) == ["k8s.gone.v1.json", "k8s.pod.v1.json", "result.v1.json"]


def test_dead_letter_round_trips_and_refuses_an_unknown_error_class() -> None:
    letter = DeadLetter(
        subject="baton.c1.k8s.pod.a.b",
        stream="BATON_C1_K8S",
        seq=7,
        reason="not JSON",
        error_class="bad-input",
        payload="\\x00garbage",
        at=1.0,
    )
    assert codec.decode(codec.encode(letter), DeadLetter) == letter
    raw = msgspec.json.decode(codec.encode(letter))
    raw["error_class"] = "cosmic-ray"
    with pytest.raises(codec.Undecodable, match="error_class"):
        codec.decode(msgspec.json.encode(raw), DeadLetter)
