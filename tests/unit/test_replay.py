"""``baton replay`` on hand-built recordings: decisions, --compare, --gang, bad lines, order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from libs.testing.builders import gang, node
from proto.k8s import NodeEvent, PodEvent, PodGroupEvent
from proto.placement import GangPlaced, GangUnschedulable
from proto.ticks import GangPolicy, RecordedPolicy, RecordedTick
from services.cli import recording, replay
from services.cli.services import SERVICES, gang_inputs
from services.gang import core

pytestmark = pytest.mark.unit
GANG = SERVICES["gang"]


class Line(msgspec.Struct, kw_only=True, omit_defaults=True):
    subject: str = ""
    stream: str = ""
    seq: int = 0
    data: Any


def session() -> list[Line]:
    """Two 8-GPU nodes; ``big`` wants 16-GPU pods (no node has them), ``job7`` two 8-GPU pods.
    K8S seqs 1..8, then a tick that saw all of them (EVENTS seq 1)."""
    big_group, big_pods = gang("big", 1, gpus=16, created_at=1.0)
    job_group, job_pods = gang("job7", 2, gpus=8, created_at=2.0)
    rack = {"topology.kubernetes.io/zone": "z", "baton.io/block": "b", "baton.io/rack": "r1"}
    events: list[Any] = [
        NodeEvent(op="upsert", at=100.0, node=node("n1").with_labels(rack).build()),
        NodeEvent(op="upsert", at=100.0, node=node("n2").with_labels(rack).build()),
        PodGroupEvent(op="upsert", at=101.0, pod_group=big_group),
        PodGroupEvent(op="upsert", at=101.0, pod_group=job_group),
        *(PodEvent(op="upsert", at=102.0, pod=p) for p in big_pods + job_pods),
    ]
    lines = [
        Line(subject="baton.c1.k8s.x", stream="BATON_C1_K8S", seq=i, data=e)
        for i, e in enumerate(events, 1)
    ]
    tick = RecordedTick(at=103.0, k8s_seq=len(events))
    lines.append(
        Line(subject="baton.c1.placement.tick", stream="BATON_C1_EVENTS", seq=1, data=tick)
    )
    return lines


def with_decisions(lines: list[Line]) -> list[Line]:
    """Add what a gang service would have published: its core's outputs, in EVENTS order."""
    state, seq, out = core.initial(), 1, list(lines)
    for line in lines:
        event = core.Tick(at=line.data.at) if isinstance(line.data, RecordedTick) else line.data
        state, outputs = core.step(state, event, line.data.at)
        for o in outputs:
            if isinstance(o, GangPlaced | GangUnschedulable):
                seq += 1
                out.append(
                    Line(subject="baton.c1.placement.x", stream="BATON_C1_EVENTS", seq=seq, data=o)
                )
            else:
                out.append(
                    Line(subject="baton.c1.action.x", stream="BATON_C1_ACTIONS", seq=1, data=o)
                )
    return out


def write(path: Path, lines: list[Line], *, bare: bool = False) -> Path:
    items = [line.data if bare else line for line in lines]
    path.write_bytes(b"".join(msgspec.json.encode(i) + b"\n" for i in items))
    return path


def test_a_hand_built_recording_replays_to_the_expected_decisions(tmp_path: Path) -> None:
    records = recording.read(
        write(tmp_path / "s.jsonl", session()), types=GANG.types, tags=GANG.tags
    )
    run = replay.replay(GANG, records, state=core.initial())
    placed = [d.event for d in run.decisions if isinstance(d.event, GangPlaced)]
    waiting = [d.event for d in run.decisions if isinstance(d.event, GangUnschedulable)]
    assert [p.gang for p in placed] == ["default/job7"]
    assert sorted(b.node for b in placed[0].bindings) == ["n1", "n2"]
    assert [w.gang for w in waiting] == ["default/big"]
    assert "no ready node matches" in waiting[0].reason
    assert [type(a.event).__name__ for a in run.actions] == ["BindGang"]
    assert all(d.cause.line == 8 for d in run.decisions)  # the tick's line


