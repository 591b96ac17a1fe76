"""What `baton up` and `baton status` show, from bus events alone: teams (from admission's
own core), capacity, health, services, decisions; plain and full screen."""

from __future__ import annotations

import io
from typing import Any

import msgspec
import pytest
from rich.console import Console

from baton.proto import keys
from baton.proto.actions import (
    ActionResult,
    CreatePod,
    PodTemplate,
    QueuedGang,
    SetTeamStatus,
    TeamStatus,
)
from baton.proto.admission import GangAdmitted, GangQueued, TeamsLoaded, WebhookServing
from baton.proto.k8s import (
    GPU,
    Node,
    NodeEvent,
    Pod,
    PodEvent,
    PodGroup,
    PodGroupEvent,
    Taint,
)
from baton.proto.runner import Started
from baton.services.admission.teams import parse
from baton.services.cli.screen import draw
from baton.services.cli.stack import SERVICES
from baton.services.cli.view import RECENT, ServiceHealth, View, summarize, teams_now, text

pytestmark = pytest.mark.unit

TEAMS: dict[str, Any] = {
    "teams": [
        {"name": "a", "namespaces": ["team-a"], "pools": ["pa"], "quota": {"gpus": 16}},
        {"name": "b", "namespaces": ["team-b"], "pools": ["pb"]},
    ]
}
WHY = (
    "needs 16 GPUs; team 'a' has 0 of its quota of 16 free and may not borrow: "
    "every word of this reason stays on screen, however long it is"
)


def node(name: str, pool: str, **more: Any) -> NodeEvent:
    labels = {keys.POOL: pool, keys.RACK: "gpu-rack-000"}
    n = Node(name=name, uid=name, labels=labels, allocatable={GPU: 8}, **more)
    return NodeEvent(op="upsert", at=0.0, node=n)


def gang(ns: str, name: str, members: int, *, bound: bool) -> list[Any]:
    notes = {keys.ADMITTED: "true"} if bound else {}
    group = PodGroup(namespace=ns, name=name, uid=name, min_member=members, annotations=notes,
                     created_at=1.0)  # fmt: skip
    out: list[Any] = [PodGroupEvent(op="upsert", at=1.0, pod_group=group)]
    for i in range(members):
        pod = Pod(namespace=ns, name=f"{name}-{i}", uid=f"{name}-{i}", scheduler_name="baton",
                  labels={"scheduling.x-k8s.io/pod-group": name}, requests={GPU: 8},
                  node_name=f"a{i}" if bound else "", phase="Running" if bound else "Pending",
                  created_at=1.0)  # fmt: skip
        out.append(PodEvent(op="upsert", at=1.0, pod=pod))
    return out


def world() -> View:
    view = View()
    for event in (node("a0", "pa"), node("a1", "pa"), node("b0", "pb"),
                  node("b1", "pb", taints=(Taint(key=keys.UNHEALTHY, effect="NoSchedule"),)),
                  node("b2", "pb", ready=False),
                  *gang("team-a", "running", 2, bound=True),
                  *gang("team-a", "next", 2, bound=False)):  # fmt: skip
        view.apply(event)
    return view


def test_team_rows_come_from_admissions_core_and_its_last_word() -> None:
    view = world()
    assert teams_now(view, now=10.0) is None  # no admission on the bus: no team lines
    view.record(TeamsLoaded(config=parse(TEAMS), at=2.0))
    view.record(GangQueued(at=3.0, gang="team-a/next", team="a", reason=WHY, position=0))
    rows = {row.name: row for row in teams_now(view, now=10.0) or ()}
    assert (rows["a"].quota, rows["a"].used, rows["a"].waiting) == (16, 16, 1)
    assert (rows["a"].head, rows["a"].reason) == ("team-a/next", WHY)
    assert (rows["b"].waiting, rows["b"].head) == (0, "")
    view.record(GangAdmitted(at=4.0, gang="team-a/next", team="a", gpus=16))
    assert "team-a/next" not in view.queued  # admitted: admission's reason no longer holds


