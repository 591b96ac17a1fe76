import datetime as dt
import sys
from pathlib import Path

import pytest

from baton.proto import keys
from baton.proto.health import Control, StateChanged, Withheld
from baton.proto.k8s import GPU, Node, NodeEvent, Pod, PodEvent, Taint
from baton.services.cli import tail
from baton.services.cli.main import COMMANDS, main
from baton.services.cli.processes import CLEAN_RUN_S, Child
from baton.services.cli.view import ServiceHealth, View, gang_states, gpu_usage, summarize, text

pytestmark = pytest.mark.unit


def test_unknown_command_is_refused_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nope"]) == 2
    assert "unknown command 'nope'" in capsys.readouterr().err


def test_every_command_names_an_importable_target() -> None:
    for name, (target, _) in COMMANDS.items():
        module, _, function = target.partition(":")
        assert module.startswith("baton.services.") and function == "run", name


def _pod(name: str, *, node: str = "", phase: str = "Pending", gpus: int = 8) -> PodEvent:
    pod = Pod(namespace="t", name=name, uid=name, node_name=node, phase=phase, requests={GPU: gpus})
    return PodEvent(op="upsert", at=0.0, pod=pod)


def test_view_counts_gpus_of_live_bound_pods_only() -> None:
    view = View()
    view.apply(NodeEvent(op="upsert", at=0.0, node=Node(name="n1", uid="1", allocatable={GPU: 8})))
    view.apply(NodeEvent(op="upsert", at=0.0, node=Node(name="n2", uid="2", allocatable={GPU: 8})))
    view.apply(_pod("a", node="n1", phase="Running"))
    view.apply(_pod("b", node="n2", phase="Succeeded"))
    view.apply(_pod("c"))
    assert gpu_usage(view) == (8, 16)
    view.apply(PodEvent(op="delete", at=0.0, pod=view.pods["t/a"]))
    assert gpu_usage(view) == (0, 16)


def test_render_shows_phases_services_and_recent_decisions() -> None:
    view = View()
    view.apply(_pod("a", node="n1", phase="Running"))
    view.note("placement.placed.v1 t/job")
    health = [ServiceHealth("gang", alive=True, ready=True)]
    shown = text(summarize(view, health, title="baton up", teams=None))
    assert "running 1" in shown
    assert "gang:ok" in shown
    assert "placement.placed.v1 t/job" in shown


def test_recent_lines_are_decisions_and_what_the_actuator_could_not_do() -> None:
    """A busy demo answers ~50 actions a second: "applied" lines pushed every placement
    off the terminal's recent lines between two refreshes."""
    from baton.services.cli.following import worth_a_line

    def result(outcome: str) -> bytes:
        return b'{"type": "result.v1", "outcome": "%s"}' % outcome.encode()

    assert worth_a_line("baton.c1.placement.placed.team-a.job", b"{}")
    assert worth_a_line("baton.c1.health.state.n1", b"{}")
    assert not worth_a_line("baton.c1.result.bind-gang.team-a.job", result("applied"))
    assert not worth_a_line("baton.c1.result.bind-gang.team-a.job", result("stale"))
    assert worth_a_line("baton.c1.result.bind-gang.team-a.job", result("failed"))
    assert worth_a_line("baton.c1.result.bind-gang.team-a.job", result("rolled-back"))
    assert not worth_a_line("baton.c1.action.bind-gang.team-a.job", b"{}")
    assert not worth_a_line("baton.c1.k8s.pod.team-a.p", b"{}")
    # Events over the actuator's budget are dropped by design: 4 lines a second in the demo
    assert not worth_a_line("baton.c1.result.event.pod.team-a.p", result("dropped"))
    assert worth_a_line("baton.c1.result.event.pod.team-a.p", result("failed"))
    assert worth_a_line("baton.c1.result.create-pod.baton-system.b", result("dropped"))


def test_tail_scopes_short_subjects_to_the_cluster() -> None:
    assert tail.full_subject("k8s.pod.>", "c2") == "baton.c2.k8s.pod.>"
    assert tail.full_subject("baton.c1.>", "c2") == "baton.c1.>"


