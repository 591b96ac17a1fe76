"""The agent core, table-driven: what counts as a change, Xids once, heartbeats, power."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from baton.proto import telemetry as t
from baton.services.agent import core
from baton.services.agent.core import changes
from baton.services.agent.core.readings import (
    AnyReading,
    Backend,
    GpuProcess,
    Gpus,
    GpuSample,
    Host,
    Pods,
    Power,
    Tick,
    XidSeen,
)

pytestmark = pytest.mark.unit

NODE = "gpu-0001"
CONFIG = core.Config(
    node=NODE, version="0.1.0", backends=("nvml", "kmsg"), heartbeat_s=10.0, refresh_s=300.0
)
BANDS = changes.deadbands(temperature_c=3.0, disk_ratio=0.01)


def gpu(index: int = 0, *, processes: Sequence[GpuProcess] = (), **fields: Any) -> GpuSample:
    status = t.GpuStatus(
        index=index, uuid=f"GPU-{index}", bus_id=f"0000:{0x18 + index:02x}:00",
        temperature_c=40, ecc_volatile_sbe=0, ecc_volatile_dbe=0, nvlink_errors=0,
    )  # fmt: skip
    return GpuSample(status=msgspec.structs.replace(status, **fields), processes=tuple(processes))


def gpus(*samples: GpuSample, at: float = 1.0) -> Gpus:
    samples = samples or (gpu(0), gpu(1))
    return Gpus(at=at, gpus=samples, expected=len(samples), found=len(samples))


def xid(seq: int, *, source: str = "kmsg", at: float = 1.0, xid: int = 79, **kw: Any) -> XidSeen:
    return XidSeen(at=at, source=source, seq=seq, xid=xid, **kw)  # type: ignore[arg-type]


def run(
    steps: Sequence[tuple[float, AnyReading]], state: core.State | None = None
) -> tuple[core.State, list[list[t.AnyTelemetry]]]:
    """Feed (now, reading) pairs; the events published at each step."""
    state = state or core.initial(CONFIG, started=0.0)
    published = []
    for now, reading in steps:
        state, outputs = core.step(state, reading, now)
        published.append(core.publishes(outputs))
    return state, published


def kinds(events: Sequence[t.AnyTelemetry]) -> list[str]:
    return [t.KIND_OF[type(e)] for e in events]


# --- what counts as a change (changes.py) -------------------------------------------------

STATUS = gpu(0).status
DISK = t.Disk(mount="/", used_ratio=0.5)


@pytest.mark.parametrize(
    ("old", "new", "changed"),
    [
        (STATUS, msgspec.structs.replace(STATUS, temperature_c=42), False),  # within 3 °C
        (STATUS, msgspec.structs.replace(STATUS, temperature_c=43), True),
        (STATUS, msgspec.structs.replace(STATUS, temperature_c=37), True),
        (STATUS, msgspec.structs.replace(STATUS, temperature_c=None), True),  # stopped reading
        (STATUS, msgspec.structs.replace(STATUS, ecc_volatile_sbe=1), True),  # any counter move
        (STATUS, msgspec.structs.replace(STATUS, nvlink_errors=1), True),
        (STATUS, msgspec.structs.replace(STATUS, present=False), True),
        (STATUS, msgspec.structs.replace(STATUS, recovery_action="reset"), True),
        (STATUS, msgspec.structs.replace(STATUS, row_remap_pending=True), True),
        (STATUS, msgspec.structs.replace(STATUS, zombie_mib=512), True),
        (STATUS, msgspec.structs.replace(STATUS, failed=("retired_pages",)), True),
        (DISK, msgspec.structs.replace(DISK, used_ratio=0.505), False),  # within 0.01
        (DISK, msgspec.structs.replace(DISK, used_ratio=0.52), True),
        (DISK, msgspec.structs.replace(DISK, read_only=True), True),
        (t.Nic(name="ib0", up=True), t.Nic(name="ib0", up=False), True),
        (
            t.GpuReport(node=NODE, at=1.0, gpus=(STATUS,)),
            t.GpuReport(node=NODE, at=9.0, gpus=(STATUS,)),
            False,  # only the time moved
        ),
        (
            t.GpuReport(node=NODE, at=1.0, gpus=(STATUS,)),
            t.GpuReport(node=NODE, at=1.0, gpus=(STATUS, gpu(1).status)),
            True,  # a GPU appeared
        ),
        (
            t.NodeReport(node=NODE, at=1.0, gpus_expected=8, gpus_found=8),
            t.NodeReport(node=NODE, at=1.0, gpus_expected=8, gpus_found=7),
            True,
        ),
    ],
)
def test_change_table(old: Any, new: Any, changed: bool) -> None:
    assert changes.differs(old, new, BANDS) is changed


# --- reports -----------------------------------------------------------------------------


def test_first_reading_publishes_both_reports_and_a_repeat_publishes_nothing() -> None:
    _, published = run([(1.0, gpus()), (2.0, gpus(at=2.0))])
    assert kinds(published[0]) == ["gpu", "node"]
    report = published[0][0]
    assert isinstance(report, t.GpuReport) and report.node == NODE and report.at == 1.0
    assert [g.index for g in report.gpus] == [0, 1]
    assert published[1] == []


@pytest.mark.parametrize(
    ("temperatures", "published"),
    [
        ((40, 42), [True, False]),  # within the deadband
        ((40, 42, 44), [True, False, True]),  # drift adds up against the published 40
        ((40, 45, 46), [True, True, False]),
    ],
)
def test_temperature_is_published_past_its_deadband(
    temperatures: tuple[int, ...], published: list[bool]
) -> None:
    steps = [
        (float(i), gpus(gpu(0, temperature_c=c), at=float(i))) for i, c in enumerate(temperatures)
    ]
    _, out = run(steps)
    assert ["gpu" in kinds(events) for events in out] == published


def test_a_lost_gpu_changes_the_gpu_report_and_the_found_count() -> None:
    lost = Gpus(at=2.0, gpus=(gpu(0), gpu(1, present=False)), expected=2, found=1)
    _, out = run([(1.0, gpus()), (2.0, lost)])
    assert kinds(out[1]) == ["gpu", "node"]
    node = out[1][1]
    assert isinstance(node, t.NodeReport) and (node.gpus_expected, node.gpus_found) == (2, 1)


def test_gpus_that_cannot_be_read_publish_no_gpu_report_but_the_node_says_so() -> None:
    blind = Gpus(at=2.0, expected=8, found=None)  # NVML unavailable
    _, out = run([(1.0, gpus()), (2.0, blind)])
    assert kinds(out[1]) == ["node"]
    node = out[1][0]
    assert isinstance(node, t.NodeReport) and (node.gpus_expected, node.gpus_found) == (8, None)


def test_host_reading_publishes_the_node_report_only() -> None:
    host = Host(at=1.0, disks=(DISK,), nics=(t.Nic(name="eth0", up=True),))
    _, out = run(
        [(1.0, host), (2.0, Host(at=2.0, disks=(DISK,), nics=(t.Nic(name="eth0", up=False),)))]
    )
    assert kinds(out[0]) == ["node"] and kinds(out[1]) == ["node"]
    node = out[1][0]
    assert isinstance(node, t.NodeReport) and node.gpus_found is None  # no GPU reading yet


def test_an_unchanged_report_is_republished_after_the_refresh_period() -> None:
    state, out = run([(1.0, gpus()), (100.0, Tick(at=100.0)), (301.0, Tick(at=301.0))])
    reports = [[k for k in kinds(events) if k != "heartbeat"] for events in out]
    assert reports == [["gpu", "node"], [], ["gpu", "node"]]
    assert state.sent_gpu is not None and state.sent_gpu.at == 1.0  # the reading's time
    assert state.sent_gpu_at == 301.0


def test_refresh_gets_a_new_msg_id_so_jetstream_stores_it() -> None:
    state, first = core.step(core.initial(CONFIG, started=0.0), gpus(), 1.0)
    state, second = core.step(state, Tick(at=301.0), 301.0)
    ids = {o.msg_id for o in first + second if isinstance(o.event, t.GpuReport)}
    assert len(ids) == 2


# --- zombie GPU memory -------------------------------------------------------------------

P = GpuProcess


@pytest.mark.parametrize(
    ("processes", "pods", "zombie"),
    [
        ([P(pid=1, used_mib=100, pod="a/x")], None, None),  # no pods reading: unknown
        ([P(pid=1, used_mib=100, pod="a/x")], Pods(at=1.0, running=frozenset({"a/x"})), 0),
        ([P(pid=1, used_mib=100, pod="a/x")], Pods(at=1.0, running=frozenset()), 100),
        ([P(pid=1, used_mib=100), P(pid=2, used_mib=50, pod="a/y")],
         Pods(at=1.0, running=frozenset({"a/y"})), 100),  # no pod known, GPU held by no pod
        ([P(pid=1, used_mib=100)],
         Pods(at=1.0, running=frozenset({"a/x"}), gpu_owner={"GPU-0": "a/x"}), 0),  # the GPU's pod
        ([P(pid=1, used_mib=100)],
         Pods(at=1.0, running=frozenset(), gpu_owner={"GPU-0": "a/x"}), 100),  # its pod is gone
    ],
)  # fmt: skip
def test_zombie_memory(processes: list[GpuProcess], pods: Pods | None, zombie: int | None) -> None:
    assert core.zombie_mib(gpu(0, processes=processes), pods) == zombie


def test_a_pod_ending_turns_its_leftover_memory_into_a_zombie_report() -> None:
    sample = gpu(0, processes=[P(pid=9, used_mib=2048, pod="team-a/job-w-0")])
    steps = [
        (1.0, Pods(at=1.0, running=frozenset({"team-a/job-w-0"}))),
        (1.0, gpus(sample)),
        (2.0, Pods(at=2.0, running=frozenset())),
    ]
    _, out = run(steps)
    before, after = out[1][0], out[2][0]
    assert isinstance(before, t.GpuReport) and before.gpus[0].zombie_mib == 0
    assert isinstance(after, t.GpuReport) and after.gpus[0].zombie_mib == 2048


# --- Xids --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("readings", "published"),
    [
        ([xid(5), xid(5)], [1, 0]),  # the same record twice (a relist)
        ([xid(5), xid(4)], [1, 0]),  # older than the mark
        ([xid(5), xid(6)], [1, 1]),  # two Xids
        ([xid(5, xid=79), xid(1, source="nvml", xid=79, at=2.0)], [1, 0]),  # merged
        ([xid(1, source="nvml", xid=79), xid(5, xid=79, at=3.0)], [1, 0]),  # merged either way
        ([xid(5, xid=79), xid(1, source="nvml", xid=79, at=7.0)], [1, 1]),  # outside 5 s
        ([xid(5, xid=79), xid(1, source="nvml", xid=48, at=2.0)], [1, 1]),  # another Xid
        ([xid(5, xid=79), xid(1, source="nvml", xid=79, gpu=1, at=2.0)], [1, 1]),  # other GPU
    ],
)
def test_each_xid_is_published_once(readings: list[XidSeen], published: list[int]) -> None:
    steps: list[tuple[float, AnyReading]] = [(1.0, gpus())]
    steps += [(r.at, r) for r in readings]
    _, out = run(steps)
    assert [len(events) for events in out[1:]] == published


def test_an_xid_names_its_gpu_from_the_bus_id_and_keeps_the_drivers_words() -> None:
    seen = xid(2893, bus_id="0000:19:00", pid=None, text="GPU has fallen off the bus.")
    _, out = run([(1.0, gpus()), (1.5, seen)])
    (event,) = out[1]
    assert event == t.XidEvent(
        node=NODE, at=1.0, xid=79, source="kmsg", gpu=1, bus_id="0000:19:00",
        text="GPU has fallen off the bus.", seq=2893,
    )  # fmt: skip


def test_an_nvml_xid_gets_the_bus_id_of_its_gpu() -> None:
    _, out = run([(1.0, gpus()), (1.0, xid(1, source="nvml", gpu=0))])
    (event,) = out[1]
    assert isinstance(event, t.XidEvent) and (event.gpu, event.bus_id) == (0, "0000:18:00")


# --- heartbeats, backends, power ---------------------------------------------------------


def test_heartbeat_every_period_with_a_sequence() -> None:
    _, out = run(
        [(0.0, Tick(at=0.0)), (5.0, Tick(at=5.0)), (10.0, Tick(at=10.0)), (21.0, Tick(at=21.0))]
    )
    beats = [[e for e in events if isinstance(e, t.Heartbeat)] for events in out]
    assert [[b.seq for b in bs] for bs in beats] == [[1], [], [2], [3]]
    first = beats[0][0]
    assert (first.node, first.at, first.started, first.version) == (NODE, 0.0, 0.0, "0.1.0")
    assert first.backends == ("kmsg", "nvml") and first.unavailable == {}


def test_an_unavailable_backend_is_in_the_heartbeat() -> None:
    why = "NVML library (libnvidia-ml.so.1) not found"
    _, out = run([(0.0, Backend(at=0.0, name="nvml", reason=why)), (0.0, Tick(at=0.0))])
    (beat,) = out[1]
    assert isinstance(beat, t.Heartbeat)
    assert beat.backends == ("kmsg",) and beat.unavailable == {"nvml": why}


def test_a_powered_off_node_says_nothing_and_comes_back_as_a_fresh_agent() -> None:
    steps: list[tuple[float, AnyReading]] = [
        (0.0, Tick(at=0.0)),
        (1.0, gpus()),
        (2.0, Power(at=2.0, up=False)),
        (20.0, Tick(at=20.0)),
        (21.0, gpus(gpu(0, temperature_c=90), at=21.0)),
        (22.0, xid(7)),
        (30.0, Power(at=30.0, up=True)),
        (30.0, Tick(at=30.0)),
        (31.0, gpus(at=31.0)),
    ]
    state, out = run(steps)
    assert out[3] == out[4] == out[5] == []
    (beat,) = [e for e in out[7] if isinstance(e, t.Heartbeat)]
    assert (beat.seq, beat.started) == (1, 30.0)
    assert kinds(out[8]) == ["gpu", "node"]  # a fresh agent reports again
    assert state.up


def test_step_leaves_the_state_it_was_given_alone() -> None:
    state = core.initial(CONFIG, started=0.0)
    copy = msgspec.json.encode(state)
    core.step(state, gpus(), 1.0)
    core.step(state, xid(3), 1.0)
    core.step(state, Tick(at=0.0), 0.0)
    assert msgspec.json.encode(state) == copy


def test_msg_ids_are_stable_for_a_retry_and_differ_per_record() -> None:
    beat = t.Heartbeat(node=NODE, at=1.0, seq=4, started=0.5)
    assert t.msg_id(beat, sent=1.0) == t.msg_id(beat, sent=2.0) == "gpu-0001:heartbeat:500000:4"
    one = t.XidEvent(node=NODE, at=1.0, xid=79, source="kmsg", seq=10)
    assert t.msg_id(one, sent=1.0) != t.msg_id(msgspec.structs.replace(one, seq=11), sent=1.0)