def test_team_rows_are_read_from_admissions_team_status_once_it_showed_every_team() -> None:
    """What admission shows on each Team object, not a replay of its core over every object
    (a third of a core at 7,500 nodes); the replay only until every team was shown."""
    view = world()
    view.record(TeamsLoaded(config=parse(TEAMS), at=2.0))
    head = QueuedGang(name="team-a/next", position=0, gpus=16, priority=0, reason=WHY)
    shown_a = TeamStatus(quota=16, used=8, borrowed=4, waiting=3, queue=(head,))
    view.record(SetTeamStatus(id="t1", by="admission", at=3.0, team="a", status=shown_a))
    replayed = {row.name: row for row in teams_now(view, now=10.0) or ()}
    assert replayed["a"].used == 16  # b not shown yet: the replay's count
    assert teams_now(view, now=10.0, replay=False) is None  # baton up: admission's word only
    view.record(SetTeamStatus(id="t2", by="admission", at=3.0, team="b",
                              status=TeamStatus(quota=0)))  # fmt: skip
    rows = {row.name: row for row in teams_now(view, now=10.0) or ()}
    assert (rows["a"].quota, rows["a"].used, rows["a"].borrowed, rows["a"].waiting) == (
        16, 8, 4, 3)  # fmt: skip
    assert (rows["a"].head, rows["a"].reason) == ("team-a/next", WHY)
    assert (rows["b"].waiting, rows["b"].head) == (0, "")
    view.record(SetTeamStatus(id="t3", by="admission", at=4.0, team="b", remove=True))
    assert teams_now(view, now=10.0) is not None and "b" not in view.team_status


def test_the_team_config_is_read_from_admissions_start() -> None:
    view = View()
    policy = msgspec.to_builtins(parse(TEAMS))
    view.record(Started(service="admission", at=1.0, k8s_seq=1, history_seq=1, policy=policy,
                        instance="host/42"))  # fmt: skip
    assert view.teams == parse(TEAMS)
    assert view.started["admission"].instance == "host/42"


def test_plain_status_shows_every_section_and_never_cuts_a_reason() -> None:
    view = world()
    view.record(TeamsLoaded(config=parse(TEAMS), at=2.0))
    view.record(GangQueued(at=3.0, gang="team-a/next", team="a", reason=WHY, position=0))
    view.note("12:00:00 placement.placed.v1 team-a/running")
    health = [ServiceHealth("gang", alive=True, ready=True, detail="ops :9107"),
              ServiceHealth("actuator", alive=False, ready=False)]  # fmt: skip
    summary = summarize(view, health, title="baton status", teams=teams_now(view, now=10.0),
                        endpoints=(("NATS", "nats://127.0.0.1:4222"),))  # fmt: skip
    shown = text(summary)
    assert f"a  quota 16  used 16  waiting 1  head team-a/next: {WHY}" in shown
    assert "nodes 5 (4 ready)  gpus 16/40 allocated (40%)" in shown
    assert "pool pa: 2 nodes, 16/16 gpus" in shown
    assert ("quarantined 1 (b1)  draining 0  remediating 0  validating 0  withheld 0  "
            "not ready 1  cordoned 0") in shown  # fmt: skip
    assert "services  gang:ok  actuator:DOWN" in shown
    assert "NATS         nats://127.0.0.1:4222" in shown
    assert "placement.placed.v1 team-a/running" in shown


def test_the_full_screen_keeps_endpoints_and_wraps_long_reasons() -> None:
    view = world()
    view.record(TeamsLoaded(config=parse(TEAMS), at=2.0))
    view.record(GangQueued(at=3.0, gang="team-a/next", team="a", reason=WHY, position=0))
    summary = summarize(view, [ServiceHealth("gang", alive=True, ready=False)], title="baton up",
                        teams=teams_now(view, now=10.0),
                        endpoints=(("gang ops", "http://127.0.0.1:9107/metrics"),))  # fmt: skip
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(draw(summary))
    screen = out.getvalue()
    assert "http://127.0.0.1:9107/metrics" in screen
    assert "starting" in screen
    words = " ".join(screen.replace("│", " ").split())
    assert "however long it is" in words  # wrapped onto more lines, not cut with "…"
    assert "…" not in screen


