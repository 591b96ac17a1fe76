"""``baton replay`` on hand-built recordings: decisions, --compare, --gang, bad lines, order."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from baton.proto.k8s import NodeEvent, PodEvent, PodGroupEvent
from baton.proto.placement import GangPlaced, GangPolicy, GangUnschedulable
from baton.proto.runner import Started, Tick
from baton.services.cli import recording, replay
from baton.services.cli.services import replayable
from baton.services.gang import core
from tests.support.builders import gang, node

pytestmark = pytest.mark.unit
GANG = replayable()["gang"]


class Line(msgspec.Struct, kw_only=True, omit_defaults=True):
    subject: str = ""
    stream: str = ""
    seq: int = 0
    hseq: int = 0
    data: Any


def k8s_subject(event: Any) -> str:
    match event:
        case NodeEvent(node=n):
            return f"baton.c1.k8s.node.{n.name}"
        case PodGroupEvent(pod_group=g):
            return f"baton.c1.k8s.podgroup.{g.namespace}.{g.name}"
        case PodEvent(pod=p):
            return f"baton.c1.k8s.pod.{p.namespace}.{p.name}"
    raise TypeError(event)


def objects() -> list[Any]:
    """Two 8-GPU nodes; ``big`` wants 16-GPU pods (no node has them), ``job7`` two 8-GPU pods."""
    big_group, big_pods = gang("big", 1, gpus=16, created_at=1.0)
    job_group, job_pods = gang("job7", 2, gpus=8, created_at=2.0)
    rack = {"topology.kubernetes.io/zone": "z", "baton.io/block": "b", "baton.io/rack": "r1"}
    return [
        NodeEvent(op="upsert", at=100.0, node=node("n1").with_labels(rack).build()),
        NodeEvent(op="upsert", at=100.0, node=node("n2").with_labels(rack).build()),
        PodGroupEvent(op="upsert", at=101.0, pod_group=big_group),
        PodGroupEvent(op="upsert", at=101.0, pod_group=job_group),
        *(PodEvent(op="upsert", at=102.0, pod=p) for p in big_pods + job_pods),
    ]


class History:
    """A HISTORY being written: each line gets the next HISTORY seq, K8S lines their K8S seq."""

    def __init__(self) -> None:
        self.lines: list[Line] = []
        self.k8s = 0

    def k8s_event(self, event: Any) -> None:
        self.k8s += 1
        self.add(k8s_subject(event), event, stream="BATON_C1_K8S", seq=self.k8s)

    def add(
        self, subject: str, event: Any, *, stream: str = "BATON_C1_EVENTS", seq: int = 0
    ) -> None:
        hseq = len(self.lines) + 1
        self.lines.append(
            Line(subject=subject, stream=stream, seq=seq or hseq, hseq=hseq, data=event)
        )

    def start(self, service: str = "gang", *, policy: Any = None, at: float = 99.0) -> None:
        """A start that saw everything so far (its snapshot and cut are the current ends)."""
        given = msgspec.to_builtins(policy) if policy is not None else {}
        started = Started(service=service, at=at, k8s_seq=self.k8s,
                          history_seq=len(self.lines), policy=given)  # fmt: skip
        self.add(f"baton.c1.runner.started.{service}", started, stream="BATON_C1_RUNNER")

    def tick(self, at: float, service: str = "gang") -> None:
        self.add(
            f"baton.c1.runner.tick.{service}",
            Tick(at=at, service=service),
            stream="BATON_C1_RUNNER",
        )


def session(*, policy: Any = None) -> list[Line]:
    """The objects, then the gang service starts (its snapshot holds them all), a tick."""
    h = History()
    for event in objects():
        h.k8s_event(event)
    h.start(policy=policy)
    h.tick(103.0)
    return h.lines


def with_decisions(lines: list[Line]) -> list[Line]:
    """Add what a gang service would have published: its core's outputs, in order."""
    state, out = core.initial(), list(lines)
    for line in lines:
        if isinstance(line.data, Started):
            continue
        state, outputs = core.step(state, line.data, line.data.at)
        for o in outputs:
            hseq = len(out) + 1
            if isinstance(o, GangPlaced | GangUnschedulable):
                out.append(Line(subject="baton.c1.placement.x", stream="BATON_C1_EVENTS",
                                seq=hseq, hseq=hseq, data=o))  # fmt: skip
            else:
                out.append(Line(subject="baton.c1.action.x", stream="BATON_C1_ACTIONS",
                                seq=hseq, hseq=hseq, data=o))  # fmt: skip
    return out


def write(path: Path, lines: list[Line], *, bare: bool = False) -> Path:
    items = [line.data if bare else line for line in lines]
    path.write_bytes(b"".join(msgspec.json.encode(i) + b"\n" for i in items))
    return path