def test_the_cli_prints_one_line_per_decision_and_the_speed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert replay.run(["--from", str(write(tmp_path / "s.jsonl", session()))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any("placed default/job7: 2 pods in baton.io/rack=r1" in line for line in out)
    assert any("unschedulable default/big: no ready node" in line for line in out)
    assert any("-> bind-gang default/job7" in line for line in out)
    assert "replayed 8 inputs (1 ticks; order: ticks placed by stream sequence)" in out[-1]
    assert "events/s" in out[-1] and "real time (recorded span 3.0 s" in out[-1]


def test_compare_passes_on_the_recorded_decisions_and_names_the_first_that_differs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = with_decisions(session())
    good = write(tmp_path / "good.jsonl", lines)
    assert replay.run(["--from", str(good), "--compare", "--quiet"]) == 0
    assert "compare: identical (2 decisions and 1 actions)" in capsys.readouterr().out

    for line in lines:  # the service had put job7 on n3 instead
        if isinstance(line.data, GangPlaced):
            moved = tuple(msgspec.structs.replace(b, node="n3") for b in line.data.bindings)
            line.data = msgspec.structs.replace(line.data, bindings=moved)
    bad = write(tmp_path / "bad.jsonl", lines)
    assert replay.run(["--from", str(bad), "--compare", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "DIVERGED at decision 2 (gang default/job7)" in out
    assert '"node":"n3"' in out.split("recorded (line")[1].split("\n")[0]
    assert "caused by: tick" in out
    assert "last inputs about default/job7 before it:" in out


def test_a_replay_that_makes_more_decisions_than_were_recorded_diverges(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [ln for ln in with_decisions(session()) if not isinstance(ln.data, GangPlaced)]
    assert replay.run(["--from", str(write(tmp_path / "s.jsonl", lines)), "--compare"]) == 1
    assert "recorded: nothing (the recording ends here)" in capsys.readouterr().out


def test_gang_filter_tells_one_gangs_story(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "s.jsonl", session())
    assert replay.run(["--from", str(path), "--gang", "default/job7"]) == 0
    out = capsys.readouterr().out.splitlines()[:-1]
    assert any("<- podgroup upsert default/job7 minMember=2" in line for line in out)
    assert any("<- pod upsert default/job7-1 Pending" in line for line in out)
    assert any("placed default/job7" in line for line in out)
    assert not any("big" in line for line in out)


def test_bare_payload_lines_as_baton_tail_prints_them_replay_in_file_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "tail.jsonl", session(), bare=True)
    assert replay.run(["--from", str(path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "order: file order (no stream sequences)" in out
    assert "-> 2 decisions, 1 actions" in out


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"not json at all", "s.jsonl:3: not a JSON line"),
        (b'{"foo": 1}', "s.jsonl:3: neither an envelope"),
        (b'{"type": "k8s.pod.v1", "op": "upsert"}', "s.jsonl:3: bad k8s.pod.v1 event"),
        (b'{"subject": "x", "data": {"type": "gang.tick.v1"}}', "s.jsonl:3: bad gang.tick.v1"),
    ],
)
def test_a_bad_line_is_an_error_naming_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: bytes, message: str
) -> None:
    good = msgspec.json.encode(session()[0])
    (tmp_path / "s.jsonl").write_bytes(good + b"\n\n" + line + b"\n" + good + b"\n")
    assert replay.run(["--from", str(tmp_path / "s.jsonl")]) == 2
    assert message in capsys.readouterr().err


def test_events_of_other_services_are_skipped(tmp_path: Path) -> None:
    other = b'{"type": "health.verdict.v1", "node": "n1", "at": 1.0}\n'
    path = tmp_path / "s.jsonl"
    path.write_bytes(other + write(tmp_path / "x.jsonl", session()).read_bytes())
    records = recording.read(path, types=GANG.types, tags=GANG.tags)
    assert len(records) == 8 and records[0].line == 2


def test_each_tick_is_fed_after_exactly_the_inputs_it_had_seen() -> None:
    """HISTORY copies K8S and EVENTS independently: a pod may sit before a tick in the
    file although the tick did not see it. The tick's k8s_seq places it."""
    pod = PodEvent(op="upsert", at=1.0, pod=gang("g", 1)[1][0])
    records = [
        recording.Record(line=1, subject="", stream="BATON_C1_K8S", seq=1, event=pod),
        recording.Record(line=2, subject="", stream="BATON_C1_K8S", seq=2, event=pod),
        recording.Record(
            line=3,
            subject="",
            stream="BATON_C1_EVENTS",
            seq=1,
            event=RecordedTick(at=2.0, k8s_seq=1),
        ),
        recording.Record(
            line=4,
            subject="",
            stream="BATON_C1_EVENTS",
            seq=2,
            event=RecordedTick(at=3.0, k8s_seq=2),
        ),
    ]
    feed, order = gang_inputs(records)
    assert [r.line for r in feed] == [1, 3, 2, 4]
    assert order == "ticks placed by stream sequence"


def test_missing_k8s_messages_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [ln for ln in session() if ln.seq not in (3, 4)]
    assert replay.run(["--from", str(write(tmp_path / "s.jsonl", lines)), "--quiet"]) == 0
    assert "lacks 2 K8S messages (seq 3-4)" in capsys.readouterr().out


def test_admission_replay_admits_within_quota_and_queues_beyond_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "s.jsonl", session())
    assert replay.run(["--from", str(path), "--service", "admission"]) == 0
    out = capsys.readouterr().out
    # The default team owns both nodes: 16 GPUs. big (16) is admitted, job7 waits.
    assert "admission.admitted.v1 gang=default/big" in out
    assert "gang=default/job7 team=default reason=team 'default' uses 16 of its 16 GPU" in out
    assert "action.annotate.v1 kind=PodGroup namespace=default name=big" in out
    assert "order: K8S stream order" in out


def test_replay_decides_under_the_recorded_policy_unless_settings_say_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """job7 is not admitted: a service that required admission placed nothing, so
    replay must too; a what-if without the gate places it."""
    gated = RecordedPolicy(at=99.0, policy=GangPolicy(require_admission=True))
    lines = [Line(subject="baton.c1.placement.policy", stream="BATON_C1_EVENTS", data=gated)]
    path = write(tmp_path / "s.jsonl", lines + session())
    records = recording.read(path, types=GANG.types, tags=GANG.tags)

    monkeypatch.delenv("BATON_GANG_REQUIRE_ADMISSION", raising=False)
    state, source = replay.initial_state(GANG, records, settings=None, teams="")
    assert source == "as recorded by the live service"
    placed = [d for d in replay.replay(GANG, records, state=state).decisions
              if isinstance(d.event, GangPlaced)]  # fmt: skip
    assert placed == []

    monkeypatch.setenv("BATON_GANG_REQUIRE_ADMISSION", "0")
    state, source = replay.initial_state(GANG, records, settings=None, teams="")
    assert source.endswith("(what-if: not as recorded)")
    placed = [d for d in replay.replay(GANG, records, state=state).decisions
              if isinstance(d.event, GangPlaced)]  # fmt: skip
    assert [d.event.gang for d in placed] == ["default/job7"]