def test_status_and_access_name_the_actuators_own_consumers() -> None:
    from baton.libs.runner.access import ACTUATOR_CONSUMERS
    from baton.services.actuator.shell import consumers

    assert set(ACTUATOR_CONSUMERS) == set(consumers())


def test_every_action_kind_is_read_by_exactly_one_actuator_consumer() -> None:
    from baton.proto.actions import ACTION_SUBJECTS, MARKING, PLACING, TELLING
    from baton.services.actuator.shell import (
        DURABLE_MARKING,
        DURABLE_PLACING,
        DURABLE_TELLING,
        consumers,
    )

    read = [kind for kinds in consumers().values() for kind in kinds]
    assert sorted(read) == sorted({kind for kind, _ in ACTION_SUBJECTS.values()})
    assert set(consumers()[DURABLE_TELLING]) == TELLING
    assert set(consumers()[DURABLE_PLACING]) == PLACING
    assert set(consumers()[DURABLE_MARKING]) == MARKING


def test_the_full_screen_keeps_the_newest_decisions_in_a_short_terminal() -> None:
    """Eight services and a full cluster panel in a 120x40 terminal: the recent
    decisions keep the newest lines that fit, not the oldest."""
    view = world()
    view.record(TeamsLoaded(config=parse(TEAMS), at=2.0))
    for i in range(RECENT):
        view.note(f"12:00:{i:02d} placement.placed.v1 team-a/job-{i}")
    health = [ServiceHealth(name, alive=True, ready=True, detail=f"ops :{9100 + n}")
              for n, name in enumerate(SERVICES)]  # fmt: skip
    summary = summarize(view, health, title="baton up", teams=teams_now(view, now=10.0),
                        endpoints=(("NATS", "nats://127.0.0.1:4222"),) * 6)  # fmt: skip
    out = io.StringIO()
    console = Console(file=out, width=120, height=40, color_system=None)
    console.print(draw(summary, console=console))
    screen = out.getvalue().splitlines()[:40]  # what the live screen shows
    assert any(f"team-a/job-{RECENT - 1}" in line for line in screen), "\n".join(screen)
    assert all(any(name in line for line in screen) for name in SERVICES)


def preflight_ask(node_name: str, *, at: float) -> CreatePod:
    pod = PodTemplate(namespace="baton-system", name=f"preflight-{node_name}-{int(at):08d}",
                      labels={keys.PREFLIGHT: "true"}, node_name=node_name)  # fmt: skip
    return CreatePod(id=f"preflight-{node_name}-{at}", by="health", at=at, pod=pod)


def create_result(ask: CreatePod, outcome: Any, error: str = "") -> ActionResult:
    return ActionResult(action_id=ask.id, action_type="action.create-pod.v1", by="actuator",
                        at=ask.at + 0.5, outcome=outcome, error=error)  # fmt: skip


def test_status_names_the_nodes_whose_preflight_pod_was_refused_and_why() -> None:
    view = world()
    preflight = (Taint(key=keys.PREFLIGHT, effect="NoSchedule"),)
    for name in ("n0", "n1", "n2"):
        view.apply(node(name, "pn", taints=preflight))
    refused = 'admission webhook "pods.baton.io" denied the request: no team owns baton-system'
    n0, n1 = preflight_ask("n0", at=5.0), preflight_ask("n1", at=5.0)
    for event in (
        n0,
        create_result(n0, "failed", refused),
        n1,
        create_result(n1, "failed", refused),
    ):
        view.record(event)
    n1_again = preflight_ask("n1", at=9.0)  # asked again, and this time it was created
    view.record(n1_again)
    view.record(create_result(n1_again, "applied"))
    view.record(preflight_ask("n2", at=9.0))  # no answer yet: nothing to say
    shown = text(summarize(view, [], title="baton status", teams=None))
    assert "validating 3 (n0, n1, n2)" in shown
    assert f"preflight pod refused 1 (n0): {refused}" in shown