def test_tail_since_durations() -> None:
    now = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
    assert tail.since_start("10m", now) == dt.datetime(2026, 1, 1, 11, 50, tzinfo=dt.UTC)
    with pytest.raises(SystemExit):
        tail.parse_args(["x", "--since", "yesterday"])


def test_tail_starts_history_in_the_consumer_config() -> None:
    from nats.js.api import DeliverPolicy

    now = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
    config = tail.consumer_config("10m", now=now)
    assert config.deliver_policy == DeliverPolicy.BY_START_TIME
    assert config.opt_start_time == dt.datetime(2026, 1, 1, 11, 50, tzinfo=dt.UTC)
    assert tail.consumer_config("last", now=now).deliver_policy == DeliverPolicy.LAST_PER_SUBJECT


def test_tail_shows_the_events_own_time() -> None:
    assert tail.event_time(b'{"type":"x","at":100.5}', stored=200.0, received=300.0) == 100.5
    assert tail.event_time(b'{"type":"x"}', stored=200.0, received=300.0) == 200.0
    assert tail.event_time(b"not json", stored=None, received=300.0) == 300.0
    at = dt.datetime(2026, 1, 1, 12, 0, 1, 250000).timestamp()
    assert tail.stamp(at, now=at + 5) == "12:00:01.250"
    assert tail.stamp(at, now=at + 2 * 86400) == "2026-01-01 12:00:01"


