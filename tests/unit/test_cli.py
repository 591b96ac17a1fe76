import datetime as dt

import pytest

from proto.k8s import GPU, Node, NodeEvent, Pod, PodEvent
from services.cli import tail
from services.cli.main import COMMANDS, main
from services.cli.view import ServiceHealth, View, gang_states, gpu_usage, render

pytestmark = pytest.mark.unit


def test_unknown_command_is_refused_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nope"]) == 2
    assert "unknown command 'nope'" in capsys.readouterr().err


def test_every_command_names_an_importable_target() -> None:
    for name, (target, _) in COMMANDS.items():
        module, _, function = target.partition(":")
        assert module.startswith("services.") and function == "run", name


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
    text = render(view, [ServiceHealth("gang", alive=True, ready=True)], elapsed=3)
    assert "running 1" in text
    assert "gang:ok" in text
    assert "placement.placed.v1 t/job" in text


def test_tail_scopes_short_subjects_to_the_cluster() -> None:
    assert tail.full_subject("k8s.pod.>", "c2") == "baton.c2.k8s.pod.>"
    assert tail.full_subject("baton.c1.>", "c2") == "baton.c1.>"


def test_tail_since_durations() -> None:
    now = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
    assert tail.since_start("10m", now) == dt.datetime(2026, 1, 1, 11, 50, tzinfo=dt.UTC)
    with pytest.raises(SystemExit):
        tail.parse_args(["x", "--since", "yesterday"])


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
    assert "gangs     waiting 2  running 1  done 1" in render(view, [], elapsed=0)


def test_up_takes_named_workloads_and_refuses_a_missing_trace(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from services.cli.up import parse_args

    assert parse_args(["--workload", "philly-sample"]).workload == "philly-sample"
    with pytest.raises(SystemExit):
        parse_args(["--workload", "/no/such/trace.csv"])
    assert "--workload '/no/such/trace.csv'" in capsys.readouterr().err


def test_bus_rates_are_messages_since_the_last_update() -> None:
    from services.cli.up import update_rates

    view = View()
    view.counts["k8s"] += 30
    update_rates(view, interval=1.0)
    view.counts["k8s"] += 10
    update_rates(view, interval=2.0)
    assert view.rates == {"k8s": 5.0}