def test_no_refusal_is_shown_for_a_node_that_passed_its_preflight() -> None:
    view = world()
    ask = preflight_ask("a0", at=5.0)  # a0 shows no preflight taint: it passed since
    view.record(ask)
    view.record(create_result(ask, "failed", 'namespaces "baton-system" not found'))
    assert "refused" not in text(summarize(view, [], title="baton status", teams=None))


def unhooked_pod(ns: str, name: str, *, scheduler: str, gang: str = "job") -> PodEvent:
    pod = Pod(namespace=ns, name=name, uid=name, scheduler_name=scheduler,
              labels={"scheduling.x-k8s.io/pod-group": gang} if gang else {},
              requests={GPU: 8}, created_at=1.0)  # fmt: skip
    return PodEvent(op="upsert", at=1.0, pod=pod)


def test_status_says_the_webhook_is_off_when_pods_of_gangs_never_passed_it() -> None:
    """A gang's pod that kept default-scheduler in a team's namespace waits for a scheduler
    that does not run beside Baton: the webhook, which hands every one to Baton, never saw
    it (not registered, or registered without a clientConfig)."""
    view = world()
    view.record(TeamsLoaded(config=parse(TEAMS), at=2.0))
    assert "webhook" not in text(summarize(view, [], title="s", teams=None))  # nothing to say
    for event in (
        unhooked_pod("team-a", "job-0", scheduler="default-scheduler"),
        unhooked_pod("team-a", "job-1", scheduler="volcano"),
        unhooked_pod("team-a", "solo", scheduler="default-scheduler", gang=""),  # no gang
        unhooked_pod("team-a", "passed-0", scheduler="baton"),  # the webhook saw it
        unhooked_pod("elsewhere", "job-0", scheduler="default-scheduler"),  # no team's
    ):
        view.apply(event)
    shown = text(summarize(view, [], title="s", teams=None))
    assert ("2 pods of gangs never passed it and wait for no scheduler (team-a/job-0 kept "
            "schedulerName default-scheduler): is it registered?") in shown, shown  # fmt: skip
    assert "kubectl get mutatingwebhookconfiguration baton" in shown


def test_status_says_whether_admission_serves_its_webhook() -> None:
    view = world()
    view.record(WebhookServing(serving=True, at=1.0, port=8443, instance="h/1"))
    assert "serving on :8443 on h/1" in text(summarize(view, [], title="s", teams=None))
    off = "no TLS certificate (BATON_ADMISSION_TLS_CERT or _TLS_SELF_SIGNED_DIR)"
    view.record(WebhookServing(serving=False, at=2.0, reason=off, instance="h/2"))
    shown = text(summarize(view, [], title="s", teams=None))
    assert f"OFF on h/2: {off}; quotas and team taints still run" in shown
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(
        draw(summarize(view, [], title="s", teams=None))
    )
    assert "OFF on h/2" in out.getvalue()


def test_admissions_word_on_its_webhook_reads_as_a_line() -> None:
    from baton.services.cli.following import describe

    on = msgspec.json.encode(WebhookServing(serving=True, at=1.0, port=8443))
    line = describe("baton.c1.admission.webhook", on)
    assert line.split()[1:] == ["admission.webhook.v1", "serving", "on", ":8443"], line
    off = msgspec.json.encode(WebhookServing(serving=False, at=1.0, reason="no TLS certificate"))
    assert describe("baton.c1.admission.webhook", off).endswith(" OFF reason=no TLS certificate")