def test_a_hand_built_recording_replays_to_the_expected_decisions(tmp_path: Path) -> None:
    records = recording.read(
        write(tmp_path / "s.jsonl", session()), types=GANG.types, tags=GANG.tags
    )
    run = replay.replay(GANG, GANG.segments(records))
    placed = [d.event for d in run.decisions if isinstance(d.event, GangPlaced)]
    waiting = [d.event for d in run.decisions if isinstance(d.event, GangUnschedulable)]
    assert [p.gang for p in placed] == ["default/job7"]
    assert sorted(b.node for b in placed[0].bindings) == ["n1", "n2"]
    assert [w.gang for w in waiting] == ["default/big"]
    assert "no node takes a member: 0/" in waiting[0].reason
    assert [type(a.event).__name__ for a in run.actions] == ["BindGang"]
    assert all(d.cause.line == 9 for d in run.decisions)  # the tick's line


def test_the_cli_prints_one_line_per_decision_and_the_speed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert replay.run(["--from", str(write(tmp_path / "s.jsonl", session()))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any("placed default/job7: 2 pods in baton.io/rack=r1" in line for line in out)
    assert any("unschedulable default/big: no node takes a member" in line for line in out)
    assert any("-> bind-gang default/job7" in line for line in out)
    assert "replayed 8 inputs (1 ticks; order: as the live runner fed them (1 run(s)" in out[-1]
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


def test_a_gang_the_recording_never_names_is_said_so_not_an_empty_story(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "s.jsonl", session())
    assert replay.run(["--from", str(path), "--gang", "team-a/job7"]) == 1
    err = capsys.readouterr().err
    assert "nothing in this recording is about team-a/job7 (2 gangs are: " in err, err
    assert "default/job7" in err


def test_bare_payload_lines_as_baton_tail_prints_them_replay_in_file_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "tail.jsonl", session(), bare=True)
    assert replay.run(["--from", str(path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "order: recorded order (no start record" in out
    assert "-> 2 decisions, 1 actions" in out


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"not json at all", "s.jsonl:3: not a JSON line"),
        (b'{"foo": 1}', "s.jsonl:3: neither an envelope"),
        (b'{"type": "k8s.pod.v1", "op": "upsert"}', "s.jsonl:3: bad k8s.pod.v1 event"),
        (b'{"subject": "x", "data": {"type": "runner.tick.v1"}}', "s.jsonl:3: bad runner.tick"),
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
    assert len(records) == 9 and records[0].line == 2


def test_the_feed_is_the_snapshot_then_history_after_the_cut_without_repeats() -> None:
    """The gang starts after n1 (K8S 1) and n2 (K8S 2) are stored, but HISTORY had copied
    only n1 when the start cut it: n2 then reaches HISTORY after the cut. The snapshot
    already held n2, so it is not fed twice; n2's next version is."""
    n1, n2 = (e for e in objects() if isinstance(e, NodeEvent))
    h = History()
    h.k8s_event(n1)
    h.k8s += 1  # n2 is in K8S (seq 2) ...
    started = Started(service="gang", at=1.0, k8s_seq=2, history_seq=1)
    h.add("baton.c1.runner.started.gang", started, stream="BATON_C1_RUNNER")
    h.add("baton.c1.k8s.node.n2", n2, stream="BATON_C1_K8S", seq=2)  # ... copied late
    h.k8s_event(msgspec.structs.replace(n2, at=5.0))  # K8S 3: n2 changed again
    records = list(recording.parse(
        (msgspec.json.encode(line) for line in h.lines), types=GANG.types, tags=GANG.tags
    ))  # fmt: skip
    (segment,) = GANG.segments(records)
    fed = [(r.subject.rsplit(".", 1)[1], r.seq, r.event.at) for r in segment.feed]
    assert fed == [("n1", 1, 100.0), ("n2", 2, 100.0), ("n2", 3, 5.0)]
    assert [r.line for r in segment.feed] == [1, 3, 4]  # snapshot: n1 and n2 from line 3


def test_each_run_of_a_service_starts_from_a_fresh_core(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = session()
    h = History()
    h.lines, h.k8s = list(lines), 7
    h.start(at=200.0)  # a restart: the new run's snapshot holds every object again
    h.tick(203.0)
    records = recording.read(write(tmp_path / "s.jsonl", h.lines), types=GANG.types, tags=GANG.tags)
    segments = GANG.segments(records)
    assert [len(s.feed) for s in segments] == [8, 8]  # 7 objects and a tick, twice
    run = replay.replay(GANG, segments)
    placed = [d.event.gang for d in run.decisions if isinstance(d.event, GangPlaced)]
    assert placed == ["default/job7", "default/job7"]  # each run decided it afresh


def test_missing_k8s_messages_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [ln for ln in session() if not (ln.stream == "BATON_C1_K8S" and ln.seq in (3, 4))]
    assert replay.run(["--from", str(write(tmp_path / "s.jsonl", lines)), "--quiet"]) == 0
    assert "lacks 2 K8S messages (seq 3-4)" in capsys.readouterr().out


def test_admission_replay_admits_within_quota_and_queues_beyond_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "s.jsonl", session())  # no admission start: defaults, file order
    assert replay.run(["--from", str(path), "--service", "admission"]) == 0
    out = capsys.readouterr().out
    # The default team owns both nodes: 16 GPUs. big asks a 16-GPU pod that no 8-GPU
    # node takes: set aside, holding none of them; job7 (two 8-GPU pods) is admitted.
    assert "gang=default/big team=default reason=set aside: a member asks 16 GPUs" in out
    assert "admission.admitted.v1 gang=default/job7" in out
    assert "action.annotate.v1 kind=PodGroup namespace=default name=job7" in out
    assert "order: recorded order (no start record" in out


def test_replay_decides_under_the_recorded_policy_unless_settings_say_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """job7 is not admitted: a service that required admission placed nothing, so
    replay must too; a what-if without the gate places it."""
    path = write(tmp_path / "s.jsonl", session(policy=GangPolicy(require_admission=True)))
    records = recording.read(path, types=GANG.types, tags=GANG.tags)

    monkeypatch.delenv("BATON_GANG_REQUIRE_ADMISSION", raising=False)
    policy, source = replay.what_if(GANG, settings=None)
    assert policy is None and source.startswith("as recorded by the live service")
    run = replay.replay(GANG, GANG.segments(records), policy=policy)
    assert [d for d in run.decisions if isinstance(d.event, GangPlaced)] == []

    monkeypatch.setenv("BATON_GANG_REQUIRE_ADMISSION", "0")
    policy, source = replay.what_if(GANG, settings=None)
    assert source.endswith("(what-if: not as recorded)")
    run = replay.replay(GANG, GANG.segments(records), policy=policy)
    placed = [d for d in run.decisions if isinstance(d.event, GangPlaced)]
    assert [d.event.gang for d in placed] == ["default/job7"]


def test_outputs_are_compared_stream_by_stream() -> None:
    """HISTORY copies two streams in no order between them: a decision stored in EVENTS may
    sit before one stored in LIMITS although the core made it after. Within one stream the
    order is the publish order, and a swap there is a divergence."""
    a, b, c = (GangPlaced(gang=f"default/{n}", at=1.0, action_id=n, bindings=()) for n in "abc")
    cause = recording.Record(line=1, subject="", stream="", seq=0, event=a)

    def rec(event: Any, stream: str, position: int) -> recording.Record:
        return recording.Record(line=position, subject="", stream=stream, seq=position,
                                event=event, hseq=position)  # fmt: skip

    streams = {a: "EVENTS", b: "LIMITS", c: "LIMITS"}
    replayed = [replay.Output(e, cause, i) for i, e in enumerate((a, b, c))]
    across = [rec(b, "LIMITS", 1), rec(c, "LIMITS", 2), rec(a, "EVENTS", 3)]
    assert replay.first_divergence("decision", across, replayed, stream_of=streams.get) is None
    within = [rec(c, "LIMITS", 1), rec(b, "LIMITS", 2), rec(a, "EVENTS", 3)]
    found = replay.first_divergence("decision", within, replayed, stream_of=streams.get)
    assert found is not None and found.recorded is not None and found.recorded.event == c


def test_an_object_out_of_bounds_is_never_fed_and_its_last_good_revision_is() -> None:
    """n1 claims 1,000 GPUs after its good state, before a start: the live runner
    dead-lettered it and fed n1's last good revision from HISTORY; so does replay."""
    n1, _ = (e for e in objects() if isinstance(e, NodeEvent))
    h = History()
    h.k8s_event(n1)
    forged = msgspec.structs.replace(n1.node, allocatable={"nvidia.com/gpu": 1000})
    h.k8s_event(NodeEvent(op="upsert", at=150.0, node=forged))
    h.add("baton.c1.runner.started.gang", Started(service="gang", at=1.0, k8s_seq=2,
          history_seq=2), stream="BATON_C1_RUNNER")  # fmt: skip
    records = list(recording.parse(
        (msgspec.json.encode(line) for line in h.lines), types=GANG.types, tags=GANG.tags
    ))  # fmt: skip
    (segment,) = GANG.segments(records)
    assert [(r.subject, r.event.at) for r in segment.feed] == [("baton.c1.k8s.node.n1", 100.0)]


def test_compare_prints_the_verdict_first_and_the_differences_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path / "good.jsonl", with_decisions(session()))
    assert replay.run(["--from", str(good), "--compare"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "compare: identical (2 decisions and 1 actions)"
    assert not any("placed default/job7" in line for line in out)  # no listing


def test_a_pipe_closed_early_ends_quietly(tmp_path: Path) -> None:
    """`baton replay ... | head`: the reader is gone before the first line is written."""
    path = write(tmp_path / "s.jsonl", session())
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "baton.services.cli", "replay", "--from", str(path)],
            stdout=write_end, stderr=subprocess.PIPE, timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b""