def test_tail_stops_printing_at_count_and_at_a_closed_pipe() -> None:
    import io

    out = io.StringIO()
    printer = tail.Printer(out, count=2)
    for line in ("a", "b", "c"):
        printer.write(line)
    assert out.getvalue() == "a\nb\n" and printer.done.is_set()

    class Closed(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError

    printer = tail.Printer(Closed(), count=None)
    printer.write("a")
    printer.write("b")
    assert printer.closed and printer.done.is_set() and printer.printed == 0


def test_tail_formats_typed_events_for_people() -> None:
    line = tail.format_event(
        "baton.c1.k8s.node.n1", b'{"type":"k8s.node.v1","op":"upsert"}', as_json=False
    )
    assert line == "baton.c1.k8s.node.n1  k8s.node.v1  op=upsert"


def test_gangs_are_waiting_running_or_done_by_their_pods() -> None:
    view = View()
    for name, node, phase in (
        ("a-0", "n1", "Running"),
        ("a-1", "", "Pending"),  # partly bound still counts as running (being placed)
        ("b-0", "", "Pending"),
        ("c-0", "n2", "Succeeded"),
    ):
        gang = name.split("-")[0]
        pod = Pod(namespace="t", name=name, uid=name, node_name=node, phase=phase,
                  labels={"scheduling.x-k8s.io/pod-group": gang})  # fmt: skip
        view.apply(PodEvent(op="upsert", at=0.0, pod=pod))
    lone = Pod(namespace="t", name="solo", uid="s", scheduler_name="baton")
    view.apply(PodEvent(op="upsert", at=0.0, pod=lone))
    assert gang_states(view) == {"running": 1, "waiting": 2, "done": 1}
    assert "gangs waiting 2  running 1  done 1" in text(summarize(view, [], title="", teams=None))


def test_up_takes_named_workloads_and_refuses_a_missing_trace(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from baton.services.cli.up import parse_args

    assert parse_args(["--workload", "philly-sample"]).workload == "philly-sample"
    llm = parse_args(["--workload", "llm"])
    assert (llm.workload, llm.submit) == ("llm", None)  # simcluster's default: controllers
    assert parse_args(["--submit", "controllers"]).submit == "controllers"
    with pytest.raises(SystemExit):
        parse_args(["--workload", "/no/such/trace.csv"])
    assert "--workload '/no/such/trace.csv'" in capsys.readouterr().err


def test_up_passes_the_offered_load_to_simcluster_and_refuses_none(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from baton.services.cli.stack import Stack, start_sim
    from baton.services.cli.up import parse_args

    args = parse_args(["--nodes", "8", "--load", "1.3"])
    stack = Stack(run_dir=tmp_path)
    started: list[list[str]] = []
    stack.start = lambda child: started.append(child.argv) or child  # type: ignore[method-assign,func-returns-value]
    (tmp_path / "kubeconfig").write_text("")  # as if simcluster had come up
    start_sim(args, stack)
    argv = started[0]
    assert argv[argv.index("--load") + 1] == "1.3"
    assert argv[argv.index("--register-with-taints") + 1] == "baton.io/preflight=:NoSchedule"
    with pytest.raises(SystemExit):
        parse_args(["--load", "0"])
    assert "--load: expected > 0" in capsys.readouterr().err


def test_bus_rates_are_messages_since_the_last_update() -> None:
    from baton.services.cli.up import update_rates

    view = View()
    view.counts["k8s"] += 30
    update_rates(view, interval=1.0)
    view.counts["k8s"] += 10
    update_rates(view, interval=2.0)
    assert view.rates == {"k8s": 5.0}


def test_render_shows_quarantined_draining_and_withheld_nodes() -> None:
    view = View()
    marks = {
        "n1": ((Taint(key=keys.UNHEALTHY),), {}),
        "n2": ((Taint(key=keys.UNHEALTHY), Taint(key=keys.DRAINING, effect="NoExecute")), {}),
        "n3": ((Taint(key=keys.UNHEALTHY), Taint(key=keys.DRAINING, effect="NoExecute")),
               {keys.REMEDIATION: "reboot"}),
        "n4": ((Taint(key=keys.PREFLIGHT),), {}),
        "n5": ((), {}),
    }  # fmt: skip
    for name, (taints, labels) in marks.items():
        node = Node(name=name, uid=name, taints=taints, labels=labels)
        view.apply(NodeEvent(op="upsert", at=0.0, node=node))
    view.record(Withheld(node="n5", at=1.0, would="quarantine", rail="rack", reason="full"))
    view.record(Control(at=2.0, paused=True))
    shown = text(summarize(view, [], title="baton up", teams=None))
    assert ("health    quarantined 1 (n1)  draining 1 (n2)  remediating 1 (n3)  validating 1 (n4)"
            "  withheld 1  not ready 0  cordoned 0  PAUSED") in shown  # fmt: skip
    view.record(StateChanged(node="n5", at=3.0, state="healthy", previous="withheld", reason="ok"))
    assert "withheld 0" in text(summarize(view, [], title="baton up", teams=None))


def _crashing_child(tmp_path: Path) -> Child:
    return Child("crashes", [sys.executable, "-c", "pass"], tmp_path / "crashes.log")


def _crash_and_revive(child: Child, *, ran: float) -> float:
    """The child dies ``ran`` seconds after it started; the back-off it waits, then it is
    started again (revive sees the death, then the back-off's end)."""
    assert child.process is not None
    child.process.wait()
    died = child.started_at + ran
    assert not child.revive(died)
    waited = child.next_start - died
    assert child.revive(child.next_start)
    return waited


def test_up_restart_back_off_doubles_and_resets_after_a_clean_run(tmp_path: Path) -> None:
    child = _crashing_child(tmp_path)
    child.start()
    quick = [_crash_and_revive(child, ran=0.5) for _ in range(6)]
    assert quick == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
    # a clean run of CLEAN_RUN_S forgets the crashes before it
    assert _crash_and_revive(child, ran=CLEAN_RUN_S) == 1.0
    assert _crash_and_revive(child, ran=0.5) == 2.0
    child.process.wait()  # type: ignore[union-attr]


def test_baton_ups_nats_server_gets_a_go_memory_limit_unless_the_user_set_one() -> None:
    from baton.services.cli.stack import NATS_MEMORY_LIMIT, nats_env

    assert nats_env({}) == {"GOMEMLIMIT": NATS_MEMORY_LIMIT}
    assert nats_env({"GOMEMLIMIT": "off"}) == {}  # theirs stands, "off" included
