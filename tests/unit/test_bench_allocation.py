"""The whole-system bench's GPUs-allocated-over-time, from a recording's pod events."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from baton.proto.actions import Binding
from baton.proto.admission import GangAdmitted, GangReleased
from baton.proto.k8s import Pod, PodEvent
from baton.proto.placement import GangPlaced
from tests.bench import allocation

pytestmark = pytest.mark.unit


def _pod(name: str, *, node: str = "", phase: str = "Running", terminating: bool = False) -> Pod:
    return Pod(namespace="t", name=name, uid=f"u-{name}", node_name=node, phase=phase,  # type: ignore[arg-type]
               terminating=terminating, requests={"nvidia.com/gpu": 4})  # fmt: skip


EVENTS = [
    PodEvent(op="upsert", at=0.0, pod=_pod("a", phase="Pending")),  # not bound: nothing
    PodEvent(op="upsert", at=0.5, pod=_pod("a", node="n1")),  # 4
    PodEvent(op="upsert", at=1.0, pod=_pod("b", node="n2")),  # 8: 90% of 8 first reached
    PodEvent(op="upsert", at=2.0, pod=_pod("b", node="n2")),  # a status write: no change
    PodEvent(op="upsert", at=3.0, pod=_pod("a", node="n1", phase="Succeeded")),  # 4
    PodEvent(op="upsert", at=4.0, pod=_pod("b", node="n2", terminating=True)),  # 0, as baton up
    PodEvent(op="delete", at=5.0, pod=_pod("b", node="n2", terminating=True)),  # still 0
    PodEvent(op="upsert", at=5.0, pod=_pod("c", node="n1")),  # 4
    PodEvent(op="upsert", at=7.0, pod=_pod("c", node="n1", phase="Failed")),  # 0
]


def test_each_change_counts_for_as_long_as_it_held() -> None:
    levels = allocation.steps(EVENTS)
    assert levels == [(0.5, 4), (1.0, 8), (3.0, 4), (4.0, 0), (5.0, 4), (7.0, 0)]
    found = allocation.share(levels, 8)
    assert found is not None
    # from 1.0 to 7.0: 8 GPUs for 2 s, 4 for 1 s, 0 for 1 s, 4 for 2 s = 28 GPU-s of 48
    assert found.full_at == 0.5 and found.seconds == 6.0
    assert found.mean == pytest.approx(28 / 48) and found.lowest == 0.0


def test_a_run_that_never_fills_has_no_share() -> None:
    assert allocation.share(allocation.steps(EVENTS), 16) is None
    assert allocation.describe(None) == "90% of GPUs never allocated"


def test_a_recording_file_is_read_in_history_order(tmp_path: Path) -> None:
    """Envelopes as ``baton replay --record`` writes them, out of order in the file."""
    lines = [
        {"subject": f"baton.c1.k8s.pod.t.{e.pod.name}", "stream": "BATON_C1_K8S", "seq": i,
         "hseq": i, "data": msgspec.to_builtins(e)}
        for i, e in enumerate(EVENTS, 1)
    ]  # fmt: skip
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in reversed(lines)) + "\n")
    found = allocation.from_recording(str(path), 8)
    assert found is not None and found.mean == pytest.approx(28 / 48)


def test_the_gpus_not_allocated_are_told_apart_by_where_their_gang_is() -> None:
    """Each admitted gang's GPUs not allocated, by its phase; the rest of what is free is
    held by no admitted gang. The parts and the allocated share add up to the whole."""
    pods = (Binding(namespace="t", pod="a", node="n1"), Binding(namespace="t", pod="b", node="n2"))
    placed = GangPlaced(gang="t/g1", action_id="bind-1", at=1.0, bindings=pods)
    events: list[allocation.Event] = [
        GangAdmitted(gang="t/g1", team="t", gpus=8, at=0.0),
        placed,
        PodEvent(op="upsert", at=2.0, pod=_pod("a", node="n1")),  # half: the span starts
        PodEvent(op="upsert", at=3.0, pod=_pod("b", node="n2")),
        PodEvent(op="upsert", at=5.0, pod=_pod("a", node="n1", phase="Succeeded")),
        PodEvent(op="delete", at=6.0, pod=_pod("b", node="n2")),
        GangReleased(gang="t/g1", team="t", gpus=8, at=7.0),
        GangAdmitted(gang="t/g2", team="t", gpus=8, at=8.0),
        PodEvent(op="upsert", at=9.0, pod=_pod("c", phase="Pending")),
    ]
    found = allocation.idle(events, 8, first=0.5)
    assert found is not None
    # from 2 to 9 (56 GPU-s): binding 4 for 1 s; ending 4 for 1 s and 8 for 1 s; free and
    # unheld 8 for 1 s; g2 waiting 8 for 1 s; allocated 4 + 16 + 4 = 24 GPU-s
    assert found == pytest.approx({
        allocation.BINDING: 4 / 56, allocation.ENDING: 12 / 56,
        allocation.UNHELD: 8 / 56, allocation.WAITING: 8 / 56,
    })  # fmt: skip
    assert sum(found.values()) == pytest.approx(1 - 24 / 56)
